//! The context a handler runs in: the typed dependency injection of the manifest's `needs` and
//! `needsSpec`.
//!
//! Takes in: the call's ids, its cancellation token, and what the embedder supplies (a secret
//! resolver, environment values, granted capabilities and bindings, named need slots). Hands on: a
//! [`ToolContext`] through which a handler reaches exactly that — and, under `sandbox:
//! context-isolated` or `strict`, only what its manifest declared.

use tokio_util::sync::CancellationToken;

use crate::tool::ToolContext;

/// The shared state behind a [`ToolContext`].
#[derive(Debug)]
pub(crate) struct ContextInner {
    pub(crate) tenant: String,
    pub(crate) batch_id: String,
    pub(crate) call_id: String,
    pub(crate) tool_id: String,
    pub(crate) cancel: CancellationToken,
}

impl ToolContext {
    /// A context for calling a handler outside a kernel (tests, examples).
    pub fn detached(tenant: &str, call_id: &str, tool_id: &str) -> Self {
        ToolContext {
            inner: std::sync::Arc::new(ContextInner {
                tenant: tenant.to_owned(),
                batch_id: String::new(),
                call_id: call_id.to_owned(),
                tool_id: tool_id.to_owned(),
                cancel: CancellationToken::new(),
            }),
        }
    }

    /// The tenant the call runs for.
    pub fn tenant(&self) -> &str {
        &self.inner.tenant
    }

    /// The batch's id.
    pub fn batch_id(&self) -> &str {
        &self.inner.batch_id
    }

    /// The call's id.
    pub fn call_id(&self) -> &str {
        &self.inner.call_id
    }

    /// The tool's id.
    pub fn tool_id(&self) -> &str {
        &self.inner.tool_id
    }

    /// Cancelled when the call's batch is cancelled or its deadline passes; long handlers
    /// should watch it.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.inner.cancel
    }
}
