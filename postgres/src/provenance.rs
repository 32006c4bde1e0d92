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
//! locks in a cycle), takes the tenant's advisory lock, reads the rows other processes appended
//! since its last look — checking them as a reader would and taking their writes into its last
//! writers, which is how lineage crosses processes — then adds its groups, each call preceded
//! by the `read-after-write` edges it gets from earlier writers of other batches, wherever they
//! ran. A group is acknowledged once the transaction has committed (`durable`: PostgreSQL's
//! `synchronous_commit`, so on disk; `buffered`: `synchronous_commit = off`).
//!
//! A commit that fails (the database went away, a statement was refused) refuses its groups and
//! every later one, with the reason: the sink takes nothing more until the process opens it
//! again, as the file log does — a gap would make the chain lie by omission.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use sluice_kernel::provenance::{ProvenanceSink, Record, RecordFuture};
use sluice_provenance::chain::{self, sha256_hex, GENESIS};
use sluice_provenance::lineage::LastWriters;
use sluice_provenance::{Checker, Durability, LogSource, ProvenanceError, Scanned};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Statement};

use crate::{connect_one, migrate, redact_url, ConnectionTask, PgError};

/// The advisory lock key space of a tenant's provenance appends (admissions use
/// [`crate::ADMIT_LOCK_SEED`]).
const LOCK_SEED: i64 = 7263;

/// Most groups in one commit.
const MAX_GROUPS: usize = 1024;

enum Message {
    Append(Vec<Record>, oneshot::Sender<Result<u64, String>>),
    Flush(oneshot::Sender<Result<(), String>>),
    Close(oneshot::Sender<()>),
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
    tx: mpsc::UnboundedSender<Message>,
}

impl std::fmt::Debug for PgProvenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgProvenance")
            .field("url", &self.url)
            .finish()
    }
}

/// The statements the writer uses, prepared once.
struct Statements {
    lock: Statement,
    since: Statement,
    insert: Statement,
}

/// One tenant's chain as this process last saw it.
#[derive(Clone)]
struct Head {
    records: u64,
    head: String,
}

/// The writer task's state.
struct Writer {
    url: String,
    client: Client,
    statements: Statements,
    heads: std::collections::HashMap<String, Head>,
    writers: LastWriters,
    broken: Option<String>,
}

impl PgProvenance {
    /// Connects (one connection), runs the migrations, and starts the writer. Fails when the
    /// database cannot be reached.
    pub async fn connect(url: &str, durability: Durability) -> Result<Arc<Self>, PgError> {
        if !is_postgres_url(url) {
            return Err(PgError::NotAUrl(url.to_owned()));
        }
        let shown = redact_url(url);
        let db = |e: tokio_postgres::Error| PgError::Database {
            url: shown.clone(),
            why: crate::why(&e),
        };
        let (mut client, conn) = connect_one(url, &shown).await?;
        migrate(&mut client).await.map_err(db)?;
        if durability == Durability::Buffered {
            client
                .batch_execute("SET synchronous_commit TO off")
                .await
                .map_err(db)?;
        }
        let statements = Statements {
            lock: client
                .prepare("SELECT pg_advisory_xact_lock(hashtextextended($1, $2))")
                .await
                .map_err(db)?,
            since: client
                .prepare(
                    "SELECT seq, line FROM sluice_provenance \
                     WHERE tenant = $1 AND seq > $2 ORDER BY seq",
                )
                .await
                .map_err(db)?,
            insert: client
                .prepare(
                    "INSERT INTO sluice_provenance (tenant, seq, line) \
                     SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[])",
                )
                .await
                .map_err(db)?,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let writer = Writer {
            url: shown.clone(),
            client,
            statements,
            heads: Default::default(),
            writers: LastWriters::new(),
            broken: None,
        };
        tokio::spawn(writer.run(rx, conn));
        Ok(Arc::new(PgProvenance { url: shown, tx }))
    }

    /// The database, without its password.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Appends a group of records in one commit (all or none); resolves with the tenant's `seq`
    /// of the group's last line once committed.
    pub fn append_group(&self, group: Vec<Record>) -> oneshot::Receiver<Result<u64, String>> {
        let (done, rx) = oneshot::channel();
        if let Err(mpsc::error::SendError(Message::Append(_, done))) =
            self.tx.send(Message::Append(group, done))
        {
            let _ = done.send(Err(format!("the provenance log {} is closed", self.url)));
        }
        rx
    }

    /// Waits until everything queued before it is committed; an error when anything could not be.
    pub async fn flush(&self) -> Result<(), String> {
        let (done, rx) = oneshot::channel();
        self.tx
            .send(Message::Flush(done))
            .map_err(|_| format!("the provenance log {} is closed", self.url))?;
        rx.await
            .map_err(|_| format!("the provenance writer of {} stopped", self.url))?
    }

    /// Commits what is queued and stops the writer; later appends are refused.
    pub async fn close(&self) {
        let (done, rx) = oneshot::channel();
        if self.tx.send(Message::Close(done)).is_ok() {
            let _ = rx.await;
        }
    }
}

impl ProvenanceSink for PgProvenance {
    fn record(&self, group: Vec<Record>) -> RecordFuture {
        let ack = self.append_group(group);
        let url = self.url.clone();
        Box::pin(async move {
            ack.await
                .map_err(|_| format!("the provenance writer of {url} stopped"))?
                .map(|_| ())
        })
    }
}

/// The tenant a group belongs to (every record names it).
fn tenant_of(group: &[Record]) -> Option<&str> {
    group.first().map(|r| match r {
        Record::Call(c) => c.tenant.as_str(),
        Record::Edge(e) => e.tenant.as_str(),
        Record::Batch(b) => b.tenant.as_str(),
    })
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Message>, mut conn: ConnectionTask) {
        let mut closing = None;
        while closing.is_none() {
            let Some(first) = rx.recv().await else { break };
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
            if self.broken.is_none() {
                if let Ok(Err(why)) = conn.events.try_recv() {
                    self.broken = Some(format!("the connection to {} failed: {why}", self.url));
                }
            }
            let result = match &self.broken {
                Some(why) => Err(format!(
                    "the provenance log takes nothing more after a failed commit: {why}"
                )),
                None if groups.is_empty() => Ok(Vec::new()),
                None => match self.commit(&groups).await {
                    Ok(seqs) => Ok(seqs),
                    Err(why) => {
                        tracing::error!(error = %why, "the provenance log could not commit");
                        self.broken = Some(why.clone());
                        Err(why)
                    }
                },
            };
            match &result {
                Ok(seqs) => {
                    for (a, seq) in acks.into_iter().zip(seqs) {
                        let _ = a.send(Ok(*seq));
                    }
                }
                Err(why) => {
                    for a in acks {
                        let _ = a.send(Err(why.clone()));
                    }
                }
            }
            for f in flushes {
                let _ = f.send(result.as_ref().map(|_| ()).map_err(Clone::clone));
            }
        }
        // Refuse what came after a close.
        rx.close();
        while let Ok(msg) = rx.try_recv() {
            match msg {
                Message::Append(_, a) => {
                    let _ = a.send(Err(format!("the provenance log {} is closed", self.url)));
                }
                Message::Flush(f) => {
                    let _ = f.send(Err(format!("the provenance log {} is closed", self.url)));
                }
                Message::Close(c) => {
                    let _ = c.send(());
                }
            }
        }
        drop(self.client);
        conn.task.abort();
        if let Some(c) = closing {
            let _ = c.send(());
        }
    }

    /// One transaction for every group: per tenant, in name order, the lock, the rows others
    /// appended, then this process's lines. Returns each group's last `seq`.
    async fn commit(&mut self, groups: &[Vec<Record>]) -> Result<Vec<u64>, String> {
        let url = self.url.clone();
        let db = |e: tokio_postgres::Error| format!("the database {url}: {}", crate::why(&e));
        let mut by_tenant: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, g) in groups.iter().enumerate() {
            if let Some(t) = tenant_of(g) {
                by_tenant.entry(t).or_default().push(i);
            }
        }
        let mut seqs = vec![0u64; groups.len()];
        let mut tenants: Vec<&str> = Vec::new();
        let mut numbers: Vec<i64> = Vec::new();
        let mut lines: Vec<String> = Vec::new();
        let mut heads = Vec::new();
        let tx = self.client.transaction().await.map_err(db)?;
        for (tenant, indexes) in by_tenant {
            let known = self.heads.get(tenant).cloned().unwrap_or(Head {
                records: 0,
                head: GENESIS.to_owned(),
            });
            // The lock and the read go out together (one round trip).
            let after = known.records as i64;
            let (lock_args, since_args): ([&(dyn ToSql + Sync); 2], [&(dyn ToSql + Sync); 2]) =
                ([&tenant, &LOCK_SEED], [&tenant, &after]);
            let lock = tx.execute(&self.statements.lock, &lock_args);
            let since = tx.query(&self.statements.since, &since_args);
            let (locked, rows) = futures::join!(lock, since);
            locked.map_err(db)?;
            let rows = rows.map_err(db)?;
            let mut checker = Checker::resume(known.records, &known.head);
            for row in rows {
                let seq: i64 = row.get(0);
                let line: &str = row.get(1);
                let expected = checker.state().records + 1;
                let record = if seq as u64 != expected {
                    Err(format!(
                        "is stored as seq {seq} where {expected} was expected: a row was \
                         deleted, inserted or moved"
                    ))
                } else {
                    checker.check(line.as_bytes())
                };
                match record {
                    Ok(Record::Call(c)) => self.writers.apply(&c),
                    Ok(_) => {}
                    Err(why) => {
                        return Err(format!(
                            "the provenance chain of tenant `{tenant}` in {url} is damaged at \
                             record {expected}: the record {why} (`sluice provenance verify` \
                             names it); nothing is appended after it"
                        ))
                    }
                }
            }
            let mut at = checker.into_state();
            for &i in &indexes {
                let (records, head) = (&mut at.records, &mut at.head);
                self.writers.add_group(&groups[i], |r| {
                    *records += 1;
                    let line = chain::line(*records, head, r);
                    *head = sha256_hex(line.as_bytes());
                    tenants.push(tenant);
                    numbers.push(*records as i64);
                    lines.push(line);
                });
                seqs[i] = at.records;
            }
            heads.push((
                tenant.to_owned(),
                Head {
                    records: at.records,
                    head: at.head,
                },
            ));
        }
        tx.execute(&self.statements.insert, &[&tenants, &numbers, &lines])
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)?;
        self.heads.extend(heads);
        Ok(seqs)
    }
}

/// Whether `text` names a PostgreSQL database (`postgres://` or `postgresql://`).
pub fn is_postgres_url(text: &str) -> bool {
    text.starts_with("postgres://") || text.starts_with("postgresql://")
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
            let (client, conn) = connect_one(url, &redact_url(url))
                .await
                .map_err(|e| e.to_string())?;
            let rows = client
                .query(
                    "SELECT DISTINCT tenant FROM sluice_provenance ORDER BY tenant",
                    &[],
                )
                .await
                .map_err(|e| format!("the database {}: {}", redact_url(url), crate::why(&e)));
            conn.task.abort();
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
            let (client, conn) = connect_one(&self.url, &shown)
                .await
                .map_err(|e| e.to_string())?;
            let db = |e: tokio_postgres::Error| {
                Stop::Db(format!("the database {shown}: {}", crate::why(&e)))
            };
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
