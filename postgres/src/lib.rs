//! Sluice on PostgreSQL: a conflict domain shared by every process that points at one database.
//!
//! Each process keeps its own in-memory domain for its own calls; [`PgDomain`] adds the one the
//! processes share (the kernel's [`SharedDomain`] seam). Admission, in one transaction per
//! group of calls, takes a per-tenant advisory lock, reads the tenant's unfinished calls, gives
//! each new call the next admission number and the list of earlier unfinished calls it conflicts
//! with (the kernel's own pattern semantics, globs included), and inserts it. A call then waits
//! until each of those has ended, woken by `LISTEN`/`NOTIFY`; a process heartbeats its lease, and
//! any process marks the unfinished calls of a process whose lease ran out `lost`, which releases
//! their successors. A process that cannot reach the database admits nothing: its calls end
//! `domain-unavailable` (fail closed). The admission number is the call's fencing token.
//!
//! ```no_run
//! use std::time::Duration;
//! use sluice_kernel::{builtin, Kernel};
//! use sluice_postgres::PgDomain;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let domain = PgDomain::connect("postgres://sluice@127.0.0.1:5432/sluice", Duration::from_secs(10))
//!     .await?;
//! let kernel = Kernel::builder()
//!     .tools(builtin::registry(builtin::BuiltinConfig::default())?)
//!     .shared_domain(domain.clone())
//!     .build()?;
//! // ... run batches: conflicting calls of a tenant never overlap across processes ...
//! domain.close().await;
//! # Ok(()) }
//! ```

mod provenance;
mod schema;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use sluice_kernel::access::{Access, Pattern};
use sluice_kernel::model::EffectKind;
use sluice_kernel::order::first_conflict;
use sluice_kernel::order::shared::{AdmitRequest, Admitted, SharedDomain, SharedFuture};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, Client, NoTls, Statement};

pub use provenance::{is_postgres_url, PgChain, PgProvenance};
pub use schema::{migrate, MIGRATIONS};

/// Connects to `url` and brings its schema to the newest version (`sluice db migrate`): returns
/// (version before, version after).
pub async fn migrate_url(url: &str) -> Result<(i32, i32), PgError> {
    let shown = redact_url(url);
    let (mut client, conn) = connect_one(url, &shown).await?;
    let done = migrate(&mut client).await.map_err(|e| PgError::Database {
        url: shown,
        why: why(&e),
    });
    conn.task.abort();
    done
}

/// The channel releases are announced on: `<ticket> <failed 0|1> <call id>`.
const CHANNEL: &str = "sluice_released";

/// Why the shared domain could not be set up or used.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// The database cannot be reached, or refused a statement.
    #[error("the database {url}: {why}")]
    Database {
        /// The URL, without its password.
        url: String,
        /// What went wrong.
        why: String,
    },
    /// The URL is not a PostgreSQL URL.
    #[error("`{0}` is not a postgres:// URL")]
    NotAUrl(String),
}

/// A driver error as a sentence. The driver's own text of a server error is only "db error":
/// this gives the server's message and SQLSTATE (and its detail), and for other errors the
/// chain of causes.
pub(crate) fn why(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut text = format!("{} (SQLSTATE {})", db.message(), db.code().code());
        if let Some(detail) = db.detail() {
            text.push_str(": ");
            text.push_str(detail);
        }
        return text;
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A URL without its password, for messages.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let user = &url[scheme + 3..at];
            let user = user.split(':').next().unwrap_or_default();
            format!("{}{user}@{}", &url[..scheme + 3], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

/// One admission on its way to the admission task.
struct Pending {
    request: AdmitRequest,
    reply: oneshot::Sender<Result<Admitted, String>>,
}

/// A local call waiting for calls of any process.
struct Waiter {
    remaining: HashSet<u64>,
    failed: Option<String>,
    tx: Option<oneshot::Sender<Result<Option<String>, String>>>,
}

/// The state the tasks and the domain share.
struct Inner {
    url: String,
    owner: String,
    lease: Duration,
    client: Client,
    /// `client`'s hot statements, prepared once (a statement given as text costs a round trip
    /// to prepare every time).
    release: Statement,
    check: Statement,
    waiters: Mutex<HashMap<u64, Waiter>>,
    /// Why the domain can no longer be trusted (its lease lapsed, a connection was lost).
    broken: Mutex<Option<String>>,
    /// Set by [`PgDomain::close`]: the listener and the lease task end (and their
    /// connections with them).
    closed: tokio::sync::watch::Sender<bool>,
}

impl Inner {
    fn lock_waiters(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Waiter>> {
        self.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn broken(&self) -> Option<String> {
        self.broken
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Stops trusting the domain: every local waiter ends with `why`, and no call is admitted.
    fn break_with(&self, why: String) {
        tracing::error!(error = %why, "the shared conflict domain is broken: nothing is admitted");
        *self.broken.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
        for (_, mut w) in self.lock_waiters().drain() {
            if let Some(tx) = w.tx.take() {
                let _ = tx.send(Err(why.clone()));
            }
        }
    }

    /// A call of some process ended: the local calls waiting for it wait for one fewer.
    fn ended(&self, ticket: u64, failed: bool, call: &str) {
        let mut waiters = self.lock_waiters();
        let mut ready = Vec::new();
        for (t, w) in waiters.iter_mut() {
            if w.remaining.remove(&ticket) {
                if failed && w.failed.is_none() {
                    w.failed = Some(call.to_owned());
                }
                if w.remaining.is_empty() {
                    ready.push(*t);
                }
            }
        }
        for t in ready {
            if let Some(mut w) = waiters.remove(&t) {
                if let Some(tx) = w.tx.take() {
                    let _ = tx.send(Ok(w.failed.take()));
                }
            }
        }
    }

    /// Asks the database which of the local waiters' predecessors have ended (after a waiter
    /// is registered, and on every heartbeat: a notification missed is caught here).
    async fn check(&self, tickets: Vec<i64>) -> Result<(), tokio_postgres::Error> {
        if tickets.is_empty() {
            return Ok(());
        }
        let rows = self.client.query(&self.check, &[&tickets]).await?;
        for row in rows {
            let ticket: i64 = row.get(0);
            let state: &str = row.get(1);
            let call: &str = row.get(2);
            self.ended(ticket as u64, state != "ok", call);
        }
        Ok(())
    }

    fn waited_for(&self) -> Vec<i64> {
        let set: HashSet<i64> = self
            .lock_waiters()
            .values()
            .flat_map(|w| w.remaining.iter().map(|t| *t as i64))
            .collect();
        set.into_iter().collect()
    }
}

/// A conflict domain in PostgreSQL, shared by every process that connects to the database.
#[derive(Clone)]
pub struct PgDomain {
    inner: Arc<Inner>,
    admit: mpsc::UnboundedSender<Pending>,
}

impl std::fmt::Debug for PgDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgDomain")
            .field("url", &self.inner.url)
            .field("owner", &self.inner.owner)
            .field("lease", &self.inner.lease)
            .finish()
    }
}

async fn connect_one(url: &str, shown: &str) -> Result<(Client, ConnectionTask), PgError> {
    let (client, mut connection) =
        tokio_postgres::connect(url, NoTls)
            .await
            .map_err(|e| PgError::Database {
                url: shown.to_owned(),
                why: why(&e),
            })?;
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(m) = messages.next().await {
            match m {
                Ok(AsyncMessage::Notification(n)) => {
                    let _ = tx.send(Ok(n.payload().to_owned()));
                }
                Ok(_) => {}
                Err(e) => {
                    let _ = tx.send(Err(why(&e)));
                    return;
                }
            }
        }
        let _ = tx.send(Err("the connection closed".to_owned()));
    });
    Ok((client, ConnectionTask { task, events: rx }))
}

/// A connection's driver, and what it heard (notifications, or why it ended).
struct ConnectionTask {
    task: tokio::task::JoinHandle<()>,
    events: mpsc::UnboundedReceiver<Result<String, String>>,
}

impl PgDomain {
    /// Connects (three connections: admissions, releases and leases, and the listener), runs
    /// the migrations, registers this process with a lease of `lease`, and starts the tasks
    /// that heartbeat it and that mark the calls of processes whose lease ran out `lost`. Fails
    /// when the database cannot be reached (fail closed).
    pub async fn connect(url: &str, lease: Duration) -> Result<Arc<Self>, PgError> {
        if !is_postgres_url(url) {
            return Err(PgError::NotAUrl(url.to_owned()));
        }
        let shown = redact_url(url);
        let db = |e: tokio_postgres::Error| PgError::Database {
            url: shown.clone(),
            why: why(&e),
        };
        let (mut admitting, admit_conn) = connect_one(url, &shown).await?;
        migrate(&mut admitting).await.map_err(db)?;
        let (client, client_conn) = connect_one(url, &shown).await?;
        let (listener, mut listen_conn) = connect_one(url, &shown).await?;
        listener
            .batch_execute(&format!("LISTEN {CHANNEL}"))
            .await
            .map_err(db)?;
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes).map_err(|e| PgError::Database {
            url: shown.clone(),
            why: format!("no random bytes for the process's name: {e}"),
        })?;
        let owner = format!("{}-{}", std::process::id(), hex::encode(bytes));
        client
            .execute(
                "INSERT INTO sluice_owners (owner, heartbeat) VALUES ($1, now())",
                &[&owner],
            )
            .await
            .map_err(db)?;
        let release = client
            .prepare(
                "WITH ended AS (UPDATE sluice_calls SET state = $2, ended_at = now() \
                   WHERE ticket = $1 AND state = 'admitted' RETURNING ticket, call) \
                 SELECT pg_notify($3, ticket || ' ' || $4 || ' ' || call) FROM ended",
            )
            .await
            .map_err(db)?;
        let check = client
            .prepare(
                "SELECT ticket, state, call FROM sluice_calls \
                 WHERE ticket = ANY($1) AND state <> 'admitted'",
            )
            .await
            .map_err(db)?;
        let statements = AdmitStatements::prepare(&admitting).await.map_err(db)?;
        let inner = Arc::new(Inner {
            url: shown,
            owner,
            lease,
            client,
            release,
            check,
            waiters: Mutex::new(HashMap::new()),
            broken: Mutex::new(None),
            closed: tokio::sync::watch::Sender::new(false),
        });
        let (admit, rx) = mpsc::unbounded_channel();
        tokio::spawn(admissions(
            inner.clone(),
            admitting,
            statements,
            rx,
            admit_conn,
        ));
        // The listener: every release, of every process, wakes the local waiters.
        {
            let inner = inner.clone();
            let mut closed = inner.closed.subscribe();
            tokio::spawn(async move {
                let _keep = listener;
                loop {
                    let event = tokio::select! {
                        e = listen_conn.events.recv() => e,
                        _ = closed.wait_for(|c| *c) => None,
                    };
                    let Some(event) = event else { break };
                    match event {
                        Ok(payload) => {
                            let mut parts = payload.splitn(3, ' ');
                            let ticket = parts.next().and_then(|t| t.parse::<u64>().ok());
                            let failed = parts.next() == Some("1");
                            let call = parts.next().unwrap_or_default();
                            if let Some(t) = ticket {
                                inner.ended(t, failed, call);
                            }
                        }
                        Err(why) => {
                            inner.break_with(format!("the listening connection failed: {why}"));
                            return;
                        }
                    }
                }
                listen_conn.task.abort();
            });
        }
        tokio::spawn(leases(inner.clone(), client_conn));
        Ok(Arc::new(PgDomain { inner, admit }))
    }

    /// This process's name in the database.
    pub fn owner(&self) -> &str {
        &self.inner.owner
    }

    /// Ends this process's lease (its calls have all been released): other processes stop
    /// waiting on it at once rather than at its lease's end. A call it left unreleased is
    /// marked `lost` by the next heartbeat of any process.
    ///
    /// After it, the domain admits nothing (a call is refused naming the closed domain), and
    /// its listening and heartbeat connections end; the last, for admissions, ends when the
    /// domain is dropped.
    pub async fn close(&self) {
        {
            let mut broken = self.inner.broken.lock().unwrap_or_else(|p| p.into_inner());
            broken.get_or_insert_with(|| "the shared conflict domain was closed".to_owned());
        }
        let _ = self
            .inner
            .client
            .execute(
                "DELETE FROM sluice_owners WHERE owner = $1",
                &[&self.inner.owner],
            )
            .await;
        self.inner.closed.send_replace(true);
        for (_, mut w) in self.inner.lock_waiters().drain() {
            if let Some(tx) = w.tx.take() {
                let _ = tx.send(Err("the shared conflict domain was closed".to_owned()));
            }
        }
    }
}

/// Accesses as stored: `[["writes", "kv:x"], ...]`.
fn accesses_json(accesses: &[Access]) -> Value {
    Value::Array(
        accesses
            .iter()
            .map(|a| json!([a.kind.as_str(), a.resource.to_text()]))
            .collect(),
    )
}

/// Accesses read back; an entry this version cannot read conflicts with everything (safe).
fn accesses_of(v: &Value) -> Vec<Access> {
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

/// The admission task: takes every admission waiting, admits them in one transaction in their
/// order, then registers each as a waiter.
async fn admissions(
    inner: Arc<Inner>,
    mut client: Client,
    statements: AdmitStatements,
    mut rx: mpsc::UnboundedReceiver<Pending>,
    mut conn: ConnectionTask,
) {
    while let Some(first) = rx.recv().await {
        let mut group = vec![first];
        while let Ok(more) = rx.try_recv() {
            group.push(more);
        }
        if let Some(why) = inner.broken() {
            for p in group {
                let _ = p.reply.send(Err(why.clone()));
            }
            continue;
        }
        if let Ok(Err(why)) = conn.events.try_recv() {
            inner.break_with(format!("the admitting connection failed: {why}"));
            for p in group {
                let _ = p.reply.send(Err(inner.broken().unwrap_or_default()));
            }
            continue;
        }
        let requests: Vec<&AdmitRequest> = group.iter().map(|p| &p.request).collect();
        match admit_group(&inner, &mut client, &statements, &requests).await {
            Ok(admitted) => {
                for (p, (ticket, waits_for)) in group.into_iter().zip(admitted) {
                    let ready = register(&inner, ticket, waits_for).await;
                    let _ = p.reply.send(Ok(Admitted { ticket, ready }));
                }
            }
            Err(e) => {
                let why = why(&e);
                for p in group {
                    let _ = p.reply.send(Err(why.clone()));
                }
            }
        }
    }
    conn.task.abort();
}

/// The advisory lock key space of a tenant's admissions (keyed by the tenant's name hashed
/// with it); provenance appends use their own ([`provenance`]'s `LOCK_SEED`).
pub(crate) const ADMIT_LOCK_SEED: i64 = 7262;

/// The admitting connection's statements, prepared once.
struct AdmitStatements {
    lock: Statement,
    open: Statement,
    insert: Statement,
}

impl AdmitStatements {
    async fn prepare(client: &Client) -> Result<Self, tokio_postgres::Error> {
        Ok(Self {
            // The tenants' locks in one order (sorted by the caller) in every process: two
            // groups naming the same two tenants in opposite orders would otherwise deadlock.
            // One statement takes them all (`unnest` keeps the array's order).
            lock: client
                .prepare(
                    "SELECT pg_advisory_xact_lock(hashtextextended(t, $2)) \
                     FROM unnest($1::text[]) t",
                )
                .await?,
            open: client
                .prepare(
                    "SELECT tenant, ticket, accesses FROM sluice_calls \
                     WHERE tenant = ANY($1) AND state = 'admitted' ORDER BY ticket",
                )
                .await?,
            insert: client
                .prepare(
                    "INSERT INTO sluice_calls \
                     (ticket, tenant, batch, call, tool, owner, accesses, waits_for, state) \
                     VALUES (nextval('sluice_admission'), $1, $2, $3, $4, $5, $6, $7, \
                     'admitted') RETURNING ticket",
                )
                .await?,
        })
    }
}

/// One transaction: the tenants' advisory locks and their unfinished calls once; per call, its
/// ticket, its conflicting predecessors, its row.
async fn admit_group(
    inner: &Inner,
    client: &mut Client,
    statements: &AdmitStatements,
    requests: &[&AdmitRequest],
) -> Result<Vec<(u64, Vec<u64>)>, tokio_postgres::Error> {
    let tx = client.transaction().await?;
    let mut tenants: Vec<&str> = requests.iter().map(|r| &*r.tenant).collect();
    tenants.sort_unstable();
    tenants.dedup();
    // The lock and the read go out together, one round trip: the server runs them in order,
    // so the read (a snapshot of its own, read committed) starts once the locks are held and
    // sees every admission committed before.
    let (lock_args, open_args): ([&(dyn ToSql + Sync); 2], [&(dyn ToSql + Sync); 1]) =
        ([&tenants, &ADMIT_LOCK_SEED], [&tenants]);
    let (locked, rows) = futures::join!(
        tx.execute(&statements.lock, &lock_args),
        tx.query(&statements.open, &open_args),
    );
    locked?;
    let rows = rows?;
    let mut open: HashMap<&str, Vec<(u64, Vec<Access>)>> =
        tenants.iter().map(|t| (*t, Vec::new())).collect();
    for row in &rows {
        let tenant: &str = row.get(0);
        let t: i64 = row.get(1);
        let a: Value = row.get(2);
        if let Some(calls) = open.get_mut(tenant) {
            calls.push((t as u64, accesses_of(&a)));
        }
    }
    let mut out = Vec::with_capacity(requests.len());
    for r in requests {
        let tenant: &str = &r.tenant;
        let calls = open.get_mut(tenant).expect("every tenant of the group");
        let waits_for: Vec<u64> = calls
            .iter()
            .filter(|(_, earlier)| first_conflict(earlier, &r.accesses).is_some())
            .map(|(t, _)| *t)
            .collect();
        let preds: Vec<i64> = waits_for.iter().map(|t| *t as i64).collect();
        let row = tx
            .query_one(
                &statements.insert,
                &[
                    &tenant,
                    &&*r.batch,
                    &r.call,
                    &r.tool,
                    &inner.owner,
                    &accesses_json(&r.accesses),
                    &preds,
                ],
            )
            .await?;
        let ticket: i64 = row.get(0);
        calls.push((ticket as u64, r.accesses.clone()));
        out.push((ticket as u64, waits_for));
    }
    tx.commit().await?;
    Ok(out)
}

/// Registers a local waiter, then asks which of its predecessors already ended (a release
/// announced before the waiter existed is caught here).
async fn register(
    inner: &Arc<Inner>,
    ticket: u64,
    waits_for: Vec<u64>,
) -> SharedFuture<Result<Option<String>, String>> {
    if waits_for.is_empty() {
        return Box::pin(async { Ok(None) });
    }
    let (tx, rx) = oneshot::channel();
    let preds: Vec<i64> = waits_for.iter().map(|t| *t as i64).collect();
    inner.lock_waiters().insert(
        ticket,
        Waiter {
            remaining: waits_for.into_iter().collect(),
            failed: None,
            tx: Some(tx),
        },
    );
    if let Err(e) = inner.check(preds).await {
        tracing::warn!(error = %why(&e), "could not check a call's predecessors; the heartbeat will");
    }
    let url = inner.url.clone();
    Box::pin(async move {
        rx.await
            .unwrap_or_else(|_| Err(format!("the shared domain {url} stopped")))
    })
}

/// The lease: heartbeat every third of it; mark the calls of processes whose lease ran out
/// `lost` (and announce them); re-check the local waiters (a missed notification is caught
/// within a third of a lease).
async fn leases(inner: Arc<Inner>, mut conn: ConnectionTask) {
    let mut tick = tokio::time::interval(inner.lease / 3);
    let mut closed = inner.closed.subscribe();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = closed.wait_for(|c| *c) => {
                conn.task.abort();
                return;
            }
        }
        if let Ok(Err(why)) = conn.events.try_recv() {
            inner.break_with(format!("the connection for releases failed: {why}"));
            return;
        }
        if inner.broken().is_some() {
            return;
        }
        match inner
            .client
            .execute(
                "UPDATE sluice_owners SET heartbeat = now() WHERE owner = $1",
                &[&inner.owner],
            )
            .await
        {
            Ok(0) => {
                inner.break_with(format!(
                    "this process's lease in {} lapsed and its calls were marked lost",
                    inner.url
                ));
                return;
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %why(&e), "a heartbeat failed");
                continue;
            }
        }
        let secs = inner.lease.as_secs_f64();
        let reaped = inner
            .client
            .query(
                "WITH dead AS (DELETE FROM sluice_owners \
                   WHERE heartbeat < now() - make_interval(secs => $1) RETURNING owner), \
                 lost AS (UPDATE sluice_calls SET state = 'lost', ended_at = now() \
                   WHERE state = 'admitted' AND (owner IN (SELECT owner FROM dead) \
                     OR owner NOT IN (SELECT owner FROM sluice_owners)) \
                   RETURNING ticket, call) \
                 SELECT pg_notify($2, ticket || ' 1 ' || call) FROM lost",
                &[&secs, &CHANNEL],
            )
            .await;
        match reaped {
            Ok(rows) if !rows.is_empty() => {
                tracing::warn!(
                    calls = rows.len(),
                    "marked the calls of a lost process lost"
                );
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %why(&e), "looking for lost processes failed"),
        }
        let waited = inner.waited_for();
        if let Err(e) = inner.check(waited).await {
            tracing::warn!(error = %why(&e), "re-checking the waiting calls failed");
        }
    }
}

impl SharedDomain for PgDomain {
    fn admit(&self, request: AdmitRequest) -> SharedFuture<Result<Admitted, String>> {
        let (reply, rx) = oneshot::channel();
        let sent = self.admit.send(Pending { request, reply });
        let url = self.inner.url.clone();
        Box::pin(async move {
            if sent.is_err() {
                return Err(format!("the admission task of {url} stopped"));
            }
            rx.await
                .unwrap_or_else(|_| Err(format!("the admission task of {url} stopped")))
        })
    }

    fn release(
        &self,
        _tenant: &str,
        ticket: u64,
        failed: bool,
    ) -> SharedFuture<Result<(), String>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let state = if failed { "failed" } else { "ok" };
            inner
                .client
                .query(
                    &inner.release,
                    &[
                        &(ticket as i64),
                        &state,
                        &CHANNEL,
                        &(if failed { "1" } else { "0" }),
                    ],
                )
                .await
                .map(|_| ())
                .map_err(|e| format!("{}: {}", inner.url, why(&e)))
        })
    }

    fn describe(&self) -> String {
        self.inner.url.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_never_reaches_a_message() {
        assert_eq!(
            redact_url("postgres://u:secret@h:5432/db"),
            "postgres://u@h:5432/db"
        );
        assert_eq!(redact_url("postgres://h/db"), "postgres://h/db");
    }

    #[test]
    fn accesses_round_trip_and_unreadable_ones_conflict_with_everything() {
        let a = vec![
            Access::new(EffectKind::Writes, Pattern::parse("kv:a*").unwrap()),
            Access::new(EffectKind::Reads, Pattern::parse("fs:/x").unwrap()),
        ];
        let back = accesses_of(&accesses_json(&a));
        assert_eq!(back, a);
        let junk = accesses_of(&json!([["teleports", "kv:x"]]));
        let any = vec![Access::new(
            EffectKind::Reads,
            Pattern::parse("zzz:q").unwrap(),
        )];
        assert!(first_conflict(&junk, &any).is_some());
    }
}
