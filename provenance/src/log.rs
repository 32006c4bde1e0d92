//! The embedded provenance log: an append-only, hash-chained JSON Lines file.
//!
//! Takes in: records from the kernel (it implements [`ProvenanceSink`]). Hands on: lines on disk
//! (see [`crate::chain`] for their form), written by one thread per log in groups: the thread
//! takes every record queued, writes them, flushes, and — in [`Durability::Durable`] mode — calls
//! `fdatasync` once for the group before it acknowledges any of them (group commit). The kernel
//! waits for that acknowledgement before it returns the call's result, so a result the embedder
//! has seen is on disk. [`Durability::Buffered`] acknowledges on enqueue and lets the OS write
//! when it will.
//!
//! Opening a log for writing takes an exclusive lock on the file: a second writer, in this process
//! or another, is refused. A torn last line (a crash mid-write) is repaired — kept with its newline
//! added when it is whole and checks, cut otherwise — and the repair is reported; any other damage
//! refuses the open, naming the line.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;

use sluice_kernel::provenance::{ProvenanceSink, Record, RecordFuture};
use tokio::sync::oneshot;

use crate::chain::{self, sha256_hex};
use crate::error::ProvenanceError;

/// When a record counts as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// On disk (`fdatasync`, once per group) before the record is acknowledged. The default.
    #[default]
    Durable,
    /// Acknowledged when queued; written at once, synced when the OS decides.
    Buffered,
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
}

enum Message {
    Append(Box<Record>, Option<oneshot::Sender<Result<u64, String>>>),
    Flush(oneshot::Sender<Result<(), String>>),
}

/// An open provenance log. Dropping it (or [`ProvenanceLog::close`]) writes what is queued and
/// syncs.
#[derive(Debug)]
pub struct ProvenanceLog {
    tx: Option<mpsc::Sender<Message>>,
    thread: Option<JoinHandle<()>>,
    durability: Durability,
    path: PathBuf,
    opened: Opened,
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
        let io = |source| ProvenanceError::Io {
            path: path.to_owned(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        file.try_lock().map_err(|_| ProvenanceError::Locked {
            path: path.to_owned(),
        })?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        let (keep, add_newline) =
            chain::repair_plan(&bytes).map_err(|d| ProvenanceError::Damaged {
                path: path.to_owned(),
                line: d.line,
                why: d.why,
            })?;
        let mut repaired = None;
        if keep < bytes.len() {
            file.set_len(keep as u64).map_err(io)?;
            file.sync_data().map_err(io)?;
            repaired = Some(format!(
                "cut a torn last line ({} bytes) left by a write that was cut short",
                bytes.len() - keep
            ));
            bytes.truncate(keep);
        }
        file.seek(SeekFrom::End(0)).map_err(io)?;
        if add_newline {
            file.write_all(b"\n").map_err(io)?;
            file.sync_data().map_err(io)?;
            bytes.push(b'\n');
            repaired = Some("added the newline a whole last line was missing".into());
        }
        let verified = chain::verify(&bytes).map_err(|d| ProvenanceError::Damaged {
            path: path.to_owned(),
            line: d.line,
            why: d.why,
        })?;
        let opened = Opened {
            records: verified.records.len() as u64,
            head: verified.head.clone(),
            repaired,
        };
        let (tx, rx) = mpsc::channel();
        let state = Writer {
            file,
            seq: opened.records,
            prev: verified.head,
            durability,
            broken: None,
        };
        let thread = std::thread::Builder::new()
            .name("sluice-provenance".into())
            .spawn(move || state.run(rx))
            .map_err(io)?;
        Ok(ProvenanceLog {
            tx: Some(tx),
            thread: Some(thread),
            durability,
            path: path.to_owned(),
            opened,
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
    pub fn append(&self, record: Record) -> oneshot::Receiver<Result<u64, String>> {
        let (done, rx) = oneshot::channel();
        match &self.tx {
            Some(tx) => {
                if let Err(mpsc::SendError(Message::Append(_, Some(done)))) =
                    tx.send(Message::Append(Box::new(record), Some(done)))
                {
                    let _ = done.send(Err("the provenance log is closed".into()));
                }
            }
            None => {
                let _ = done.send(Err("the provenance log is closed".into()));
            }
        }
        rx
    }

    /// Waits until everything queued is written and synced.
    pub async fn flush(&self) -> Result<(), String> {
        let (done, rx) = oneshot::channel();
        let Some(tx) = &self.tx else {
            return Err("the provenance log is closed".into());
        };
        tx.send(Message::Flush(done))
            .map_err(|_| "the provenance log is closed".to_string())?;
        rx.await
            .map_err(|_| "the provenance writer stopped".to_string())?
    }

    /// Writes what is queued, syncs, and closes the log.
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

impl Drop for ProvenanceLog {
    fn drop(&mut self) {
        self.shut();
    }
}

impl ProvenanceSink for ProvenanceLog {
    fn record(&self, record: Record) -> RecordFuture {
        let ack = self.append(record);
        match self.durability {
            Durability::Buffered => Box::pin(async { Ok(()) }),
            Durability::Durable => Box::pin(async move {
                ack.await
                    .map_err(|_| "the provenance writer stopped".to_string())?
                    .map(|_| ())
            }),
        }
    }
}

/// The writer thread's state.
struct Writer {
    file: File,
    seq: u64,
    prev: String,
    durability: Durability,
    /// Set by the first failed write: the chain on disk no longer matches `seq`/`prev`, so
    /// nothing more is written (every later append is refused with this reason).
    broken: Option<String>,
}

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<Message>) {
        let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
        while let Ok(first) = rx.recv() {
            // Group commit: everything queued now goes in one write and one sync.
            let mut acks = Vec::new();
            let mut flushes = Vec::new();
            let mut next = Some(first);
            while let Some(msg) = next {
                match msg {
                    Message::Append(record, ack) => {
                        self.seq += 1;
                        let line = chain::line(self.seq, &self.prev, &record);
                        self.prev = sha256_hex(line.as_bytes());
                        buf.extend_from_slice(line.as_bytes());
                        buf.push(b'\n');
                        if let Some(a) = ack {
                            acks.push((a, self.seq));
                        }
                    }
                    Message::Flush(done) => flushes.push(done),
                }
                next = rx.try_recv().ok();
            }
            let mut result = match &self.broken {
                Some(why) => Err(format!(
                    "the log stopped after an earlier failed write: {why}"
                )),
                None => self.file.write_all(&buf).map_err(|e| e.to_string()),
            };
            buf.clear();
            let must_sync = self.durability == Durability::Durable || !flushes.is_empty();
            if result.is_ok() && must_sync {
                result = self.file.sync_data().map_err(|e| e.to_string());
            }
            if let Err(e) = &result {
                tracing::error!(error = %e, "the provenance log could not be written");
                self.broken.get_or_insert_with(|| e.clone());
            }
            for (a, seq) in acks {
                let _ = a.send(result.clone().map(|_| seq));
            }
            for f in flushes {
                let _ = f.send(result.clone());
            }
        }
        let _ = self.file.sync_data();
    }
}
