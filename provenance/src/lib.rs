//! Sluice's provenance log: what ran, who allowed it, what caused what — across turns — in a log a
//! third party can check.
//!
//! The kernel hands every call's records (ids, digests of input and output, accesses, decision
//! and rule, approver, times, outcome, and its conflict edges, read-after-write marked causal) and
//! every batch's record to a `ProvenanceSink`. [`ProvenanceLog`] is the embedded sink: an
//! append-only JSON Lines file in which each line carries its `seq` and the sha256 of the line
//! before it ([`chain`]), written in durable group commits, repaired on open after a crash.
//!
//! - **Lineage across batches and processes** ([`lineage`]): the log keeps who last wrote each
//!   resource, rebuilt on open in one streaming pass, and links a later batch's reads to those
//!   writers with `read-after-write` edges. [`query`] follows them (`why`, `lineage`, PROV-JSON).
//! - **Durable truth**: a call's result is reported after its records are on disk; a record the
//!   log cannot take gives `recorded: false` and leaves the file verifiable.
//! - **Checkpoints** ([`merkle`], [`note`]): the lines are the leaves of an RFC 6962 Merkle tree; a
//!   signed checkpoint (C2SP tlog-checkpoint in a C2SP signed note, Ed25519) lets anyone holding
//!   the verifier key detect truncation, rewriting and forks ([`verify_checkpoint`]), and an
//!   inclusion proof ([`prove`]) shows one call's record is in a checkpointed log.
//!
//! ```
//! use sluice_provenance::{note::SignerKey, prove, verify_checkpoint, verify_file};
//! use sluice_provenance::{checkpoint_file, Durability, ProvenanceLog};
//! use sluice_kernel::provenance::{BatchRecord, Record};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let path = std::env::temp_dir().join(format!("sluice-lib-doc-{}.jsonl", std::process::id()));
//! # let _ = std::fs::remove_file(&path);
//! let log = ProvenanceLog::open(&path, Durability::Durable).unwrap();
//! let batch = BatchRecord { batch: "b1".into(), tenant: "acme".into(), calls: vec![],
//!                           started_at_ms: 0.0, ended_at_ms: 1.0, origin: None };
//! assert_eq!(log.append(Record::Batch(batch)).await.unwrap().ok(), Some(1));
//! log.close();
//! assert_eq!(verify_file(&path).unwrap().records, 1);
//!
//! // Sign a checkpoint; anyone with the verifier key can check the log against it later.
//! let key = SignerKey::generate("example.com/log").unwrap();
//! let (_, signed) = checkpoint_file(&path, &key, None).unwrap();
//! let (_, checkpoint) = verify_checkpoint(&path, &signed, &key.verifier()).unwrap();
//! assert_eq!(checkpoint.size, 1);
//! # let _ = prove;
//! # });
//! ```

pub mod chain;
mod error;
pub mod lineage;
mod log;
pub mod merkle;
pub mod note;
pub mod query;

use std::io::BufReader;
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde_json::{json, Value};
use sluice_kernel::provenance::Record;

pub use chain::{Checker, Damage, DamageKind, Scanned};
pub use error::ProvenanceError;
pub use log::{checkpoints_path, CheckpointOptions, Durability, LogOptions, Opened, ProvenanceLog};

use chain::ScanError;
use merkle::{Frontier, Hash};
use note::{Checkpoint, SignerKey, VerifierKey};

fn damaged(path: &Path, d: Damage) -> ProvenanceError {
    ProvenanceError::Damaged {
        path: path.to_owned(),
        line: d.line,
        torn_tail: d.is_torn_tail(),
        why: d.why,
    }
}

/// Where a log's lines come from, for the questions asked of a log (verify, checkpoint, prove,
/// lineage, why, export): a file ([`FileSource`]), or — in `sluice-postgres` — one tenant's chain
/// in a database. The chain is checked as it is read.
pub trait LogSource {
    /// How messages name the log (a path, or a database and tenant).
    fn name(&self) -> PathBuf;

    /// What one entry of the log is called in messages: `line` for a file (the default), `record`
    /// for a table whose rows are the entries.
    fn unit(&self) -> &'static str {
        "line"
    }

    /// Reads the log once, in order, checking the chain, and hands each line's bytes and record
    /// to `visit`: the chain's state after the last line, or the first bad line
    /// ([`ProvenanceError::Damaged`]).
    fn scan(&self, visit: &mut dyn FnMut(&[u8], Record)) -> Result<Scanned, ProvenanceError>;
}

/// A log file as a [`LogSource`].
#[derive(Debug, Clone, Copy)]
pub struct FileSource<'a>(pub &'a Path);

impl LogSource for FileSource<'_> {
    fn name(&self) -> PathBuf {
        self.0.to_owned()
    }

    fn scan(&self, visit: &mut dyn FnMut(&[u8], Record)) -> Result<Scanned, ProvenanceError> {
        scan_file(self.0, visit)
    }
}

/// Reads the log at `path` once, streaming, checking the chain and handing each record (and its
/// line's bytes) to `visit`. A torn last line is damage too (opening the log for writing repairs
/// it).
pub fn scan_file(
    path: &Path,
    visit: impl FnMut(&[u8], Record),
) -> Result<Scanned, ProvenanceError> {
    let io = |source| ProvenanceError::Io {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    chain::scan(BufReader::with_capacity(256 * 1024, file), visit).map_err(|e| match e {
        ScanError::Io(e) => io(e),
        ScanError::Damaged { damage, .. } => damaged(path, damage),
    })
}

/// Checks the log at `path`: its record count and head, or the first bad line. Memory: one line.
pub fn verify_file(path: &Path) -> Result<Scanned, ProvenanceError> {
    scan_file(path, |_, _| {})
}

/// Every record of the log at `path`, once it checks.
pub fn read_records(path: &Path) -> Result<Vec<Record>, ProvenanceError> {
    read_source(&FileSource(path))
}

/// Every record of a log, once it checks.
pub fn read_source(source: &dyn LogSource) -> Result<Vec<Record>, ProvenanceError> {
    let mut records = Vec::new();
    source.scan(&mut |_, r| records.push(r))?;
    Ok(records)
}

/// A signed checkpoint of the log at `path` as it stands: the checkpoint and its signed note.
/// The origin defaults to the key's name.
pub fn checkpoint_file(
    path: &Path,
    key: &SignerKey,
    origin: Option<&str>,
) -> Result<(Checkpoint, String), ProvenanceError> {
    checkpoint_source(&FileSource(path), key, origin)
}

/// [`checkpoint_file`] for any log.
pub fn checkpoint_source(
    source: &dyn LogSource,
    key: &SignerKey,
    origin: Option<&str>,
) -> Result<(Checkpoint, String), ProvenanceError> {
    let mut tree = Frontier::new();
    let scanned = source.scan(&mut |line, _| tree.push_line(line))?;
    let checkpoint = Checkpoint {
        origin: origin.unwrap_or(key.name()).to_owned(),
        size: scanned.records,
        root: tree.root(),
    };
    let signed = checkpoint.sign(key);
    Ok((checkpoint, signed))
}

/// Checks the log at `path` against a signed checkpoint: the signature by `verifier`, the chain,
/// then that the log holds at least the checkpoint's records ([`ProvenanceError::Truncated`]) and
/// that the Merkle root of its first `size` records is the checkpoint's
/// ([`ProvenanceError::Forked`]).
pub fn verify_checkpoint(
    path: &Path,
    signed: &str,
    verifier: &VerifierKey,
) -> Result<(Scanned, Checkpoint), ProvenanceError> {
    verify_checkpoint_source(&FileSource(path), signed, verifier)
}

/// [`verify_checkpoint`] for any log.
pub fn verify_checkpoint_source(
    source: &dyn LogSource,
    signed: &str,
    verifier: &VerifierKey,
) -> Result<(Scanned, Checkpoint), ProvenanceError> {
    let checkpoint = Checkpoint::open(signed, verifier)?;
    let mut tree = Frontier::new();
    let mut root_at_size = (checkpoint.size == 0).then(|| tree.root());
    let scanned = source.scan(&mut |line, _| {
        if tree.size() < checkpoint.size {
            tree.push_line(line);
            if tree.size() == checkpoint.size {
                root_at_size = Some(tree.root());
            }
        }
    })?;
    match root_at_size {
        None => Err(ProvenanceError::Truncated {
            path: source.name(),
            records: scanned.records,
            size: checkpoint.size,
        }),
        Some(root) if root != checkpoint.root => Err(ProvenanceError::Forked {
            path: source.name(),
            size: checkpoint.size,
        }),
        Some(_) => Ok((scanned, checkpoint)),
    }
}

/// An RFC 6962 inclusion proof of one record in a checkpointed log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InclusionProof {
    /// The record's index among the leaves (0-based: line number minus one).
    pub leaf_index: u64,
    /// The checkpoint's size.
    pub tree_size: u64,
    /// The record's leaf hash, `SHA-256(0x00 || line)`.
    pub leaf_hash: Hash,
    /// The audit path, nearest sibling first.
    pub proof: Vec<Hash>,
    /// The checkpoint's tree head.
    pub root: Hash,
}

impl InclusionProof {
    /// The proof as cli.md's JSON: hashes in standard base64.
    pub fn to_json(&self) -> Value {
        json!({
            "leaf_index": self.leaf_index,
            "tree_size": self.tree_size,
            "leaf_hash": B64.encode(self.leaf_hash),
            "proof": self.proof.iter().map(|h| B64.encode(h)).collect::<Vec<_>>(),
            "root": B64.encode(self.root),
        })
    }

    /// Whether the proof checks (RFC 9162 section 2.1.3.2).
    pub fn verify(&self) -> bool {
        merkle::verify_inclusion(
            self.leaf_index,
            self.tree_size,
            &self.leaf_hash,
            &self.proof,
            &self.root,
        )
    }
}

/// The inclusion proof of call `call`'s record (of `batch`, when given) in the log at `path` as
/// the signed checkpoint `signed` saw it. Fails when the call is not among the checkpoint's
/// records, when several batches have such a call and none is named, or when the log's first
/// records do not have the checkpoint's tree head. The signature is not checked here
/// ([`verify_checkpoint`] does).
pub fn prove(
    path: &Path,
    call: &str,
    batch: Option<&str>,
    signed: &str,
) -> Result<InclusionProof, ProvenanceError> {
    prove_source(&FileSource(path), call, batch, signed)
}

/// [`prove`] for any log.
pub fn prove_source(
    source: &dyn LogSource,
    call: &str,
    batch: Option<&str>,
    signed: &str,
) -> Result<InclusionProof, ProvenanceError> {
    let path = source.name();
    let checkpoint = Checkpoint::parse_unverified(signed)?;
    let size = checkpoint.size;
    let mut leaves: Vec<Hash> = Vec::new();
    let mut found: Vec<(u64, String)> = Vec::new();
    let scanned = source.scan(&mut |line, record| {
        if (leaves.len() as u64) < size {
            if let Record::Call(c) = &record {
                if c.call == call && batch.is_none_or(|b| b == c.batch) {
                    found.push((leaves.len() as u64, c.batch.clone()));
                }
            }
            leaves.push(merkle::leaf_hash(line));
        }
    });
    match scanned {
        Ok(_) => {}
        // Damage past the checkpoint's records does not touch the proof.
        Err(ProvenanceError::Damaged { line, .. }) if line as u64 > size => {}
        Err(e) => return Err(e),
    }
    if (leaves.len() as u64) < size {
        return Err(ProvenanceError::Truncated {
            path,
            records: leaves.len() as u64,
            size,
        });
    }
    let root = merkle::root_of(&leaves);
    if root != checkpoint.root {
        return Err(ProvenanceError::Forked { path, size });
    }
    let (leaf_index, _) = match found.as_slice() {
        [] => {
            return Err(ProvenanceError::CallNotFound {
                path,
                call: call.to_owned(),
                batch: batch.map(str::to_owned),
                size,
            })
        }
        [one] => one.clone(),
        many => {
            return Err(ProvenanceError::AmbiguousCall {
                call: call.to_owned(),
                batches: many.iter().map(|(_, b)| b.clone()).collect(),
            })
        }
    };
    let proof = merkle::inclusion_proof(&leaves, leaf_index as usize).unwrap_or_default();
    Ok(InclusionProof {
        leaf_index,
        tree_size: size,
        leaf_hash: leaves.get(leaf_index as usize).copied().unwrap_or_default(),
        proof,
        root,
    })
}
