//! The embedded provenance log: an append-only, hash-chained JSON Lines file.
//!
//! Takes in: groups of records from the kernel (it implements [`ProvenanceSink`]): a call's edges
//! and the call, or a batch. Hands on: lines on disk (see [`crate::chain`] for their form), the
//! lineage edges the kernel could not know (see [`crate::lineage`]), and — when asked — signed
//! checkpoints in `LOG.checkpoints`.
//!
//! One thread per log writes. It takes every group queued, adds each call's lineage edges from
//! the last writers it keeps, appends the lines, feeds them to the Merkle tree, then writes the
//! lot and — in [`Durability::Durable`] mode — calls `fdatasync` once before it answers any of
//! them (group commit: a call and its edges are always in one commit). A group's place is fixed
//! when it is queued, which the kernel does before it releases the call's successors.
//!
//! When a write or sync fails (disk full, I/O error), the file is cut back to the end of the last
//! committed group, so it stays verifiable; every group of the failed commit and every later one
//! is refused with the reason (results say `recorded: false`). The log takes nothing more until
//! it is opened again: a gap would make it lie by omission.
//!
//! Opening a log for writing takes an exclusive lock on the file: a second writer, in this process
//! or another, is refused. The log is read once, streaming, to rebuild the chain's head, the
//! Merkle tree's frontier and the last writers (memory in the distinct resources, not the
//! records). A torn last line (a crash mid-write) is repaired — kept with its newline added when
//! it is whole and checks, cut otherwise — and the repair is reported; any other damage refuses
//! the open, naming the line. A file the open creates has its directory entry synced too.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, OnceLock};
use std::thread::JoinHandle;

use sluice_kernel::provenance::{ProvenanceSink, Record, RecordFuture};
use sluice_kernel::Error;
use tokio::sync::oneshot;

use crate::chain::{self, sha256_hex, DamageKind, ScanError};
use crate::error::ProvenanceError;
use crate::lineage::LastWriters;
use crate::merkle::Frontier;
use crate::note::{Checkpoint, SignerKey};

/// When a record counts as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// On disk (`fdatasync`, once per commit) before the record is acknowledged. The default.
    #[default]
    Durable,
    /// Acknowledged once written to the operating system, which syncs when it decides.
    Buffered,
}

/// How to open a log.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct LogOptions {
    /// When a record counts as written.
    pub durability: Durability,
    /// Signed checkpoints to append to `LOG.checkpoints`.
    pub checkpoints: Option<CheckpointOptions>,
    /// For tests of what a full disk does: writes past this many bytes fail with `ENOSPC`
    /// (the part that fits is written first, as a real full disk does).
    pub fail_writes_after: Option<u64>,
}

impl LogOptions {
    /// Options with this durability.
    pub fn new(durability: Durability) -> Self {
        Self {
            durability,
            ..Self::default()
        }
    }

    /// Appends a signed checkpoint to `LOG.checkpoints` every `every` records (and one at close
    /// for the records since the last).
    pub fn with_checkpoints(mut self, checkpoints: CheckpointOptions) -> Self {
        self.checkpoints = Some(checkpoints);
        self
    }

    /// Makes writes past `bytes` more bytes fail as on a full disk (for tests).
    pub fn with_fail_writes_after(mut self, bytes: u64) -> Self {
        self.fail_writes_after = Some(bytes);
        self
    }
}

/// Signed checkpoints as the log grows.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CheckpointOptions {
    /// The signer key.
    pub key: SignerKey,
    /// A checkpoint every this many records (at least 1).
    pub every: u64,
    /// The origin line (the key's name unless set).
    pub origin: String,
}

impl CheckpointOptions {
    /// A checkpoint every `every` records, signed by `key`, with the key's name as origin.
    pub fn new(key: SignerKey, every: u64) -> Self {
        Self {
            origin: key.name().to_owned(),
            key,
            every: every.max(1),
        }
    }

    /// Sets the origin line.
    pub fn with_origin(mut self, origin: impl Into<String>) -> Self {
        self.origin = origin.into();
        self
    }
}

/// The checkpoints file of a log: `LOG.checkpoints` beside it.
pub fn checkpoints_path(log: &Path) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(".checkpoints");
    PathBuf::from(name)
}

/// What opening a log found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    /// Records already in the log.
    pub records: u64,
    /// The head hash.
    pub head: String,
    /// A repair made on open (a torn last line), said plainly.
    pub repaired: Option<String>,
    /// Distinct resources whose last writer the log keeps (what the open's memory grows with).
    pub resources: usize,
    /// Whether the open created the file.
    pub created: bool,
}

type Ack = oneshot::Sender<Result<u64, Error>>;

enum Message {
    Append(Vec<Record>, Option<Ack>),
    Flush(oneshot::Sender<Result<(), Error>>),
    /// Write what is queued, then close as a drop does; answers once the log is closed.
    Close(oneshot::Sender<Result<(), Error>>),
}

/// An open provenance log. Dropping it (or [`ProvenanceLog::close`]) writes what is queued, syncs,
/// and writes a last checkpoint when checkpoints are on.
#[derive(Debug)]
pub struct ProvenanceLog {
    tx: Option<mpsc::Sender<Message>>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
    opened: Opened,
    durability: Durability,
    /// Why the writer takes nothing more (set by its first failed commit).
    failed: Arc<OnceLock<String>>,
}

/// Syncs a directory, so that an entry created in it survives a crash.
fn sync_dir(file: &Path) -> std::io::Result<()> {
    let dir = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

/// Opens (creating it if needed) a file for appending; whether it was created.
fn open_or_create(path: &Path) -> std::io::Result<(File, bool)> {
    let mut o = OpenOptions::new();
    o.read(true).write(true);
    match o.clone().create_new(true).open(path) {
        Ok(f) => Ok((f, true)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok((o.open(path)?, false)),
        Err(e) => Err(e),
    }
}

impl ProvenanceLog {
    /// Opens (creating it if needed) the log at `path` for appending.
    ///
    /// ```
    /// use sluice_provenance::{Durability, ProvenanceLog};
    /// let dir = std::env::temp_dir().join(format!("sluice-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let log = ProvenanceLog::open(&dir.join("log.jsonl"), Durability::Durable).unwrap();
    /// assert_eq!(log.opened().records, 0);
    /// ```
    pub fn open(path: &Path, durability: Durability) -> Result<Self, ProvenanceError> {
        Self::open_with(path, LogOptions::new(durability))
    }

    /// Opens (creating it if needed) the log at `path` with options.
    pub fn open_with(path: &Path, options: LogOptions) -> Result<Self, ProvenanceError> {
        let io = |source| ProvenanceError::Io {
            path: path.to_owned(),
            source,
        };
        let (mut file, created) = open_or_create(path).map_err(io)?;
        file.try_lock().map_err(|_| ProvenanceError::Locked {
            path: path.to_owned(),
        })?;
        if created {
            sync_dir(path).map_err(io)?;
        }
        // One streaming pass: the chain, the tree and the last writers.
        let mut frontier = Frontier::new();
        let mut writers = LastWriters::new();
        let scanned = chain::scan(BufReader::new(&file), |line, record| {
            frontier.push_line(line);
            if let Record::Call(c) = &record {
                writers.apply(c);
            }
        });
        let mut repaired = None;
        let at = match scanned {
            Ok(at) => at,
            Err(ScanError::Io(e)) => return Err(io(e)),
            Err(ScanError::Damaged { damage, at }) => match damage.kind {
                DamageKind::Broken => {
                    return Err(ProvenanceError::Damaged {
                        path: path.to_owned(),
                        line: damage.line,
                        why: damage.why,
                        torn_tail: false,
                    })
                }
                DamageKind::TornTail { complete: true } => {
                    file.seek(SeekFrom::End(0)).map_err(io)?;
                    file.write_all(b"\n").map_err(io)?;
                    file.sync_data().map_err(io)?;
                    repaired = Some("added the newline a whole last line was missing".into());
                    at
                }
                DamageKind::TornTail { complete: false } => {
                    let len = file.metadata().map_err(io)?.len();
                    file.set_len(at.valid_len).map_err(io)?;
                    file.sync_data().map_err(io)?;
                    repaired = Some(format!(
                        "cut a torn last line ({} bytes) left by a write that was cut short",
                        len - at.valid_len
                    ));
                    at
                }
            },
        };
        let len = file.seek(SeekFrom::End(0)).map_err(io)?;
        let opened = Opened {
            records: at.records,
            head: at.head.clone(),
            repaired,
            resources: writers.len(),
            created,
        };
        let checkpoints = match options.checkpoints {
            Some(c) => {
                let cp_path = checkpoints_path(path);
                let cp_io = |source| ProvenanceError::Io {
                    path: cp_path.clone(),
                    source,
                };
                let (mut cp_file, cp_created) = open_or_create(&cp_path).map_err(cp_io)?;
                cp_file.seek(SeekFrom::End(0)).map_err(cp_io)?;
                if cp_created {
                    sync_dir(&cp_path).map_err(cp_io)?;
                }
                Some(Checkpointer {
                    key: c.key,
                    every: c.every.max(1),
                    origin: c.origin,
                    file: cp_file,
                    last_size: at.records,
                    due: Vec::new(),
                })
            }
            None => None,
        };
        let (tx, rx) = mpsc::channel();
        let failed = Arc::new(OnceLock::new());
        let state = Writer {
            failed: failed.clone(),
            file,
            room: options.fail_writes_after,
            len,
            unsynced: false,
            seq: at.records,
            prev: at.head,
            frontier,
            writers,
            durability: options.durability,
            broken: None,
            checkpoints,
            checkpoint_error: None,
        };
        let thread = std::thread::Builder::new()
            .name("sluice-provenance".into())
            .spawn(move || state.run(rx))
            .map_err(io)?;
        Ok(ProvenanceLog {
            tx: Some(tx),
            thread: Some(thread),
            path: path.to_owned(),
            opened,
            durability: options.durability,
            failed,
        })
    }

    /// What opening found (records already there, head, repair made).
    pub fn opened(&self) -> &Opened {
        &self.opened
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends a record; the returned future resolves with its `seq` once it is as safe as the
    /// log's durability promises.
    pub fn append(&self, record: Record) -> oneshot::Receiver<Result<u64, Error>> {
        self.append_group(vec![record])
    }

    /// Appends a group of records in one commit (all or none); the future resolves with the `seq`
    /// of the group's last line (lineage edges the log adds included). The group's place in the
    /// log is fixed here.
    pub fn append_group(&self, group: Vec<Record>) -> oneshot::Receiver<Result<u64, Error>> {
        let (done, rx) = oneshot::channel();
        match &self.tx {
            Some(tx) => {
                if let Err(mpsc::SendError(Message::Append(_, Some(done)))) =
                    tx.send(Message::Append(group, Some(done)))
                {
                    let _ = done.send(Err(refused("the provenance log is closed")));
                }
            }
            None => {
                let _ = done.send(Err(refused("the provenance log is closed")));
            }
        }
        rx
    }

    /// Waits until everything queued is written and synced; an error when anything could not be
    /// (records or checkpoints).
    pub async fn flush(&self) -> Result<(), Error> {
        ProvenanceSink::flush(self).await
    }

    /// Sends `message` (made with its answer's sender) to the writer; the future answers what
    /// the writer says.
    fn ask(&self, message: fn(oneshot::Sender<Result<(), Error>>) -> Message) -> RecordFuture {
        let (done, rx) = oneshot::channel();
        let sent = self
            .tx
            .as_ref()
            .is_some_and(|tx| tx.send(message(done)).is_ok());
        Box::pin(async move {
            if !sent {
                return Err(refused("the provenance log is closed"));
            }
            rx.await
                .map_err(|_| refused("the provenance writer stopped"))?
        })
    }

    /// Writes what is queued, syncs, writes the last checkpoint, and closes the log.
    pub fn close(mut self) {
        self.shut();
    }

    fn shut(&mut self) {
        self.tx = None; // the writer drains the queue, syncs and ends
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The log could not keep what it was handed (the kernel's error for a refusing sink).
fn refused(why: impl Into<String>) -> Error {
    Error::ProvenanceRefused { why: why.into() }
}

impl Drop for ProvenanceLog {
    fn drop(&mut self) {
        self.shut();
    }
}

impl ProvenanceSink for ProvenanceLog {
    fn record(&self, group: Vec<Record>) -> RecordFuture {
        let ack = self.append_group(group);
        Box::pin(async move {
            ack.await
                .map_err(|_| refused("the provenance writer stopped"))?
                .map(|_| ())
        })
    }

    fn flush(&self) -> RecordFuture {
        self.ask(Message::Flush)
    }

    /// Writes what is queued, syncs and writes the last checkpoint, as a drop does; the log
    /// takes nothing more.
    fn close(&self) -> RecordFuture {
        self.ask(Message::Close)
    }

    /// Under `durable`, yes: every call's intent is on disk before its handler starts.
    fn durable_first(&self) -> bool {
        self.durability == Durability::Durable
    }

    /// Under `durable`, no once a write failed (the log takes nothing more until it is opened
    /// again): the kernel then starts no call, so none runs unrecorded.
    fn available(&self, _tenant: &str) -> Result<(), Error> {
        match (self.durability, self.failed.get()) {
            (Durability::Durable, Some(why)) => Err(Error::ProvenanceUnavailable {
                why: format!(
                    "the log {} takes nothing more after a failed write: {why}",
                    self.path.display()
                ),
            }),
            _ => Ok(()),
        }
    }
}

/// Signed checkpoints as the log grows.
struct Checkpointer {
    key: SignerKey,
    every: u64,
    origin: String,
    file: File,
    /// The size of the last checkpoint written (or the log's size at open).
    last_size: u64,
    /// Checkpoints of the commit in progress, written once it is on disk.
    due: Vec<Checkpoint>,
}

/// The writer thread's state.
struct Writer {
    file: File,
    /// Bytes left before an injected full disk.
    room: Option<u64>,
    /// The file's length after the last committed group.
    len: u64,
    /// Bytes written since the last sync (buffered mode).
    unsynced: bool,
    seq: u64,
    prev: String,
    frontier: Frontier,
    writers: LastWriters,
    durability: Durability,
    /// Set by the first failed commit: nothing more is written (every later group is refused with
    /// this reason).
    broken: Option<String>,
    /// `broken`, as the handle sees it.
    failed: Arc<OnceLock<String>>,
    checkpoints: Option<Checkpointer>,
    /// Set when a checkpoint could not be written (the records are safe; `flush` says so).
    checkpoint_error: Option<String>,
}

impl Writer {
    /// Adds one line to the commit being built.
    fn add(&mut self, record: &Record, buf: &mut Vec<u8>) {
        self.seq += 1;
        let start = chain::write_line(self.seq, &self.prev, record, buf);
        let line = buf.get(start..).unwrap_or_default();
        self.prev = sha256_hex(line);
        self.frontier.push_line(line);
        buf.push(b'\n');
        if let Some(c) = &mut self.checkpoints {
            if self.seq.is_multiple_of(c.every) {
                c.due.push(Checkpoint {
                    origin: c.origin.clone(),
                    size: self.seq,
                    root: self.frontier.root(),
                });
            }
        }
    }

    /// Adds a group: its records, each call preceded by its lineage edges; returns the last seq.
    fn add_group(&mut self, group: &[Record], buf: &mut Vec<u8>) -> u64 {
        let mut writers = std::mem::take(&mut self.writers);
        writers.add_group(group, |r| self.add(r, buf));
        self.writers = writers;
        self.seq
    }

    /// Writes the commit's bytes, honouring an injected full disk.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<()> {
        if let Some(room) = &mut self.room {
            if (buf.len() as u64) > *room {
                let fits = *room as usize;
                self.file.write_all(buf.get(..fits).unwrap_or(buf))?;
                *room = 0;
                return Err(std::io::Error::from_raw_os_error(28)); // ENOSPC
            }
            *room -= buf.len() as u64;
        }
        self.file.write_all(buf)
    }

    /// Cuts the file back to the last committed group after a failed commit.
    fn roll_back(&mut self) {
        let cut = self
            .file
            .set_len(self.len)
            .and_then(|()| self.file.seek(SeekFrom::Start(self.len)).map(|_| ()))
            .and_then(|()| self.file.sync_data());
        if let Err(e) = cut {
            tracing::error!(error = %e, "the provenance log could not be cut back after a failed \
                write; the next open repairs its tail");
        }
    }

    /// Appends the due checkpoints to the checkpoints file and syncs it.
    fn write_checkpoints(&mut self) {
        let Some(c) = &mut self.checkpoints else {
            return;
        };
        if c.due.is_empty() {
            return;
        }
        let mut text = String::new();
        for cp in c.due.drain(..) {
            text.push_str(&cp.sign(&c.key));
            text.push('\n');
            c.last_size = cp.size;
        }
        let written = c
            .file
            .write_all(text.as_bytes())
            .and_then(|()| c.file.sync_data());
        if let Err(e) = written {
            tracing::error!(error = %e, "a signed checkpoint could not be written");
            self.checkpoint_error.get_or_insert_with(|| e.to_string());
        }
    }

    fn run(mut self, rx: mpsc::Receiver<Message>) {
        let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
        let mut closing = None;
        while let Some(first) = closing.is_none().then(|| rx.recv().ok()).flatten() {
            // Group commit: everything queued now goes in one write and one sync.
            let mut acks = Vec::new();
            let mut flushes = Vec::new();
            let mut next = Some(first);
            while let Some(msg) = next {
                match msg {
                    Message::Append(group, ack) => {
                        if self.broken.is_none() {
                            let seq = self.add_group(&group, &mut buf);
                            if let Some(a) = ack {
                                acks.push((a, seq));
                            }
                        } else if let Some(a) = ack {
                            acks.push((a, 0));
                        }
                    }
                    Message::Flush(done) => flushes.push(done),
                    Message::Close(done) => closing = Some(done),
                }
                // What comes after a close is refused (its sender sees the log closed).
                next = closing.is_none().then(|| rx.try_recv().ok()).flatten();
            }
            let mut result = match &self.broken {
                Some(why) => Err(format!(
                    "the log takes nothing more after a failed write: {why}"
                )),
                None => self.write(&buf).map_err(|e| e.to_string()),
            };
            // Synced: every durable commit; in buffered mode, before a flush answers and before
            // a checkpoint vouches for the records.
            let checkpoint_due = self.checkpoints.as_ref().is_some_and(|c| !c.due.is_empty());
            let must_sync =
                self.durability == Durability::Durable || !flushes.is_empty() || checkpoint_due;
            if result.is_ok() {
                self.unsynced |= !buf.is_empty();
                if must_sync && self.unsynced {
                    result = self.file.sync_data().map_err(|e| e.to_string());
                    self.unsynced = false;
                }
            }
            match &result {
                Ok(()) => {
                    self.len += buf.len() as u64;
                    self.write_checkpoints();
                }
                Err(e) if self.broken.is_none() => {
                    tracing::error!(error = %e, "the provenance log could not be written");
                    self.roll_back();
                    if let Some(c) = &mut self.checkpoints {
                        c.due.clear();
                    }
                    self.broken = Some(e.clone());
                    let _ = self.failed.set(e.clone());
                }
                Err(_) => {}
            }
            buf.clear();
            for (a, seq) in acks {
                let _ = a.send(result.clone().map(|_| seq).map_err(refused));
            }
            let flushed = result.and_then(|()| match &self.checkpoint_error {
                Some(e) => Err(format!("signed checkpoints could not be written: {e}")),
                None => Ok(()),
            });
            for f in flushes {
                let _ = f.send(flushed.clone().map_err(refused));
            }
        }
        if self.broken.is_none() {
            let _ = self.file.sync_data();
            // A last checkpoint for the records since the last one.
            if let Some(c) = &mut self.checkpoints {
                if self.seq > c.last_size {
                    c.due.push(Checkpoint {
                        origin: c.origin.clone(),
                        size: self.seq,
                        root: self.frontier.root(),
                    });
                }
            }
            self.write_checkpoints();
        }
        if let Some(done) = closing {
            let closed = match (&self.broken, &self.checkpoint_error) {
                (Some(why), _) => Err(format!("the log took nothing after a failed write: {why}")),
                (None, Some(e)) => Err(format!("signed checkpoints could not be written: {e}")),
                (None, None) => Ok(()),
            };
            let _ = done.send(closed.map_err(refused));
        }
    }
}
