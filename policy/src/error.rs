//! The policy crate's errors.

use std::fmt;
use std::path::PathBuf;

/// One problem in a policy document: where and what.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// JSON pointer into the document.
    pub pointer: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.pointer.is_empty() {
            "(the document)"
        } else {
            &self.pointer
        };
        write!(f, "{at}: {}", self.message)
    }
}

/// Why a policy could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The file could not be read.
    #[error("cannot read the policy `{path}`")]
    Unreadable {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not JSON (or TOML).
    #[error("the policy `{path}` cannot be parsed: {message}")]
    NotParseable {
        /// The path.
        path: PathBuf,
        /// What the parser said.
        message: String,
    },
    /// The document has problems; none of it is applied.
    #[error("the policy is invalid: {}", .problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("; "))]
    Invalid {
        /// Every problem found.
        problems: Vec<Problem>,
    },
}
