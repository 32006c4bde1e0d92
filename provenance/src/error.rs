//! The provenance crate's errors.

use std::path::PathBuf;

/// What went wrong with a log, a key, a checkpoint or a proof.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProvenanceError {
    /// The file could not be read or written.
    #[error("cannot use `{path}`")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Another writer holds the log.
    #[error(
        "the provenance log `{path}` is already open for writing (by this or another process); \
         one writer at a time"
    )]
    Locked {
        /// The path.
        path: PathBuf,
    },
    /// A line of the log is bad.
    #[error("the provenance log `{path}` is damaged at line {line}: the line {why}")]
    Damaged {
        /// The path.
        path: PathBuf,
        /// The first bad line (1-based).
        line: usize,
        /// What is wrong with it.
        why: String,
        /// Whether it is a torn last line, which opening the log for writing repairs.
        torn_tail: bool,
    },
    /// A signer or verifier key is malformed.
    #[error("the key is malformed: {0}")]
    BadKey(String),
    /// A signed note is malformed.
    #[error("the signed note is malformed: {0}")]
    MalformedNote(String),
    /// No signature line is by the verifier's key (name and id).
    #[error("the checkpoint carries no signature by the verifier key `{0}`")]
    NoSignature(String),
    /// The verifier's signature does not verify.
    #[error(
        "the signature by `{0}` does not verify: the checkpoint was changed or signed by another key"
    )]
    BadSignature(String),
    /// The signed text is not a checkpoint.
    #[error("the signed text is not a checkpoint: {0}")]
    NotACheckpoint(String),
    /// The operating system's random generator failed.
    #[error("cannot make a key: the random generator failed: {0}")]
    Random(String),
    /// The log holds fewer records than a checkpoint covers.
    #[error(
        "`{path}` is truncated: it holds {records} records where the checkpoint covers {size}"
    )]
    Truncated {
        /// The log.
        path: PathBuf,
        /// Records in the log.
        records: u64,
        /// Records the checkpoint covers.
        size: u64,
    },
    /// The log's first records do not have the checkpoint's tree head.
    #[error(
        "`{path}` was rewritten or forked: the Merkle root of its first {size} records differs \
         from the checkpoint's"
    )]
    Forked {
        /// The log.
        path: PathBuf,
        /// Records the checkpoint covers.
        size: u64,
    },
    /// No call with that id (and batch) among the records a checkpoint covers.
    #[error("no call `{call}`{} among the first {size} records of `{path}`",
        .batch.as_ref().map(|b| format!(" of batch `{b}`")).unwrap_or_default())]
    CallNotFound {
        /// The log.
        path: PathBuf,
        /// The call id.
        call: String,
        /// The batch asked for.
        batch: Option<String>,
        /// Records the checkpoint covers.
        size: u64,
    },
    /// Several batches have a call with that id.
    #[error("several batches have a call `{call}` ({}): say which with --batch", .batches.join(", "))]
    AmbiguousCall {
        /// The call id.
        call: String,
        /// The batches.
        batches: Vec<String>,
    },
}

impl ProvenanceError {
    /// Whether the error is about reading or writing a file (exit 2 in the CLI), not its content.
    pub fn is_io(&self) -> bool {
        matches!(self, Self::Io { .. })
    }
}
