//! The local calls waiting for calls of any process: woken by the releases' notifications
//! (`<ticket> <failed 0|1>`: fixed-size numbers, never a caller's text, so no call id or
//! resource can push a payload over PostgreSQL's limit), and re-checked against the table after
//! a waiter registers, on every heartbeat and after a reconnect (a notification missed is
//! caught there).
//!
//! A waiter resolves only while the lease it was admitted under is this process's current one
//! and fresh: a process resumed after a pause longer than its lease, whose calls the others
//! have marked `lost` and whose successors have run, starts none of them.

use std::collections::HashSet;
use std::sync::Arc;

use tokio::sync::oneshot;

use crate::state::{with_timeout, Inner, Session, Waiter};
use sluice_kernel::order::shared::SharedFuture;
use sluice_kernel::Error;

impl Inner {
    /// A notification: `<ticket> <failed 0|1>`.
    pub(crate) fn notified(&self, payload: &str) {
        let mut parts = payload.split(' ');
        let ticket = parts.next().and_then(|t| t.parse::<u64>().ok());
        let failed = parts.next() == Some("1");
        if let Some(t) = ticket {
            self.ended(t, failed);
        }
    }

    /// A call of some process ended: the local calls waiting for it wait for one fewer.
    pub(crate) fn ended(&self, ticket: u64, failed: bool) {
        let mut waiters = self.lock_waiters();
        let mut ready = Vec::new();
        for (t, w) in waiters.iter_mut() {
            if w.remaining.remove(&ticket) {
                if failed && w.failed.is_none() {
                    w.failed = Some(
                        w.names
                            .get(&ticket)
                            .cloned()
                            .unwrap_or_else(|| format!("ticket {ticket}")),
                    );
                }
                if w.remaining.is_empty() {
                    ready.push(*t);
                }
            }
        }
        for t in ready {
            if let Some(mut w) = waiters.remove(&t) {
                let answer = if self.lease_ok(w.incarnation) {
                    Ok(w.failed.take())
                } else {
                    Err(self.lapsed())
                };
                if let Some(tx) = w.tx.take() {
                    let _ = tx.send(answer);
                }
            }
        }
    }

    pub(crate) fn lapsed(&self) -> String {
        format!(
            "this process's lease in {} lapsed (a pause or an outage longer than {:?}): the \
             calls it had admitted were marked lost and do not run",
            self.target.shown, self.options.lease
        )
    }

    /// Ends every waiter `which` picks with `why`.
    pub(crate) fn fail_waiters(&self, which: impl Fn(&Waiter) -> bool, why: &str) {
        let mut waiters = self.lock_waiters();
        let gone: Vec<u64> = waiters
            .iter()
            .filter(|(_, w)| which(w))
            .map(|(t, _)| *t)
            .collect();
        for t in gone {
            if let Some(mut w) = waiters.remove(&t) {
                if let Some(tx) = w.tx.take() {
                    let _ = tx.send(Err(why.to_owned()));
                }
            }
        }
    }

    /// Asks the database which of the waiters' predecessors have ended, and whether any
    /// waiter's own call was marked `lost` (its lease lapsed: it fails, it does not run).
    pub(crate) async fn check(&self, session: &Session) -> Result<(), String> {
        let (own, preds): (Vec<i64>, Vec<i64>) = {
            let waiters = self.lock_waiters();
            let own = waiters.keys().map(|t| *t as i64).collect();
            let preds: HashSet<i64> = waiters
                .values()
                .flat_map(|w| w.remaining.iter().map(|t| *t as i64))
                .collect();
            (own, preds.into_iter().collect())
        };
        if own.is_empty() {
            return Ok(());
        }
        let mut tickets = own.clone();
        tickets.extend(preds);
        let rows = with_timeout(
            self,
            session,
            session
                .control
                .query(&session.control_statements.check, &[&tickets]),
        )
        .await?;
        let own: HashSet<i64> = own.into_iter().collect();
        let mut ended = Vec::new();
        for row in rows {
            let ticket: i64 = row.get(0);
            let state: &str = row.get(1);
            if own.contains(&ticket) && state != "admitted" {
                // Only a reaper ends a waiting call's row: its lease lapsed.
                let why = self.lapsed();
                if let Some(mut w) = self.lock_waiters().remove(&(ticket as u64)) {
                    if let Some(tx) = w.tx.take() {
                        let _ = tx.send(Err(why));
                    }
                }
            }
            if state != "admitted" {
                ended.push((ticket as u64, state != "ok"));
            }
        }
        for (ticket, failed) in ended {
            self.ended(ticket, failed);
        }
        Ok(())
    }
}

/// Registers the waiters of a group just admitted; a check follows (a release announced before
/// a waiter existed is caught there). Returns each call's readiness.
pub(crate) fn register(
    inner: &Arc<Inner>,
    incarnation: u64,
    calls: Vec<(u64, Vec<(u64, String)>)>,
) -> Vec<SharedFuture<Result<Option<String>, Error>>> {
    let mut out = Vec::with_capacity(calls.len());
    let mut any = false;
    inner
        .admitted
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .extend(calls.iter().map(|(ticket, _)| (*ticket, incarnation)));
    let mut waiters = inner.lock_waiters();
    for (ticket, preds) in calls {
        if preds.is_empty() {
            out.push(Box::pin(async { Ok(None) }) as SharedFuture<_>);
            continue;
        }
        any = true;
        let (tx, rx) = oneshot::channel();
        waiters.insert(
            ticket,
            Waiter {
                incarnation,
                remaining: preds.iter().map(|(t, _)| *t).collect(),
                names: preds.into_iter().collect(),
                failed: None,
                tx: Some(tx),
            },
        );
        let url = inner.target.shown.clone();
        out.push(Box::pin(async move {
            rx.await
                .unwrap_or_else(|_| Err(format!("the shared domain {url} stopped")))
                .map_err(|why| Error::SharedDomainFailed { why })
        }));
    }
    drop(waiters);
    if any {
        let inner = inner.clone();
        tokio::spawn(async move {
            if let Some(session) = inner.current() {
                if let Err(why) = inner.check(&session).await {
                    tracing::warn!(error = %why, "could not check the waiting calls' predecessors; the heartbeat will");
                }
            }
        });
    }
    out
}
