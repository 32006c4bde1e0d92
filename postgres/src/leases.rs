//! The supervisor: this process's lease, the reaping of processes whose lease ran out, and the
//! reconnection after a fault.
//!
//! Each process's row in `sluice_owners` holds its own expiry (`expires_at`, set by the database
//! on every heartbeat to its `now()` plus that process's lease), so a process with a short lease
//! never judges one with a long lease by its own. A heartbeat that finds the row gone means the
//! lease lapsed and the others marked this process's calls `lost`: every call still waiting here
//! fails, and a new lease under a new name begins. When a connection fails, the supervisor
//! reconnects with backoff (50 ms doubling to 1 s), renews or replaces the lease, marks failed
//! the admissions whose outcome it never heard, and re-checks the waiting calls.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::state::{with_timeout, Inner, Lease, Session};

/// A fresh name for a lease of this process.
pub(crate) fn new_owner_name() -> String {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        // No randomness: the clock's nanoseconds still tell two leases of one process apart.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default();
        bytes = nanos.to_le_bytes();
    }
    format!("{}-{}", std::process::id(), hex::encode(bytes))
}

/// Renews this process's lease on `session`, or (`fresh`, or when the renewal finds it lapsed)
/// starts a new one under a new name; a lapsed lease fails every call still waiting under it.
pub(crate) async fn register(
    inner: &Arc<Inner>,
    session: &Session,
    fresh: bool,
) -> Result<(), String> {
    let secs = inner.options.lease.as_secs_f64();
    let st = &session.control_statements;
    if !fresh {
        let owner = inner.lease().owner.clone();
        let sent = Instant::now();
        let renewed = with_timeout(
            inner,
            session,
            session.control.execute(&st.heartbeat, &[&&*owner, &secs]),
        )
        .await?;
        if renewed == 1 {
            let mut l = inner.lease();
            if l.owner == owner {
                l.fresh_until = sent + inner.options.lease;
            }
            return Ok(());
        }
        let why = inner.lapsed();
        tracing::error!(error = %why, "this process's lease lapsed; starting a new one");
        inner.fail_waiters(|_| true, &why);
    }
    let owner: Arc<str> = new_owner_name().into();
    let sent = Instant::now();
    with_timeout(
        inner,
        session,
        session.control.execute(&st.register, &[&&*owner, &secs]),
    )
    .await?;
    let mut l = inner.lease();
    *l = Lease {
        owner,
        incarnation: l.incarnation + 1,
        fresh_until: sent + inner.options.lease,
    };
    Ok(())
}

/// Marks the calls of processes whose lease ran out `lost` (and announces them).
async fn reap(inner: &Inner, session: &Session) -> Result<(), String> {
    let lost = with_timeout(
        inner,
        session,
        session.control.query(
            &session.control_statements.reap,
            &[&inner.names.channel.as_str()],
        ),
    )
    .await?;
    if !lost.is_empty() {
        tracing::warn!(
            calls = lost.len(),
            "marked the calls of a lost process lost"
        );
    }
    Ok(())
}

/// Marks failed the admissions whose outcome this process never heard (they did not run here).
async fn settle_doubtful(inner: &Inner, session: &Session) -> Result<(), String> {
    let doubtful = std::mem::take(&mut *inner.doubtful());
    if doubtful.is_empty() {
        return Ok(());
    }
    let owners: Vec<&str> = doubtful.iter().map(|d| &*d.0).collect();
    let batches: Vec<&str> = doubtful.iter().map(|d| &*d.1).collect();
    let calls: Vec<&str> = doubtful.iter().map(|d| d.2.as_str()).collect();
    let done = with_timeout(
        inner,
        session,
        session.control.query(
            &session.control_statements.settle_doubtful,
            &[&owners, &batches, &calls, &inner.names.channel.as_str()],
        ),
    )
    .await;
    if done.is_err() {
        inner.doubtful().extend(doubtful);
    }
    done.map(|_| ())
}

/// The supervisor's loop: heartbeats and reaping while the session lives; reconnection with
/// backoff when it dies; until the domain is closed.
pub(crate) async fn supervise(inner: Arc<Inner>, first: Arc<Session>) {
    let mut session = Some(first);
    let mut closed = inner.closed.subscribe();
    tokio::spawn(watchdog(Arc::downgrade(&inner)));
    loop {
        if let Some(s) = session.take() {
            let ended = tokio::select! {
                why = keep(&inner, &s) => Some(why),
                _ = closed.wait_for(|c| *c) => None,
            };
            match ended {
                None => return,
                Some(why) => {
                    s.kill(why.clone());
                    inner.went_down(why);
                }
            }
        }
        let mut backoff = Duration::from_millis(50);
        while session.is_none() {
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = closed.wait_for(|c| *c) => return,
            }
            backoff = (backoff * 2).min(Duration::from_secs(1));
            let opened = match Session::open(&inner).await {
                Ok(s) => match register(&inner, &s, false).await {
                    Ok(()) => Ok(s),
                    Err(why) => Err(why),
                },
                Err(why) => Err(why),
            };
            match opened {
                Ok(s) => {
                    if inner.is_closed() {
                        return;
                    }
                    tracing::info!(url = %inner.target.shown, "the shared conflict domain reached its database again");
                    inner.up(s.clone());
                    session = Some(s);
                }
                Err(why) => inner.went_down(why),
            }
        }
    }
}

/// Keeps a live session: right away the settling of doubtful admissions and a check of the
/// waiters (what was missed while down), then every third of the lease (or at once when an
/// admission found the lease lapsed) the heartbeat, the reaping and the check. Returns why the
/// session ended.
async fn keep(inner: &Arc<Inner>, s: &Arc<Session>) -> String {
    let _ = settle_doubtful(inner, s).await;
    let _ = inner.check(s).await;
    let mut tick = tokio::time::interval(inner.options.lease / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            why = s.died() => return why,
            _ = tick.tick() => {}
            _ = inner.renew.notified() => {}
        }
        if let Err(why) = register(inner, s, false).await {
            tracing::warn!(error = %why, "a heartbeat failed");
            continue;
        }
        if let Err(why) = reap(inner, s).await {
            tracing::warn!(error = %why, "looking for lost processes failed");
        }
        if let Err(why) = settle_doubtful(inner, s).await {
            tracing::warn!(error = %why, "marking unknown admissions failed did not work");
        }
        if let Err(why) = inner.check(s).await {
            tracing::warn!(error = %why, "re-checking the waiting calls failed");
        }
    }
}

/// While the database is unreachable for longer than [`crate::PgOptions::unavailable_after`],
/// the waiting calls end (`domain-unavailable`): nobody can tell them their predecessors ended.
async fn watchdog(inner: std::sync::Weak<Inner>) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        if inner.is_closed() {
            return;
        }
        if inner
            .down_for()
            .is_some_and(|d| d >= inner.options.unavailable_after)
            && !inner.lock_waiters().is_empty()
        {
            let why = inner.unreachable();
            inner.fail_waiters(|_| true, &why);
        }
    }
}
