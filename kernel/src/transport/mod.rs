//! Stage 5, **transport**: how a tool is carried out.
//!
//! Takes in: a tool's manifest. Hands on: its [`Handler`], the async function that carries out
//! a call given a [`ToolContext`] and the input. The kernel picks a tool's handler once, when it
//! is built (`resolve.rs`): with `transport: auto` (the default), a native handler registered in
//! code; else the handler a [`SpecSynthesizer`] makes from the manifest's `spec` (the `http`
//! synthesizer for `spec: {kind: "http"}`); else the MCP endpoint (`mcp`, feature `mcp`).
//! `transport: native` takes the first, else the `spec`'s; `transport: mcp` only the endpoint (the
//! manifest's, or one bound with [`ToolRegistry::bind_mcp_endpoint`]). A tool with none
//! of them is refused at build unless the embedder accepts unrunnable tools.
//!
//! The [`ToolRegistry`] binds each manifest to its handler, with its input and output schemas
//! compiled once and its [`AccessPlan`](crate::access::AccessPlan).
//!
//! A handler reaches the world through its [`ToolContext`]: the typed dependency injection of the
//! manifest's `needs` and `needsSpec` (secrets through a [`SecretResolver`], environment values,
//! capabilities, bindings, named need slots). Every *required* need is checked before the handler
//! runs; under `sandbox: context-isolated` or `strict` a handler reaches only what its manifest
//! declared ([`ContextError::Undeclared`]).
//!
//! ```
//! use sluice_kernel::transport::{handler, Tool, ToolContext, ToolError};
//! use sluice_kernel::model::{Manifest, ManifestSource};
//! use serde_json::{json, Value};
//!
//! let manifest = Manifest::from_value(json!({
//!     "id": "acme.echo", "description": "Echo", "version": "1.0.0",
//!     "input": {"type": "object"}, "output": {"type": "object"}, "mutating": false
//! })).unwrap();
//! let echo = handler(|_ctx: ToolContext, input: Value| async move {
//!     Ok::<_, ToolError>(json!({"echo": input}))
//! });
//! let tool = Tool::new(manifest, ManifestSource::built_in(), Some(echo)).unwrap();
//! assert!(tool.handler().is_some());
//! ```
//!
//! # Files
//!
//! - `handler.rs`: the contracts ([`Handler`], [`ToolError`], [`SpecSynthesizer`]);
//! - `context.rs`: the whole [`ToolContext`];
//! - `registry.rs`: [`Tool`] and [`ToolRegistry`];
//! - `synth.rs`: [`Synthesizers`]; `http.rs`: declarative HTTP tools; `mcp/`: MCP servers;
//! - `egress.rs`: where a request may go, and the one checked client every request goes through;
//! - `resolve.rs`: which transport carries out each tool.
//!
//! This stage imports [`crate::model`], [`crate::access`] and [`crate::error`].

mod context;
pub mod egress;
mod handler;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(feature = "pack")]
pub mod pack;
mod registry;
pub(crate) mod resolve;
mod synth;
mod trace;

pub(crate) use context::Provisions;
pub use context::{ContextError, EnvSecrets, SecretResolver, ToolContext};
pub use handler::{handler, Handler, HandlerFuture, SpecSynthesizer, ToolError};
pub use registry::{AccessInput, TenantScope, Tool, ToolRegistry, Version};
pub use synth::Synthesizers;
pub(crate) use trace::client_trace;
