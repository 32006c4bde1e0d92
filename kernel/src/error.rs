//! The kernel's error type: failures that are the *embedder's* to handle (a file that cannot be
//! read, a manifest that cannot be registered, a batch that cannot run). A call that fails is not
//! an error here: it is a result with a status, for the model to read (see [`crate::batch`]).

use std::path::PathBuf;

use crate::validate::Diagnostic;

/// Everything that can go wrong in the kernel outside a call's own result.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file or directory could not be read.
    #[error("cannot read `{path}`")]
    Unreadable {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file is not JSON.
    #[error("`{path}` is not JSON: {message}")]
    NotJson {
        /// The path.
        path: PathBuf,
        /// Line of the syntax error (1-based).
        line: usize,
        /// Column of the syntax error (1-based).
        column: usize,
        /// What the parser said.
        message: String,
    },
    /// A manifest failed validation.
    #[error("the manifest at {source_name} is invalid: {}", render(.errors))]
    InvalidManifest {
        /// Where it came from (`file`, `file#/2`, or `built-in`).
        source_name: String,
        /// The errors, with JSON pointers relative to the manifest's source.
        errors: Vec<Diagnostic>,
    },
    /// Two manifests declare the same tool id.
    #[error("the tool id `{id}` is defined twice: at {first} and at {second}")]
    DuplicateTool {
        /// The id.
        id: String,
        /// Where it was first defined.
        first: String,
        /// Where it was defined again.
        second: String,
    },
    /// A batch document is malformed.
    #[error("the batch is malformed at `{pointer}`: {message}")]
    MalformedBatch {
        /// JSON pointer into the batch document.
        pointer: String,
        /// What is wrong.
        message: String,
    },
    /// A tool has no way to run (no native handler, spec or MCP endpoint it can use) and the
    /// kernel was not told to accept it.
    #[error("the tool `{id}` (from {source_name}) cannot run: {why}")]
    Unrunnable {
        /// The tool id.
        id: String,
        /// Where its manifest came from.
        source_name: String,
        /// Which ways to run it are missing.
        why: String,
    },
    /// `sluice mcp import` could not list a server's tools.
    #[error("cannot import the tools of `{endpoint}`: {reason}")]
    McpImport {
        /// The endpoint.
        endpoint: String,
        /// What failed.
        reason: String,
    },
    /// Batches run on tokio: the kernel was used outside a runtime.
    #[error("the kernel must be used inside a tokio runtime")]
    NoRuntime,
    /// Two tool ids map to one model-API function name.
    #[error("the tool ids `{first}` and `{second}` both map to the function name `{name}`")]
    NameCollision {
        /// The name.
        name: String,
        /// One id.
        first: String,
        /// The other.
        second: String,
    },
    /// A panic elsewhere left shared state unusable.
    #[error("{what} is unusable after a panic in another thread (a bug in sluice)")]
    Poisoned {
        /// What is unusable.
        what: &'static str,
    },
    /// A call was submitted to a batch already closed.
    #[error("call `{id}` was submitted after its batch was closed")]
    BatchClosed {
        /// The call id.
        id: String,
    },
    /// Two calls of one batch share an id.
    #[error("the call id `{id}` is used twice in the batch (at /calls/{first}/id and /calls/{second}/id)")]
    DuplicateCallId {
        /// The id.
        id: String,
        /// Position of the first call.
        first: usize,
        /// Position of the second.
        second: usize,
    },
}

fn render(errors: &[Diagnostic]) -> String {
    errors
        .iter()
        .map(|d| format!("`{}`: {}", d.pointer, d.message))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The kernel's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
