//! The gateway of `sluice serve`. One kernel — its tools, each tenant's conflict domain, the
//! policy and the provenance log — behind an MCP server (streamable HTTP at `/mcp`, or stdio) and
//! a small HTTP batch API (`/v1/run`, `/v1/plan`, `/v1/tools`), with `/healthz` and `/metrics`.
//!
//! Every MCP `tools/call` is one call, submitted into its tenant's conflict domain when it
//! arrives: conflicting calls, from any session of the tenant and from the batch API, run one
//! after another in arrival order; the rest run at once. Tenants come from bearer tokens (their
//! sha256 in a token file), or are the one default tenant on a loopback address.
//!
//! ```no_run
//! use std::sync::Arc;
//! use sluice_kernel::{builtin, Kernel};
//! use sluice_serve::{Gateway, GatewayOptions};
//!
//! # async fn run() -> std::io::Result<()> {
//! let kernel = Kernel::builder()
//!     .tools(builtin::registry(builtin::BuiltinConfig::default()).unwrap())
//!     .build()
//!     .unwrap();
//! let gateway = Arc::new(Gateway::new(kernel, GatewayOptions::default()).unwrap());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! sluice_serve::serve_http(gateway, listener, std::future::pending()).await
//! # }
//! ```

//! # The crate's layout
//!
//! Each module imports only those listed before it: `error`; `conn` (what a connection may
//! hold); `metrics` and `trace` (what the gateway reports); `watch` (the batch observer behind
//! progress and spans); `elicit` (asks through MCP elicitation); `requests` (a request's origin
//! and its id in flight); `options`; `gateway` (the state every connection shares); `mcp` (rmcp's
//! server side); `http` (the hyper router and the batch API). What it shows of the kernel is
//! the kernel's own: its MCP rendering and annotations ([`sluice_kernel::adapters::mcp`]), its
//! JSON reports ([`sluice_kernel::adapters::report`]), the tools a tenant is offered
//! ([`sluice_kernel::Kernel::hides`]).
//!
//! # Features
//!
//! - `metrics` (default): `GET /metrics` in the Prometheus text format.
//! - `otel`: a span per call over OTLP/HTTP ([`Telemetry`]).

mod conn;
mod elicit;
mod error;
mod gateway;
mod http;
mod mcp;
#[cfg(feature = "metrics")]
mod metrics;
#[cfg(not(feature = "metrics"))]
#[path = "metrics_off.rs"]
mod metrics;
mod options;
mod requests;
mod sessions;
#[cfg(feature = "otel")]
mod trace;
#[cfg(not(feature = "otel"))]
#[path = "trace_off.rs"]
mod trace;
mod watch;

pub use conn::{descriptor_limit, ConnectionLimits};
pub use error::ServeError;
pub use gateway::{Caller, Gateway, Principal};
pub use http::{error_body, serve_http};
pub use mcp::{serve_stdio, McpSession};
pub use metrics::Metrics;
pub use options::{read_tokens, token_hash, GatewayOptions, HealthCheck, HealthProbe, TokenFile};
pub use trace::Telemetry;
pub use watch::Progress;
