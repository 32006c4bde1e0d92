//! Admissions and releases, each on a task of its own that takes everything queued as one group.
//!
//! An admission group is one transaction in two round trips. The first sends, pipelined, `BEGIN`,
//! the advisory locks of the group's tenants (sorted: two processes never wait for each other in
//! a cycle), a check that this process's lease is fresh (its row is read `FOR SHARE`, so no
//! reaper deletes it before the commit), the tenants' unfinished calls, and one admission number
//! per call. The server runs them in order, so the read starts once the locks are held and sees
//! every admission committed before. Conflicts are then decided here, with the kernel's own
//! pattern code; the second round trip inserts every row with one statement and commits.
//!
//! A call the database cannot hold fails alone: a NUL (which PostgreSQL's text refuses) is
//! caught before the transaction, and a group the server refuses for its data is admitted again
//! one call at a time. A group whose commit was never answered is doubtful: its calls end
//! `domain-unavailable` here, and are marked failed in the database once it answers again.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Value};
use sluice_kernel::access::{Access, Pattern};
use sluice_kernel::model::EffectKind;
use sluice_kernel::order::first_conflict;
use sluice_kernel::order::shared::{AdmitRequest, Admitted, Refusal};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::types::ToSql;

use crate::connection::{refused_by_server, refused_for_its_data, why};
use crate::listener;
use crate::state::{with_timeout, Inner, Session};

/// The advisory lock key space of a tenant's admissions (keyed by the deployment's schema and
/// the tenant's name hashed with it); provenance appends use their own.
pub(crate) const ADMIT_LOCK_SEED: i64 = 7262;

/// Most calls in one admission group.
const MAX_GROUP: usize = 512;

/// One admission on its way to the admission task.
pub(crate) struct Pending {
    pub(crate) request: AdmitRequest,
    pub(crate) reply: oneshot::Sender<Result<Admitted, Refusal>>,
}

/// One release on its way to the release task.
pub(crate) struct Release {
    pub(crate) ticket: u64,
    pub(crate) failed: bool,
    pub(crate) done: oneshot::Sender<Result<(), String>>,
}

/// Accesses as stored: `[["writes", "kv:x"], ...]`.
pub(crate) fn accesses_json(accesses: &[Access]) -> Value {
    Value::Array(
        accesses
            .iter()
            .map(|a| json!([a.kind.as_str(), a.resource.to_text()]))
            .collect(),
    )
}

/// Accesses read back; an entry this version cannot read conflicts with everything (safe).
pub(crate) fn accesses_of(v: &Value) -> Vec<Access> {
    let everything = || vec![Access::new(EffectKind::Writes, Pattern::any())];
    let Some(list) = v.as_array() else {
        return everything();
    };
    let mut out = Vec::with_capacity(list.len());
    for a in list {
        let kind = a
            .get(0)
            .cloned()
            .and_then(|k| serde_json::from_value::<EffectKind>(k).ok());
        let pattern = a.get(1).and_then(Value::as_str).map(Pattern::parse);
        match (kind, pattern) {
            (Some(k), Some(Ok(p))) => out.push(Access::new(k, p)),
            _ => return everything(),
        }
    }
    out
}

/// Why a request cannot be stored at all: PostgreSQL's text holds no NUL.
fn unstorable(r: &AdmitRequest) -> Option<String> {
    let nul = |s: &str| s.contains('\0');
    let what = if nul(&r.call) {
        "its call id"
    } else if nul(&r.tool) {
        "its tool id"
    } else if nul(&r.tenant) || nul(&r.batch) {
        "its tenant or batch"
    } else if r.accesses.iter().any(|a| nul(&a.resource.to_text())) {
        "a resource it accesses"
    } else {
        return None;
    };
    Some(format!(
        "{what} holds a NUL character (\\u0000), which the shared domain's database cannot store"
    ))
}

/// An unfinished call as admission reads it: (ticket, accesses, call id).
type Unfinished = (u64, Vec<Access>, String);

/// How a group's transaction ended when it did not commit.
enum Failed {
    /// The lease this process admitted under lapsed: nothing was admitted.
    Lapsed,
    /// The server refused a statement: nothing was admitted.
    Refused(tokio_postgres::Error),
    /// The connection failed or did not answer: the outcome is unknown.
    Unknown(String),
}

/// The admission task: takes every admission waiting and admits them as one group.
pub(crate) async fn admissions(inner: Arc<Inner>, mut rx: mpsc::UnboundedReceiver<Pending>) {
    while let Some(first) = rx.recv().await {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(more) => group.push(more),
                Err(_) => break,
            }
        }
        group.retain_mut(|p| match unstorable(&p.request) {
            None => true,
            Some(why) => {
                let (tx, _) = oneshot::channel();
                let reply = std::mem::replace(&mut p.reply, tx);
                let _ = reply.send(Err(Refusal::Invalid(why)));
                false
            }
        });
        if group.is_empty() {
            continue;
        }
        let session = match inner.session_within().await {
            Ok(s) => s,
            Err(why) => {
                for p in group {
                    let _ = p.reply.send(Err(Refusal::Unavailable(why.clone())));
                }
                continue;
            }
        };
        admit(&inner, &session, group).await;
    }
}

/// Admits a group; a group the server refuses for its data is admitted again call by call, so
/// that one bad call fails alone.
async fn admit(inner: &Arc<Inner>, session: &Session, group: Vec<Pending>) {
    match admit_group(inner, session, &group).await {
        Ok(admitted) => {
            for (p, a) in group.into_iter().zip(admitted) {
                let _ = p.reply.send(Ok(a));
            }
        }
        Err(Failed::Refused(e)) if refused_for_its_data(&e) && group.len() > 1 => {
            for p in group {
                Box::pin(admit(inner, session, vec![p])).await;
            }
        }
        Err(failed) => {
            let refusal = match failed {
                Failed::Lapsed => {
                    inner.renew.notify_one();
                    Refusal::Unavailable(inner.lapsed())
                }
                Failed::Refused(e) if refused_for_its_data(&e) => Refusal::Invalid(format!(
                    "the shared domain's database cannot store this call: {}",
                    why(&e)
                )),
                Failed::Refused(e) => Refusal::Unavailable(format!(
                    "the database {}: {}",
                    inner.target.shown,
                    why(&e)
                )),
                Failed::Unknown(why) => {
                    let owner = inner.lease().owner.clone();
                    inner.doubtful().extend(group.iter().map(|p| {
                        (
                            owner.clone(),
                            p.request.batch.clone(),
                            p.request.call.clone(),
                        )
                    }));
                    Refusal::Unavailable(why)
                }
            };
            for p in group {
                let _ = p.reply.send(Err(refusal.clone()));
            }
        }
    }
}

/// One transaction for the group (see the module docs): each call admitted, in the group's order.
async fn admit_group(
    inner: &Arc<Inner>,
    session: &Session,
    group: &[Pending],
) -> Result<Vec<Admitted>, Failed> {
    let st = &session.admit_statements;
    let client = &session.admit;
    let (owner, incarnation) = {
        let l = inner.lease();
        (l.owner.clone(), l.incarnation)
    };
    let mut tenants: Vec<&str> = group.iter().map(|p| &*p.request.tenant).collect();
    tenants.sort_unstable();
    tenants.dedup();
    let n = group.len() as i32;
    let owner_arg: &str = &owner;
    let prefix: &str = &inner.names.lock_prefix;
    let lock_args: [&(dyn ToSql + Sync); 3] = [&tenants, &ADMIT_LOCK_SEED, &prefix];
    let fresh_args: [&(dyn ToSql + Sync); 1] = [&owner_arg];
    let open_args: [&(dyn ToSql + Sync); 1] = [&tenants];
    let numbers_args: [&(dyn ToSql + Sync); 1] = [&n];
    let first = async {
        futures::join!(
            client.execute(&st.begin, &[]),
            client.execute(&st.lock, &lock_args),
            client.query(&st.fresh, &fresh_args),
            client.query(&st.open, &open_args),
            client.query(&st.numbers, &numbers_args),
        )
    };
    let (begun, locked, fresh, open, numbers) =
        match tokio::time::timeout(inner.options.unavailable_after, first).await {
            Ok(r) => r,
            Err(_) => {
                let text = inner.unreachable();
                session.kill(text.clone());
                return Err(Failed::Unknown(text));
            }
        };
    let (open, numbers) = match (begun, locked, fresh, open, numbers) {
        (Ok(_), Ok(_), Ok(fresh), Ok(open), Ok(numbers)) => {
            if fresh.is_empty() {
                let _ = with_timeout(inner, session, client.batch_execute("ROLLBACK")).await;
                return Err(Failed::Lapsed);
            }
            (open, numbers)
        }
        (Err(e), ..) | (_, Err(e), ..) => return Err(failed(inner, session, e).await),
        (_, _, Err(e), ..) | (_, _, _, Err(e), _) | (.., Err(e)) => {
            return Err(failed(inner, session, e).await)
        }
    };
    // Each tenant's unfinished calls, in admission order: (ticket, accesses, call id).
    let mut unfinished: HashMap<&str, Vec<Unfinished>> =
        tenants.iter().map(|t| (*t, Vec::new())).collect();
    for row in &open {
        let tenant: &str = row.get(0);
        let t: i64 = row.get(1);
        let a: Value = row.get(2);
        let call: String = row.get(3);
        if let Some(calls) = unfinished.get_mut(tenant) {
            calls.push((t as u64, accesses_of(&a), call));
        }
    }
    let mut tickets: Vec<i64> = numbers.iter().map(|r| r.get::<_, i64>(0)).collect();
    tickets.sort_unstable();
    let mut waits: Vec<Vec<(u64, String)>> = Vec::with_capacity(group.len());
    let (mut t_col, mut tenant_col, mut batch_col, mut call_col, mut tool_col) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut access_col, mut waits_col) = (Vec::new(), Vec::new());
    for (p, ticket) in group.iter().zip(&tickets) {
        let r = &p.request;
        let Some(calls) = unfinished.get_mut(&*r.tenant) else {
            return Err(Failed::Unknown(
                "a tenant of the group was not locked".into(),
            ));
        };
        let preds: Vec<(u64, String)> = calls
            .iter()
            .filter(|(_, earlier, _)| first_conflict(earlier, &r.accesses).is_some())
            .map(|(t, _, c)| (*t, c.clone()))
            .collect();
        calls.push((*ticket as u64, r.accesses.clone(), r.call.clone()));
        t_col.push(*ticket);
        tenant_col.push(&*r.tenant);
        batch_col.push(&*r.batch);
        call_col.push(r.call.as_str());
        tool_col.push(r.tool.as_str());
        access_col.push(accesses_json(&r.accesses));
        waits_col.push(Value::from(
            preds.iter().map(|(t, _)| *t).collect::<Vec<u64>>(),
        ));
        waits.push(preds);
    }
    // Fault injection for the tests (docs/testing.md): a pause here leaves the transaction
    // open, holding the tenants' advisory locks and this process's owner row, as a process
    // stopped or lost between the two round trips would.
    if let Some(pause) = inner.fault_pause_in_admission {
        tokio::time::sleep(pause).await;
    }
    let insert_args: [&(dyn ToSql + Sync); 8] = [
        &t_col,
        &tenant_col,
        &batch_col,
        &call_col,
        &tool_col,
        &owner_arg,
        &access_col,
        &waits_col,
    ];
    let second = async {
        futures::join!(
            client.execute(&st.insert, &insert_args),
            client.execute(&st.commit, &[]),
        )
    };
    let (inserted, committed) =
        match tokio::time::timeout(inner.options.unavailable_after, second).await {
            Ok(r) => r,
            Err(_) => {
                let text = inner.unreachable();
                session.kill(text.clone());
                return Err(Failed::Unknown(text));
            }
        };
    // A refused insert aborts the transaction: the COMMIT after it rolls back.
    if let Err(e) = inserted.and(committed) {
        return Err(if refused_by_server(&e) {
            Failed::Refused(e)
        } else {
            let text = format!("the database {}: {}", inner.target.shown, why(&e));
            session.kill(text.clone());
            Failed::Unknown(text)
        });
    }
    let calls: Vec<(u64, Vec<(u64, String)>)> =
        tickets.iter().map(|t| *t as u64).zip(waits).collect();
    let readies = listener::register(inner, incarnation, calls);
    Ok(tickets
        .iter()
        .zip(readies)
        .map(|(t, ready)| Admitted {
            ticket: *t as u64,
            ready,
        })
        .collect())
}

/// A statement of the group failed: the server refused it (roll the transaction back; nothing
/// was admitted), or the connection failed (the outcome is unknown; the session ends).
async fn failed(inner: &Inner, session: &Session, e: tokio_postgres::Error) -> Failed {
    if refused_by_server(&e) {
        let _ = with_timeout(inner, session, session.admit.batch_execute("ROLLBACK")).await;
        Failed::Refused(e)
    } else {
        let text = format!("the database {}: {}", inner.target.shown, why(&e));
        session.kill(text.clone());
        Failed::Unknown(text)
    }
}

/// The release task: sends every release waiting in one statement; what could not be sent is
/// kept and sent again once the database answers (a release is idempotent: it ends only a call
/// still admitted).
pub(crate) async fn releases(inner: Arc<Inner>, mut rx: mpsc::UnboundedReceiver<Release>) {
    let mut unsent: Vec<(u64, bool)> = Vec::new();
    let mut sessions = inner.session.subscribe();
    let mut closed = inner.closed.subscribe();
    loop {
        let mut batch = Vec::new();
        tokio::select! {
            // A closed domain's connections are gone: what is unsent is its lease's to end.
            _ = closed.wait_for(|c| *c) => {
                rx.close();
                while let Ok(r) = rx.try_recv() {
                    let _ = r.done.send(Err(inner.unreachable()));
                }
                return;
            }
            r = rx.recv() => match r {
                Some(first) => batch.push(first),
                None if unsent.is_empty() => return,
                None => {}
            },
            changed = sessions.changed(), if !unsent.is_empty() => {
                if changed.is_err() {
                    return;
                }
            }
        }
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        unsent.extend(batch.iter().map(|r| (r.ticket, r.failed)));
        let sent = match inner.current() {
            Some(s) if !s.is_dead() => {
                let tickets: Vec<i64> = unsent.iter().map(|(t, _)| *t as i64).collect();
                let states: Vec<&str> = unsent
                    .iter()
                    .map(|(_, f)| if *f { "failed" } else { "ok" })
                    .collect();
                with_timeout(
                    &inner,
                    &s,
                    s.control.query(
                        &s.control_statements.release,
                        &[&tickets, &states, &inner.names.channel.as_str()],
                    ),
                )
                .await
                .map(|_| ())
            }
            _ => Err(inner.unreachable()),
        };
        match &sent {
            Ok(()) => unsent.clear(),
            Err(why) => {
                tracing::warn!(error = %why, releases = unsent.len(),
                    "releases not sent; they are sent again when the database answers");
            }
        }
        for r in batch {
            let _ = r.done.send(sent.clone());
        }
    }
}
