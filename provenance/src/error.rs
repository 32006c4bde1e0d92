//! The provenance crate's errors.

use std::path::PathBuf;

/// Why a log could not be opened or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProvenanceError {
    /// The file could not be read or written.
    #[error("cannot use the provenance log `{path}`")]
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
    /// The log is damaged beyond a torn last line.
    #[error("the provenance log `{path}` is damaged at line {line}: the line {why}")]
    Damaged {
        /// The path.
        path: PathBuf,
        /// The first bad line (1-based).
        line: usize,
        /// What is wrong with it.
        why: String,
    },
}
