//! Sluice's provenance log: what ran, who allowed it, and what caused what.
//!
//! The kernel hands every call's record (ids, digests of input and output, accesses, decision and
//! rule, approver, times, outcome), every conflict edge (with its resource and kind; read-after-
//! write marked causal) and every batch to a `ProvenanceSink`. [`ProvenanceLog`] is the embedded
//! sink: an append-only JSON Lines file in which each line carries its `seq` and the sha256 of the
//! line before it, written with group commit, repaired on open after a crash, and checked by
//! [`verify_file`]. [`query`] answers lineage and why questions and exports W3C PROV-JSON.
//!
//! ```
//! use sluice_provenance::{verify_file, Durability, ProvenanceLog};
//! use sluice_kernel::provenance::{BatchRecord, Record};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let path = std::env::temp_dir().join(format!("sluice-lib-doc-{}.jsonl", std::process::id()));
//! # let _ = std::fs::remove_file(&path);
//! let log = ProvenanceLog::open(&path, Durability::Durable).unwrap();
//! let batch = BatchRecord { batch: "b1".into(), tenant: "acme".into(), calls: vec![],
//!                           started_at_ms: 0.0, ended_at_ms: 1.0 };
//! assert_eq!(log.append(Record::Batch(batch)).await.unwrap(), Ok(1));
//! log.close();
//! let v = verify_file(&path).unwrap();
//! assert_eq!(v.records.len(), 1);
//! # });
//! ```
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod chain;
mod error;
mod log;
pub mod query;

pub use chain::{Damage, DamageKind, Verified};
pub use error::ProvenanceError;
pub use log::{Durability, Opened, ProvenanceLog};

/// Reads and checks the log at `path`.
///
/// `Ok(Err(damage))` names the first bad line; a torn last line is damage too (opening the log
/// for writing repairs it).
pub fn verify_file(path: &std::path::Path) -> Result<Verified, VerifyError> {
    let bytes = std::fs::read(path).map_err(|source| VerifyError::Unreadable {
        path: path.to_owned(),
        source,
    })?;
    chain::verify(&bytes).map_err(VerifyError::Damaged)
}

/// Why a log did not verify.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The file could not be read.
    #[error("cannot read the provenance log `{path}`")]
    Unreadable {
        /// The path.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line is bad.
    #[error("line {}: the line {}", .0.line, .0.why)]
    Damaged(Damage),
}
