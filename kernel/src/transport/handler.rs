//! The contracts a tool's implementation meets: the [`Handler`] that carries out a call, what it
//! returns ([`ToolError`] when it fails), and the [`SpecSynthesizer`] that makes a handler from a
//! declarative `spec`.
//!
//! Takes in: an async function of `(ToolContext, input JSON)`. Hands on: output JSON, or a
//! [`ToolError`] that becomes the call's `error` result for the model to read.

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

use super::context::ToolContext;
use crate::model::Manifest;

/// What a handler returns when it fails: a short machine code and a message for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    /// A short code such as `not-found`.
    pub code: String,
    /// What happened, plainly.
    pub message: String,
}

impl ToolError {
    /// Builds a tool error.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        ToolError {
            code: code.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ToolError {}

/// The future a handler returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send + 'static>>;

/// A native tool's implementation: an async function of the call's context and input.
///
/// Implemented for every `Fn(ToolContext, Value) -> impl Future<Output = Result<Value,
/// ToolError>>`, so a closure or an `async fn` is a handler:
///
/// ```
/// use sluice_kernel::transport::{handler, ToolContext, ToolError};
/// use serde_json::{json, Value};
/// let h = handler(|_ctx: ToolContext, input: Value| async move {
///     Ok::<_, ToolError>(json!({"echo": input}))
/// });
/// # let _ = h;
/// ```
pub trait Handler: Send + Sync + 'static {
    /// Carries out one call.
    fn call(&self, ctx: ToolContext, input: Value) -> HandlerFuture;
}

impl<F, Fut> Handler for F
where
    F: Fn(ToolContext, Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    fn call(&self, ctx: ToolContext, input: Value) -> HandlerFuture {
        Box::pin(self(ctx, input))
    }
}

/// Wraps a handler function as a shareable [`Handler`].
pub fn handler<H: Handler>(h: H) -> std::sync::Arc<dyn Handler> {
    std::sync::Arc::new(h)
}

/// Makes a handler from a manifest's declarative `spec` (the `http` synthesizer for
/// `spec: {kind: "http"}`; an embedder may register its own kinds).
pub trait SpecSynthesizer: Send + Sync + 'static {
    /// The handler for this manifest (whose `spec` is of this synthesizer's kind), or
    /// [`Error::SpecUnusable`](crate::Error::SpecUnusable) saying why not.
    fn synthesize(
        &self,
        manifest: &std::sync::Arc<Manifest>,
    ) -> Result<std::sync::Arc<dyn Handler>, crate::Error>;
}
