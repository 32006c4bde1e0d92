//! Kindgi packs (cargo feature `pack`): tools carried out by a pack service over pack protocol
//! v2, the HTTP protocol Kindgi's runtime speaks to the process that holds a pack's handlers.
//!
//! Takes in: a pack's index ([`PackIndex`](crate::model::PackIndex): its identity and a manifest
//! per tool, as the author declared them), the service's URL and its token. Hands on: each tool
//! of the index registered with its manifest and a handler that sends its calls to the service
//! ([`PackService::register`]), so the kernel orders, authorizes and records them by their
//! declared effects like any tool's. A tool whose entry holds a declarative `spec` (Kindgi's
//! `http_tool`) is the runtime's to carry out, so it keeps its `spec` and the HTTP transport runs
//! it.
//!
//! - **Start.** [`PackService::check`] reads `GET /v1/info` and compares it with the index: the
//!   pack id, its version and artifact version, and every tool's id and version must agree, or
//!   it is [`Error::PackMismatch`](crate::Error::PackMismatch) naming each difference. A handler checks the same way before
//!   its first call, and again after the service was unreachable (it may have come back with
//!   another pack).
//! - **A call** is one `POST /v1/invoke`: `{"v": 2, "kind": "invoke", "tool": {"id", "version"},
//!   "input", "ctx": {"tenantId", "runId", "requestId", "idempotencyKey", "env"?, "secrets"?}}`,
//!   `ctx.runId` the batch, `ctx.requestId` the call, `ctx.idempotencyKey` the call's key
//!   ([`ToolContext::idempotency_key`](crate::transport::ToolContext::idempotency_key)), `env` and
//!   `secrets` the values the tool declares in `needsSpec`. Headers: `kindgi-pack-token`,
//!   `kindgi-timeout-ms` (the time left before the call's deadline, when it has one),
//!   `kindgi-run-id`, `kindgi-request-id`, `traceparent`. Dropping the call (its deadline, its
//!   batch cancelled) closes the request: the service fires the handler's cancellation.
//! - **Outcomes** (`service.rs`): a result is the output (checked against the output schema as any
//!   tool's); a pack error keeps its code and message in the call's error message, its code
//!   mapped to Sluice's (`input-validation-failed` → `invalid-input`, `deadline-exceeded` →
//!   `timeout`, `tool-not-in-pack` → `pack-mismatch`, `handler-throw` → `pack-tool-error`, …);
//!   `503 {"error": "overloaded"}` is retried with backoff while the call's deadline (else
//!   [`PackOptions::retry_budget`]) allows; a service that cannot be reached fails the call
//!   `pack-unavailable` naming the pack and its URL, and the next call tries again.
//! - **The token** is sent in one header and nowhere else: it is not in any `Debug` output, and
//!   a message the service sends back has it replaced by `[redacted]`.
//!
//! # Files
//!
//! - `wire.rs`: what travels (the invoke's `ctx`, the pack's codes read as Sluice's);
//! - `service.rs`: [`PackService`] (the `/v1/info` check, a call's invoke and its retries);
//! - `call.rs`: a pack tool's handler, and [`PackService::register`].

mod call;
mod service;
mod wire;

pub use service::{PackOptions, PackService, PackToken, TOKEN_ENV};
pub use wire::PROTOCOL;
