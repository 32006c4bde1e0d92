//! Who an error is for, and the vocabulary of errors shared by every stage.
//!
//! - [`Error`] is for the *embedder*: a file that cannot be read, a manifest that cannot be
//!   registered, a batch that cannot run. It is returned from the library's functions.
//! - A call that fails is not an [`Error`]: it is a result with a status and a
//!   [`CallError`](crate::model::CallError), for the *model* to read. Its code is an
//!   [`ErrorCode`] when the kernel or a built-in transport sets it, or a handler's own text.
//! - A [`Diagnostic`] is for the *person who wrote a document* (a manifest, a batch): the JSON
//!   pointer of what is wrong and a sentence saying why.

use std::path::PathBuf;

use serde::Serialize;

/// One finding: where (a JSON pointer into the manifest) and what (a sentence).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// JSON pointer (RFC 6901) of the value the finding is about; `""` is the whole manifest.
    pub pointer: String,
    /// What is wrong, for a person.
    pub message: String,
}

impl Diagnostic {
    /// Builds a diagnostic.
    pub fn new(pointer: impl Into<String>, message: impl Into<String>) -> Self {
        Diagnostic {
            pointer: pointer.into(),
            message: message.into(),
        }
    }
}

/// Escapes a key for use in a JSON pointer (RFC 6901).
pub fn escape_pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

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
    /// A Kindgi pack's index cannot be read as one (its envelope, not a tool entry: those are
    /// judged as manifests).
    #[error("the pack index `{path}` is invalid at `{pointer}`: {why}")]
    InvalidPackIndex {
        /// The index file.
        path: PathBuf,
        /// JSON pointer of the fault.
        pointer: String,
        /// What is wrong.
        why: String,
    },
    /// A pack service does not serve what its index declares (`GET /v1/info` disagrees on the
    /// pack, a tool or a version), or refuses Sluice's token: none of its tools can be trusted to
    /// run as declared.
    #[error("the pack `{pack}` at {url}: {why}")]
    PackMismatch {
        /// The pack's id.
        pack: String,
        /// The service's URL.
        url: String,
        /// What differs.
        why: String,
    },
    /// A pack service cannot be reached now (its calls fail `pack-unavailable` until it is back).
    #[error("the pack `{pack}` at {url} cannot be reached: {why}")]
    PackUnavailable {
        /// The pack's id.
        pack: String,
        /// The service's URL.
        url: String,
        /// What failed.
        why: String,
    },
    /// A pack cannot be set up: its URL does not parse or is refused, or its token is missing.
    #[error("the pack `{pack}`: {why}")]
    PackConfig {
        /// The pack's id (or its index path).
        pack: String,
        /// What is wrong.
        why: String,
    },
    /// Two manifests declare the same tool id and version.
    #[error("the tool `{id}` version {version} is defined twice: at {first} and at {second}")]
    DuplicateTool {
        /// The id.
        id: String,
        /// The version both declare.
        version: String,
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
    /// `--mcp-endpoint` (or [`crate::transport::ToolRegistry::bind_mcp_endpoint`]) cannot bind
    /// an endpoint to the tool it names.
    #[error("cannot bind an MCP endpoint to `{tool}`: {why}")]
    McpBinding {
        /// The tool as the binding names it (`id` or `id@version`).
        tool: String,
        /// Why not.
        why: String,
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
    /// An effects overlay (`--effects FILE`) cannot be read or applied.
    #[error("the effects overlay `{origin}` is not usable: {reason}")]
    EffectsOverlay {
        /// Its file.
        origin: String,
        /// What is wrong, where.
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
    /// At shutdown, the provenance sink could not keep everything it was handed (or could not
    /// close): the log lacks records of calls that ran.
    #[error("the provenance log did not keep everything at shutdown: {why}")]
    ProvenanceUnkept {
        /// What the sink said.
        why: String,
    },
    /// A [`ProvenanceSink`](crate::provenance::ProvenanceSink) could not keep a group of
    /// records, or could not flush or close. It displays as the sink's reason alone: whoever
    /// reports it says what was being kept (a call's record, its intent, the log at shutdown).
    #[error("{why}")]
    ProvenanceRefused {
        /// What the sink said.
        why: String,
    },
    /// A [`ProvenanceSink`](crate::provenance::ProvenanceSink) cannot keep a tenant's records
    /// now (its log is unreachable or damaged), so none of the tenant's calls may start. It
    /// displays as the sink's reason alone.
    #[error("{why}")]
    ProvenanceUnavailable {
        /// What the sink said.
        why: String,
    },
    /// A [`SharedDomain`](crate::order::shared::SharedDomain) could not do what was asked of it: take
    /// a release, say whether an admitted call's predecessors are done, or let a call start
    /// (its lease lapsed). It displays as the domain's reason alone.
    #[error("{why}")]
    SharedDomainFailed {
        /// What the domain said.
        why: String,
    },
    /// An [`Approver`](crate::authorize::Approver) failed to answer an ask (the ask is
    /// rejected). It displays as the approver's reason alone.
    #[error("{why}")]
    ApproverFailed {
        /// What the approver said.
        why: String,
    },
    /// A [`SpecSynthesizer`](crate::transport::SpecSynthesizer) cannot make a handler from a
    /// manifest's `spec` (the manifest is then refused, its pointer `/spec`). It displays as
    /// the synthesizer's reason alone.
    #[error("{why}")]
    SpecUnusable {
        /// What the synthesizer said.
        why: String,
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

/// The codes the kernel and its transports give a failed call, as the contract spells them
/// (`Display` and [`ErrorCode::as_str`] give the text). A handler may use its own codes too: a
/// [`CallError`](crate::model::CallError)'s code is text, and [`ErrorCode::parse`] tells whether
/// it is one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// `unknown-tool`: no tool with the call's tool id.
    UnknownTool,
    /// `invalid-input`: the input fails the tool's input schema, or the model's output for the
    /// call was malformed.
    InvalidInput,
    /// `invalid-output`: the handler's output fails the tool's output schema.
    InvalidOutput,
    /// `denied`: the policy denied an access.
    Denied,
    /// `rejected`: an ask was rejected, timed out or its approver failed.
    Rejected,
    /// `skipped`: a call it depends on failed under `skip-dependents`.
    Skipped,
    /// `timeout`: the call's deadline passed.
    Timeout,
    /// `cancelled`: the batch was cancelled.
    Cancelled,
    /// `panic`: the handler panicked.
    Panic,
    /// `internal`: something of Sluice's or the embedder's own code failed on the call's way (a
    /// panicking authorizer, normalizer or approver, a defect in the conflict index).
    Internal,
    /// `missing-need`: a required need the kernel cannot supply.
    MissingNeed,
    /// `secret-unavailable`: a secret the tool needs does not resolve.
    SecretUnavailable,
    /// `no-handler`: the tool has no way to run (accepted at build anyway).
    NoHandler,
    /// `egress-denied`: an HTTP tool's request was not sent (host, scheme or address refused).
    EgressDenied,
    /// `http-status`: an HTTP tool's response status is not a success.
    HttpStatus,
    /// `http-failed`: an HTTP tool's request failed (connection, TLS, body).
    HttpFailed,
    /// `invalid-response`: an HTTP tool's response cannot be read as declared.
    InvalidResponse,
    /// `too-large`: an HTTP tool's response body is larger than its cap (`limits.memMB`, else
    /// 16 MiB).
    TooLarge,
    /// `mcp-tool-error`: the MCP tool answered with `isError`.
    McpToolError,
    /// `mcp-error`: the MCP server refused the request (a JSON-RPC error).
    McpError,
    /// `mcp-protocol`: the MCP server's answer cannot be used.
    McpProtocol,
    /// `mcp-server-exited`: the MCP server went away while the call ran.
    McpServerExited,
    /// `mcp-unavailable`: the MCP server cannot be started or reached.
    McpUnavailable,
    /// `domain-unavailable`: the shared conflict domain (PostgreSQL) cannot be reached, so the
    /// call is not admitted and does not run (fail closed).
    DomainUnavailable,
    /// `limits-exceeded`: the tool's server went past its declared limits and was stopped.
    LimitsExceeded,
    /// `io`: a built-in file tool could not read or write.
    Io,
    /// `not-a-number`: `sluice.kv.incr` found a value that is not a number.
    NotANumber,
    /// `overflow`: `sluice.kv.incr`'s sum is not a finite number (the value is left as it was).
    Overflow,
    /// `path-escapes-root`: a built-in file tool was given a path outside its root.
    PathEscapesRoot,
    /// `provenance-unavailable`: the provenance log must keep every call (durable) and cannot
    /// now (its database is unreachable, or the tenant's chain is damaged), so the call does not
    /// run.
    ProvenanceUnavailable,
    /// `pack-tool-error`: a Kindgi pack's handler failed (the pack's code, such as
    /// `handler-throw`, and its message are in the message).
    PackToolError,
    /// `pack-mismatch`: the pack service does not serve the tool or version its index declares
    /// (`tool-not-in-pack`, `tool-version-mismatch`, or `/v1/info` disagreeing with the index).
    PackMismatch,
    /// `pack-protocol`: the pack service's answer is not pack protocol v2 as Sluice reads it.
    PackProtocol,
    /// `pack-unavailable`: the pack service cannot be reached, is not ready, refused Sluice's
    /// token, or went away while the call ran.
    PackUnavailable,
}

impl ErrorCode {
    /// Every code, in declaration order.
    pub const ALL: [ErrorCode; 34] = [
        ErrorCode::UnknownTool,
        ErrorCode::InvalidInput,
        ErrorCode::InvalidOutput,
        ErrorCode::Denied,
        ErrorCode::Rejected,
        ErrorCode::Skipped,
        ErrorCode::Timeout,
        ErrorCode::Cancelled,
        ErrorCode::Panic,
        ErrorCode::Internal,
        ErrorCode::MissingNeed,
        ErrorCode::SecretUnavailable,
        ErrorCode::NoHandler,
        ErrorCode::EgressDenied,
        ErrorCode::HttpStatus,
        ErrorCode::HttpFailed,
        ErrorCode::InvalidResponse,
        ErrorCode::TooLarge,
        ErrorCode::McpToolError,
        ErrorCode::McpError,
        ErrorCode::McpProtocol,
        ErrorCode::McpServerExited,
        ErrorCode::McpUnavailable,
        ErrorCode::DomainUnavailable,
        ErrorCode::LimitsExceeded,
        ErrorCode::Io,
        ErrorCode::NotANumber,
        ErrorCode::Overflow,
        ErrorCode::PathEscapesRoot,
        ErrorCode::ProvenanceUnavailable,
        ErrorCode::PackToolError,
        ErrorCode::PackMismatch,
        ErrorCode::PackProtocol,
        ErrorCode::PackUnavailable,
    ];

    /// The code as results and the provenance log spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::UnknownTool => "unknown-tool",
            ErrorCode::InvalidInput => "invalid-input",
            ErrorCode::InvalidOutput => "invalid-output",
            ErrorCode::Denied => "denied",
            ErrorCode::Rejected => "rejected",
            ErrorCode::Skipped => "skipped",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Cancelled => "cancelled",
            ErrorCode::Panic => "panic",
            ErrorCode::Internal => "internal",
            ErrorCode::MissingNeed => "missing-need",
            ErrorCode::SecretUnavailable => "secret-unavailable",
            ErrorCode::NoHandler => "no-handler",
            ErrorCode::EgressDenied => "egress-denied",
            ErrorCode::HttpStatus => "http-status",
            ErrorCode::HttpFailed => "http-failed",
            ErrorCode::InvalidResponse => "invalid-response",
            ErrorCode::TooLarge => "too-large",
            ErrorCode::McpToolError => "mcp-tool-error",
            ErrorCode::McpError => "mcp-error",
            ErrorCode::McpProtocol => "mcp-protocol",
            ErrorCode::McpServerExited => "mcp-server-exited",
            ErrorCode::McpUnavailable => "mcp-unavailable",
            ErrorCode::DomainUnavailable => "domain-unavailable",
            ErrorCode::LimitsExceeded => "limits-exceeded",
            ErrorCode::Io => "io",
            ErrorCode::NotANumber => "not-a-number",
            ErrorCode::Overflow => "overflow",
            ErrorCode::PathEscapesRoot => "path-escapes-root",
            ErrorCode::ProvenanceUnavailable => "provenance-unavailable",
            ErrorCode::PackToolError => "pack-tool-error",
            ErrorCode::PackMismatch => "pack-mismatch",
            ErrorCode::PackProtocol => "pack-protocol",
            ErrorCode::PackUnavailable => "pack-unavailable",
        }
    }

    /// The code with this text, if it is one of the kernel's.
    pub fn parse(text: &str) -> Option<Self> {
        ErrorCode::ALL.into_iter().find(|c| c.as_str() == text)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<ErrorCode> for String {
    fn from(code: ErrorCode) -> Self {
        code.as_str().to_owned()
    }
}

impl PartialEq<ErrorCode> for String {
    fn eq(&self, code: &ErrorCode) -> bool {
        self == code.as_str()
    }
}

impl PartialEq<ErrorCode> for str {
    fn eq(&self, code: &ErrorCode) -> bool {
        self == code.as_str()
    }
}

/// The text of a caught panic's payload (`"a panic"` when it is neither `&str` nor `String`).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// The kernel's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_own_text_and_reads_back() {
        let mut texts: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        for c in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(c.as_str()), Some(c));
            assert_eq!(c.to_string(), c.as_str());
            assert_eq!(String::from(c), c.as_str());
        }
        texts.sort_unstable();
        texts.dedup();
        assert_eq!(texts.len(), ErrorCode::ALL.len());
        assert_eq!(ErrorCode::parse("a-handler-s-own-code"), None);
        let from_a_handler = String::from("panic");
        assert!(*"timeout" == ErrorCode::Timeout && from_a_handler == ErrorCode::Panic);
    }
}
