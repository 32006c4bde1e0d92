//! Shared provenance: every process appends to one append-only table, one hash chain per tenant.
//!
//! Takes in: the kernel's groups of records (it implements [`ProvenanceSink`]). Hands on: rows of
//! `sluice_provenance` — `(tenant, seq, line)`, where `line` is exactly the line a log file would
//! hold (crate `sluice-provenance`, module `chain`) with the tenant's own `seq` and `prev` — and,
//! for readers, each tenant's chain as a [`LogSource`] ([`PgChain`]), so `verify`, `why`,
//! `lineage`, `export`, `checkpoint` and `prove` work on it as on a file.
//!
//! One task per process writes, with group commit: it takes every group queued, and in one
//! transaction, per tenant in name order (so that two processes never wait for each other's
//! locks in a cycle), takes the tenant's advisory lock, catches up with what other processes
//! appended since its last look — checking those rows as a reader would and taking their writes
//! into its last writers, which is how lineage crosses processes — then adds its groups, each
//! call preceded by the `read-after-write` edges it gets from earlier writers of other batches,
//! wherever they ran. A group is acknowledged once the transaction has committed (`durable`:
//! PostgreSQL's `synchronous_commit`, so on disk; `buffered`: `synchronous_commit = off`).
//!
//! Bounded work: a tenant's last writers are also kept in `sluice_last_writers` (one row per
//! written resource, in the same transaction as the lines), so a process that knows nothing of a
//! tenant yet — or has fallen more than [`CATCH_UP`] rows behind — reads the chain's last two rows
//! (checking the link between them) and that table, never the whole chain.
//!
//! Faults: a commit that fails refuses its groups (their calls report `recorded: false`) and
//! makes the writer forget what it knew of their tenants (it reads them again next time: a
//! commit whose answer was lost may have happened). A connection that fails is replaced on the
//! next group, or within a second while nothing is queued. A tenant whose chain is damaged is
//! refused alone; the other tenants are still recorded. Under `durable`,
//! [`ProvenanceSink::available`] says no while the database is unreachable or the tenant's
//! chain is damaged, so the kernel starts none of those calls (no tool runs unrecorded).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use sluice_kernel::provenance::{ProvenanceSink, Record, RecordFuture};
use sluice_kernel::Error;
use sluice_provenance::chain::{self, sha256_hex, GENESIS};
use sluice_provenance::lineage::LastWriters;
use sluice_provenance::{Checker, Durability, LogSource, ProvenanceError, Scanned};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::{Client, Statement};

use crate::connection::{refused_by_server, schema_of, why, ConnectionTask, Names, Target};
use crate::{migrate, redact_url, PgError, PgOptions};

/// The advisory lock key space of a tenant's provenance appends (admissions use their own).
const LOCK_SEED: i64 = 7263;

/// Most groups in one commit.
const MAX_GROUPS: usize = 1024;

/// Most rows of other processes a writer reads to catch up with a tenant; further behind, it
/// reads the head and the last writers instead.
pub(crate) const CATCH_UP: i64 = 1000;

/// The `sluice_last_writers` row that says a tenant's index is complete (a chain written before
/// the index existed has none: it is built once, by one full read).
const INDEXED: &str = "";

enum Message {
    Append(Vec<Record>, oneshot::Sender<Result<u64, Error>>),
    Flush(oneshot::Sender<Result<(), Error>>),
    Close(oneshot::Sender<()>),
}

/// What the writer tells the handle: why the database cannot be written now, and which
/// tenants' chains are damaged.
#[derive(Default)]
struct Status {
    down: Option<String>,
    damaged: HashMap<String, String>,
}

/// The shared provenance log of every process pointing at one database (see the module docs).
///
/// ```no_run
/// use sluice_kernel::{builtin, Kernel};
/// use sluice_postgres::PgProvenance;
/// use sluice_provenance::Durability;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let log = PgProvenance::connect("postgres://sluice@127.0.0.1:5432/sluice", Durability::Durable)
///     .await?;
/// let kernel = Kernel::builder()
///     .tools(builtin::registry(builtin::BuiltinConfig::default())?)
///     .provenance_arc(log.clone())
///     .build()?;
/// // ... run batches: each call's records are committed before its result is reported ...
/// log.close().await;
/// # Ok(()) }
/// ```
pub struct PgProvenance {
    url: String,
    durability: Durability,
    status: Arc<Mutex<Status>>,
    tx: mpsc::UnboundedSender<Message>,
}

impl std::fmt::Debug for PgProvenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgProvenance")
            .field("url", &self.url)
            .field("durability", &self.durability)
            .finish()
    }
}

/// One connection and its statements, prepared once.
struct Link {
    client: Client,
    conn: ConnectionTask,
    st: LinkStatements,
}

impl Link {
    /// Resolves with why the connection ended (a terminated backend, a cut network, a stopped
    /// server): the writer learns it at once, not from the next group's failed commit.
    async fn ended(&mut self) -> String {
        loop {
            match self.conn.events.recv().await {
                Some(Ok(_)) => {}
                Some(Err(why)) => return why,
                None => return "the connection closed".to_owned(),
            }
        }
    }
}

/// A [`Link`]'s statements.
struct LinkStatements {
    lock: Statement,
    since: Statement,
    head: Statement,
    writers: Statement,
    all: Statement,
    insert: Statement,
    upsert: Statement,
    clear: Statement,
}

impl Link {
    async fn open(target: &Target, durability: Durability) -> Result<Link, String> {
        let (client, conn) = target.connect().await.map_err(|e| e.to_string())?;
        let db = |e: tokio_postgres::Error| format!("the database {}: {}", target.shown, why(&e));
        if durability == Durability::Buffered {
            client
                .batch_execute("SET synchronous_commit TO off")
                .await
                .map_err(db)?;
        }
        let prepare = |sql: &'static str| {
            let client = &client;
            async move { client.prepare(sql).await.map_err(db) }
        };
        let st = LinkStatements {
            lock: prepare("SELECT pg_advisory_xact_lock(hashtextextended($3 || $1, $2))").await?,
            since: prepare(
                "SELECT seq, line FROM sluice_provenance \
                 WHERE tenant = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            )
            .await?,
            head: prepare(
                "SELECT seq, line FROM sluice_provenance \
                 WHERE tenant = $1 ORDER BY seq DESC LIMIT 2",
            )
            .await?,
            writers: prepare(
                "SELECT resource, batch, call FROM sluice_last_writers WHERE tenant = $1",
            )
            .await?,
            all: prepare("SELECT seq, line FROM sluice_provenance WHERE tenant = $1 ORDER BY seq")
                .await?,
            insert: prepare(
                "INSERT INTO sluice_provenance (tenant, seq, line) \
                 SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[])",
            )
            .await?,
            upsert: prepare(
                "INSERT INTO sluice_last_writers (key, tenant, resource, batch, call) \
                 SELECT sha256(convert_to(t, 'UTF8') || '\\x00'::bytea || convert_to(r, 'UTF8')), \
                   t, r, b, c \
                 FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(t, r, b, c) \
                 ON CONFLICT (key) DO UPDATE \
                 SET batch = excluded.batch, call = excluded.call",
            )
            .await?,
            clear: prepare("DELETE FROM sluice_last_writers WHERE tenant = $1").await?,
        };
        Ok(Link { client, conn, st })
    }
}

/// One tenant's chain as this process last saw it.
#[derive(Clone)]
struct Head {
    records: u64,
    head: String,
}

/// The writer task's state.
struct Writer {
    target: Target,
    durability: Durability,
    names: Names,
    link: Option<Link>,
    heads: HashMap<String, Head>,
    writers: LastWriters,
    status: Arc<Mutex<Status>>,
}

impl PgProvenance {
    /// Connects (one connection), runs the migrations, and starts the writer. Fails when the
    /// database cannot be reached now; once started, an outage is survived.
    pub async fn connect(url: &str, durability: Durability) -> Result<Arc<Self>, PgError> {
        let target = Target::parse(url, PgOptions::DEFAULT_UNAVAILABLE_AFTER)?;
        let shown = target.shown.clone();
        let db = |e: tokio_postgres::Error| PgError::Database {
            url: shown.clone(),
            why: why(&e),
        };
        let names = {
            let (mut client, _conn) = target.connect().await?;
            migrate(&mut client).await.map_err(db)?;
            Names::for_schema(&schema_of(&client).await.map_err(db)?)
        };
        let link = Link::open(&target, durability)
            .await
            .map_err(|why| PgError::Database {
                url: shown.clone(),
                why,
            })?;
        let (tx, rx) = mpsc::unbounded_channel();
        let status = Arc::new(Mutex::new(Status::default()));
        let writer = Writer {
            target,
            durability,
            names,
            link: Some(link),
            heads: Default::default(),
            writers: LastWriters::new(),
            status: status.clone(),
        };
        tokio::spawn(writer.run(rx));
        Ok(Arc::new(PgProvenance {
            url: shown,
            durability,
            status,
            tx,
        }))
    }

    /// The database, without its password.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `Ok` while the database can be written; else why not (for a health check).
    pub fn health(&self) -> Result<(), Error> {
        match &self.status().down {
            Some(why) => Err(Error::ProvenanceUnavailable { why: why.clone() }),
            None => Ok(()),
        }
    }

    fn status(&self) -> std::sync::MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends a group of records in one commit (all or none); resolves with the tenant's `seq`
    /// of the group's last line once committed.
    pub fn append_group(&self, group: Vec<Record>) -> oneshot::Receiver<Result<u64, Error>> {
        let (done, rx) = oneshot::channel();
        if let Err(mpsc::error::SendError(Message::Append(_, done))) =
            self.tx.send(Message::Append(group, done))
        {
            let _ = done.send(Err(refused(format!(
                "the provenance log {} is closed",
                self.url
            ))));
        }
        rx
    }

    /// Waits until everything queued before it is committed; an error when anything could not be.
    pub async fn flush(&self) -> Result<(), Error> {
        ProvenanceSink::flush(self).await
    }

    /// Commits what is queued and stops the writer; later appends are refused.
    pub async fn close(&self) {
        let _ = ProvenanceSink::close(self).await;
    }
}

impl ProvenanceSink for PgProvenance {
    fn record(&self, group: Vec<Record>) -> RecordFuture {
        let ack = self.append_group(group);
        let url = self.url.clone();
        Box::pin(async move {
            ack.await
                .map_err(|_| refused(format!("the provenance writer of {url} stopped")))?
                .map(|_| ())
        })
    }

    fn flush(&self) -> RecordFuture {
        let (done, rx) = oneshot::channel();
        let sent = self.tx.send(Message::Flush(done));
        let url = self.url.clone();
        Box::pin(async move {
            sent.map_err(|_| refused(format!("the provenance log {url} is closed")))?;
            rx.await
                .map_err(|_| refused(format!("the provenance writer of {url} stopped")))?
        })
    }

    fn close(&self) -> RecordFuture {
        let (done, rx) = oneshot::channel();
        let sent = self.tx.send(Message::Close(done)).is_ok();
        Box::pin(async move {
            if sent {
                let _ = rx.await;
            }
            Ok(())
        })
    }

    /// Under `durable`, yes: every call's intent is committed before its handler starts.
    fn durable_first(&self) -> bool {
        self.durability == Durability::Durable
    }

    fn available(&self, tenant: &str) -> Result<(), Error> {
        if self.durability != Durability::Durable {
            return Ok(());
        }
        let status = self.status();
        let unavailable = |why: &String| Error::ProvenanceUnavailable { why: why.clone() };
        if let Some(why) = status.damaged.get(tenant) {
            return Err(unavailable(why));
        }
        match &status.down {
            Some(why) => Err(unavailable(why)),
            None => Ok(()),
        }
    }
}

/// The log could not keep what it was handed (the kernel's error for a refusing sink).
fn refused(why: String) -> Error {
    Error::ProvenanceRefused { why }
}

/// The tenant a group belongs to (every record names it).
fn tenant_of(group: &[Record]) -> Option<&str> {
    group.first().map(Record::tenant)
}

/// Why a commit did not happen.
enum CommitError {
    /// Nothing was kept (the server refused a statement, or the transaction never began).
    Refused(String),
    /// The connection failed: the commit may or may not have happened.
    Lost(String),
}

/// A driver error as a [`CommitError`]: refused by the server (nothing kept), or the connection
/// lost (the outcome unknown).
fn commit_error(url: &str, e: &tokio_postgres::Error) -> CommitError {
    let text = format!("the database {url}: {}", why(e));
    if refused_by_server(e) {
        CommitError::Refused(text)
    } else {
        CommitError::Lost(text)
    }
}

impl Writer {
    fn status(&self) -> std::sync::MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Message>) {
        let mut closing = None;
        while closing.is_none() {
            // While the database is unreachable, try again every second even with nothing
            // queued, so that the health check and `available` recover on their own.
            let first = match &mut self.link {
                None => match tokio::time::timeout(Duration::from_secs(1), rx.recv()).await {
                    Ok(m) => m,
                    Err(_) => {
                        self.reconnect().await;
                        continue;
                    }
                },
                // A connection that ends while nothing is queued is replaced now: until then
                // `available` and the health check say so, and no call starts that the log
                // could not keep (under `durable`).
                Some(link) => tokio::select! {
                    m = rx.recv() => m,
                    why = link.ended() => {
                        self.down(format!("the database {}: {why}", self.target.shown));
                        self.reconnect().await;
                        continue;
                    }
                },
            };
            let Some(first) = first else { break };
            let mut groups = Vec::new();
            let mut acks = Vec::new();
            let mut flushes = Vec::new();
            let mut next = Some(first);
            while let Some(msg) = next {
                match msg {
                    Message::Append(g, a) => {
                        groups.push(g);
                        acks.push(a);
                    }
                    Message::Flush(f) => flushes.push(f),
                    Message::Close(c) => {
                        closing = Some(c);
                        break;
                    }
                }
                if groups.len() >= MAX_GROUPS {
                    break;
                }
                next = rx.try_recv().ok();
            }
            let results = self.commit_all(&groups).await;
            let mut all_ok = Ok(());
            for (a, r) in acks.into_iter().zip(results) {
                if let Err(why) = &r {
                    all_ok = Err(why.clone());
                }
                let _ = a.send(r.map_err(refused));
            }
            for f in flushes {
                let _ = f.send(all_ok.clone().map_err(refused));
            }
        }
        // Refuse what came after a close.
        rx.close();
        let closed = format!("the provenance log {} is closed", self.target.shown);
        while let Ok(msg) = rx.try_recv() {
            match msg {
                Message::Append(_, a) => {
                    let _ = a.send(Err(refused(closed.clone())));
                }
                Message::Flush(f) => {
                    let _ = f.send(Err(refused(closed.clone())));
                }
                Message::Close(c) => {
                    let _ = c.send(());
                }
            }
        }
        self.link = None;
        if let Some(c) = closing {
            let _ = c.send(());
        }
    }

    /// A new connection; the status says whether it worked.
    async fn reconnect(&mut self) {
        match Link::open(&self.target, self.durability).await {
            Ok(link) => {
                self.link = Some(link);
                if self.status().down.take().is_some() {
                    tracing::info!(url = %self.target.shown, "the provenance log reached its database again");
                }
            }
            Err(why) => self.down(why),
        }
    }

    fn down(&mut self, why: String) {
        self.link = None;
        let mut status = self.status();
        if status.down.is_none() {
            tracing::error!(error = %why, "the provenance log lost its database");
        }
        status.down = Some(why);
    }

    /// Commits the groups: one answer per group. The groups of a tenant whose chain is damaged
    /// are refused alone.
    async fn commit_all(&mut self, groups: &[Vec<Record>]) -> Vec<Result<u64, String>> {
        let mut out: Vec<Result<u64, String>> = vec![Ok(0); groups.len()];
        // Group `i`'s answer (every index below comes from enumerating `groups`).
        fn answer(out: &mut [Result<u64, String>], i: usize, with: Result<u64, String>) {
            if let Some(slot) = out.get_mut(i) {
                *slot = with;
            }
        }
        if groups.is_empty() {
            return out;
        }
        if self.link.is_none() {
            self.reconnect().await;
        }
        let mut by_tenant: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, g) in groups.iter().enumerate() {
            if let Some(t) = tenant_of(g) {
                by_tenant.entry(t).or_default().push(i);
            }
        }
        {
            let status = self.status();
            for (tenant, indexes) in &by_tenant {
                if let Some(why) = status.damaged.get(*tenant) {
                    for &i in indexes {
                        answer(&mut out, i, Err(why.clone()));
                    }
                }
            }
        }
        by_tenant.retain(|_, indexes| {
            indexes
                .first()
                .is_some_and(|&i| out.get(i).is_some_and(Result::is_ok))
        });
        if by_tenant.is_empty() {
            return out;
        }
        let down = self.status().down.clone();
        if let (None, Some(why)) = (&self.link, down) {
            for indexes in by_tenant.values() {
                for &i in indexes {
                    let why = format!("the provenance log cannot be written: {why}");
                    answer(&mut out, i, Err(why));
                }
            }
            return out;
        }
        let tenants: Vec<String> = by_tenant.keys().map(|t| (*t).to_owned()).collect();
        match self.commit(groups, by_tenant.clone()).await {
            Ok(seqs) => {
                for (i, seq) in seqs {
                    answer(&mut out, i, seq);
                }
            }
            Err(e) => {
                // What was taken in for these tenants may not be in the database: read them
                // again next time.
                for t in &tenants {
                    self.heads.remove(t);
                    self.writers.forget(t);
                }
                let why = match e {
                    CommitError::Refused(why) => why,
                    CommitError::Lost(why) => {
                        self.down(why.clone());
                        why
                    }
                };
                tracing::error!(error = %why, "the provenance log could not commit");
                for indexes in by_tenant.values() {
                    for &i in indexes {
                        answer(&mut out, i, Err(why.clone()));
                    }
                }
            }
        }
        out
    }

    /// One transaction for the groups of `by_tenant`: per tenant, in name order, the lock, a
    /// catch-up with what others appended, then this process's lines and its last writers.
    /// Returns each group's last `seq` (or, for a tenant found damaged, why not).
    async fn commit(
        &mut self,
        groups: &[Vec<Record>],
        by_tenant: BTreeMap<&str, Vec<usize>>,
    ) -> Result<Vec<(usize, Result<u64, String>)>, CommitError> {
        let url = self.target.shown.clone();
        let Some(Link { client, st, .. }) = self.link.as_mut() else {
            return Err(CommitError::Refused(format!(
                "the database {url} is unreachable"
            )));
        };
        let lost = |e: tokio_postgres::Error| commit_error(&url, &e);
        let mut out = Vec::new();
        let (mut tenants, mut numbers, mut lines): (Vec<&str>, Vec<i64>, Vec<String>) =
            Default::default();
        let mut index_rows: (Vec<String>, Vec<String>, Vec<String>, Vec<String>) =
            Default::default();
        let mut heads = Vec::new();
        let mut damaged = Vec::new();
        let timeout = PgOptions::DEFAULT_UNAVAILABLE_AFTER;
        let work = async {
            let tx = client.transaction().await.map_err(lost)?;
            for (tenant, indexes) in by_tenant {
                let prefix: &str = &self.names.lock_prefix;
                tx.execute(&st.lock, &[&tenant, &LOCK_SEED, &prefix])
                    .await
                    .map_err(lost)?;
                let caught = catch_up(
                    &tx,
                    st,
                    tenant,
                    self.heads.get(tenant).cloned(),
                    &mut self.writers,
                    &url,
                )
                .await?;
                let (mut at, rebuilt) = match caught {
                    Ok(c) => c,
                    Err(why) => {
                        for &i in &indexes {
                            out.push((i, Err(why.clone())));
                        }
                        damaged.push((tenant.to_owned(), why));
                        continue;
                    }
                };
                let mut touched: Vec<String> = Vec::new();
                let mut wild = rebuilt;
                for (i, group) in indexes.iter().filter_map(|&i| Some((i, groups.get(i)?))) {
                    let (records, head) = (&mut at.records, &mut at.head);
                    self.writers.add_group(group, |r| {
                        *records += 1;
                        let line = chain::line(*records, head, r);
                        *head = sha256_hex(line.as_bytes());
                        tenants.push(tenant);
                        numbers.push(*records as i64);
                        lines.push(line);
                        if let Record::Call(c) = r {
                            if c.started_at_ms.is_some() {
                                for a in c.accesses.iter().filter(|a| a.mode == "write") {
                                    wild |= a.resource.contains(['*', '?', '\\']);
                                    touched.push(a.resource.clone());
                                }
                            }
                        }
                    });
                    out.push((i, Ok(at.records)));
                }
                // The tenant's last writers as they now are: the touched entries, or all of
                // them where a pattern may have superseded others (or the index was rebuilt).
                let rows: Vec<(String, String, String)> = if wild {
                    tx.execute(&st.clear, &[&tenant]).await.map_err(lost)?;
                    let mut all = self.writers.entries(tenant);
                    all.push((INDEXED.to_owned(), String::new(), String::new()));
                    all
                } else {
                    touched.sort_unstable();
                    touched.dedup();
                    touched
                        .into_iter()
                        .filter_map(|r| {
                            let (b, c) = self.writers.writer_of(tenant, &r)?;
                            Some((r, b, c))
                        })
                        .collect()
                };
                for (r, b, c) in rows {
                    index_rows.0.push(tenant.to_owned());
                    index_rows.1.push(r);
                    index_rows.2.push(b);
                    index_rows.3.push(c);
                }
                heads.push((
                    tenant.to_owned(),
                    Head {
                        records: at.records,
                        head: at.head,
                    },
                ));
            }
            if !lines.is_empty() {
                tx.execute(&st.insert, &[&tenants, &numbers, &lines])
                    .await
                    .map_err(lost)?;
            }
            if !index_rows.0.is_empty() {
                tx.execute(
                    &st.upsert,
                    &[&index_rows.0, &index_rows.1, &index_rows.2, &index_rows.3],
                )
                .await
                .map_err(lost)?;
            }
            tx.commit().await.map_err(lost)
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(CommitError::Lost(format!(
                    "the database {url} did not answer within {timeout:?}"
                )))
            }
        }
        self.heads.extend(heads);
        if !damaged.is_empty() {
            let mut status = self.status();
            for (tenant, why) in damaged {
                tracing::error!(error = %why, tenant = %tenant, "a tenant's provenance chain is damaged: its records are refused");
                status.damaged.insert(tenant, why);
            }
        }
        Ok(out)
    }
}

/// Checks `rows` (seq, line) as the chain's next records after `checker`'s state, taking each
/// call's writes into `writers`; why not, naming the record, when one is missing, out of place or
/// changed (the caller words the message).
fn take_rows(
    mut checker: Checker,
    rows: &[tokio_postgres::Row],
    writers: &mut LastWriters,
) -> Result<Checker, (u64, String)> {
    for row in rows {
        let seq: i64 = row.get(0);
        let line: &str = row.get(1);
        let expected = checker.state().records + 1;
        if seq as u64 != expected {
            return Err((
                expected,
                format!(
                    "is stored as seq {seq} where {expected} was expected: a row was deleted, \
                     inserted or moved"
                ),
            ));
        }
        match checker.check(line.as_bytes()) {
            Ok(Record::Call(c)) => writers.apply(&c),
            Ok(_) => {}
            Err(why) => return Err((expected, why)),
        }
    }
    Ok(checker)
}

/// Brings this process's view of `tenant`'s chain up to the database under the tenant's lock:
/// from `known`, reading the rows others appended since (at most [`CATCH_UP`]); else from the
/// chain's last two rows (their link checked) and the tenant's last-writers index (built once by
/// a full read where a chain predates it). The inner `Err` is a damaged chain. The flag says the
/// index must be written whole.
async fn catch_up(
    tx: &tokio_postgres::Transaction<'_>,
    link: &LinkStatements,
    tenant: &str,
    known: Option<Head>,
    writers: &mut LastWriters,
    url: &str,
) -> Result<Result<(Scanned, bool), String>, CommitError> {
    let lost = |e: tokio_postgres::Error| commit_error(url, &e);
    let damaged = |at: u64, what: String| {
        format!(
            "the provenance chain of tenant `{tenant}` in {url} is damaged at record {at}: the \
             record {what} (`sluice provenance verify` names it); nothing is appended after it"
        )
    };
    if let Some(known) = known {
        let after = known.records as i64;
        let rows = tx
            .query(&link.since, &[&tenant, &after, &(CATCH_UP + 1)])
            .await
            .map_err(lost)?;
        if rows.len() as i64 <= CATCH_UP {
            let checker = Checker::resume(known.records, &known.head);
            return Ok(take_rows(checker, &rows, writers)
                .map(|c| (c.into_state(), false))
                .map_err(|(at, why)| damaged(at, why)));
        }
    }
    // From the head: the last two rows, their link checked.
    writers.forget(tenant);
    let rows = tx.query(&link.head, &[&tenant]).await.map_err(lost)?;
    let mut at = Scanned::default();
    if let Some(last) = rows.first() {
        let seq: i64 = last.get(0);
        let line: &str = last.get(1);
        let mut checker = match rows.get(1) {
            Some(prev) => {
                let prev_seq: i64 = prev.get(0);
                let prev_line: &str = prev.get(1);
                if prev_seq + 1 != seq {
                    return Ok(Err(damaged(
                        prev_seq as u64 + 1,
                        "is missing: the last two rows are not consecutive".into(),
                    )));
                }
                Checker::resume(prev_seq as u64, &sha256_hex(prev_line.as_bytes()))
            }
            None if seq == 1 => Checker::new(),
            None => {
                return Ok(Err(damaged(1, "is missing".into())));
            }
        };
        if let Err(why) = checker.check(line.as_bytes()) {
            return Ok(Err(damaged(seq as u64, why)));
        }
        at = checker.into_state();
    } else {
        at.head = GENESIS.to_owned();
    }
    let index = tx.query(&link.writers, &[&tenant]).await.map_err(lost)?;
    let complete = index.iter().any(|r| r.get::<_, &str>(0) == INDEXED);
    if complete || at.records == 0 {
        for row in &index {
            let resource: &str = row.get(0);
            if resource != INDEXED {
                writers.restore(tenant, resource, row.get(1), row.get(2));
            }
        }
        return Ok(Ok((at, !complete)));
    }
    // A chain older than the index: read it once, whole, and write the index.
    let rows = tx.query(&link.all, &[&tenant]).await.map_err(lost)?;
    Ok(take_rows(Checker::new(), &rows, writers)
        .map(|c| (c.into_state(), true))
        .map_err(|(at, why)| damaged(at, why)))
}

/// One tenant's chain in a database, as a [`LogSource`]: `verify`, `why`, `lineage`, `export`,
/// `checkpoint` and `prove` read it as they read a file, its `line N` being the tenant's `seq` N.
///
/// Reading blocks (it runs its own runtime): call it outside an async context.
#[derive(Debug, Clone)]
pub struct PgChain {
    url: String,
    tenant: String,
}

impl PgChain {
    /// The chain of `tenant` in the database at `url`.
    pub fn new(url: &str, tenant: &str) -> Self {
        Self {
            url: url.to_owned(),
            tenant: tenant.to_owned(),
        }
    }

    /// The tenants that have a chain in the database at `url`, in name order (blocking).
    pub fn tenants(url: &str) -> Result<Vec<String>, ProvenanceError> {
        let name = PathBuf::from(redact_url(url));
        block_on(&name, async {
            let target = Target::parse(url, PgOptions::DEFAULT_UNAVAILABLE_AFTER)
                .map_err(|e| e.to_string())?;
            let (client, _conn) = target.connect().await.map_err(|e| e.to_string())?;
            let rows = client
                .query(
                    "SELECT DISTINCT tenant FROM sluice_provenance ORDER BY tenant",
                    &[],
                )
                .await
                .map_err(|e| format!("the database {}: {}", redact_url(url), why(&e)));
            Ok(rows?.iter().map(|r| r.get::<_, String>(0)).collect())
        })
    }
}

/// Runs `fut` on a runtime of its own; a connection failure is an I/O error naming `name`.
fn block_on<T>(
    name: &std::path::Path,
    fut: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, ProvenanceError> {
    let io = |why: String| ProvenanceError::Io {
        path: name.to_owned(),
        source: std::io::Error::other(why),
    };
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(io(
            "a PostgreSQL chain is read with a runtime of its own: call this outside an async \
             context"
                .into(),
        ));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| io(e.to_string()))?;
    runtime.block_on(fut).map_err(io)
}

/// Why a scan of a chain stopped: the database, or a damaged record.
enum Stop {
    Db(String),
    Damaged(usize, String),
}

impl LogSource for PgChain {
    fn name(&self) -> PathBuf {
        PathBuf::from(format!(
            "{} (tenant `{}`)",
            redact_url(&self.url),
            self.tenant
        ))
    }

    fn unit(&self) -> &'static str {
        "record"
    }

    fn scan(&self, visit: &mut dyn FnMut(&[u8], Record)) -> Result<Scanned, ProvenanceError> {
        let name = self.name();
        let shown = redact_url(&self.url);
        let mut damage = None;
        let scanned = block_on(&name, async {
            let target = Target::parse(&self.url, PgOptions::DEFAULT_UNAVAILABLE_AFTER)
                .map_err(|e| e.to_string())?;
            let (client, conn) = target.connect().await.map_err(|e| e.to_string())?;
            let db =
                |e: tokio_postgres::Error| Stop::Db(format!("the database {shown}: {}", why(&e)));
            let read = async {
                let rows = client
                    .query_raw(
                        "SELECT seq, line FROM sluice_provenance WHERE tenant = $1 ORDER BY seq",
                        [&self.tenant],
                    )
                    .await
                    .map_err(db)?;
                let mut rows = std::pin::pin!(rows.map_err(db));
                let mut checker = Checker::new();
                while let Some(row) = rows.next().await {
                    let row = row?;
                    let seq: i64 = row.get(0);
                    let line: &str = row.get(1);
                    let expected = checker.state().records + 1;
                    if seq as u64 != expected {
                        return Err(Stop::Damaged(
                            expected as usize,
                            format!(
                                "is missing or out of place: the row after record {} has seq \
                                 {seq} (a row was deleted, inserted or moved)",
                                expected - 1
                            ),
                        ));
                    }
                    match checker.check(line.as_bytes()) {
                        Ok(record) => visit(line.as_bytes(), record),
                        Err(why) => return Err(Stop::Damaged(expected as usize, why)),
                    }
                }
                Ok(checker.into_state())
            };
            let result = read.await;
            conn.task.abort();
            match result {
                Ok(s) => Ok(Some(s)),
                Err(Stop::Db(why)) => Err(why),
                Err(Stop::Damaged(line, why)) => {
                    damage = Some((line, why));
                    Ok(None)
                }
            }
        })?;
        match (scanned, damage) {
            (Some(s), _) => Ok(s),
            (None, Some((line, why))) => Err(ProvenanceError::Damaged {
                path: name,
                line,
                why,
                torn_tail: false,
            }),
            (None, None) => Err(ProvenanceError::Damaged {
                path: name,
                line: 0,
                why: "could not be read".into(),
                torn_tail: false,
            }),
        }
    }
}
