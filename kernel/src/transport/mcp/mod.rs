//! The MCP transport: tools carried out by Model Context Protocol servers (cargo feature `mcp`,
//! on by default), through `rmcp`, the official Rust SDK.
//!
//! Takes in: the manifests whose transport resolves to MCP (`transport: mcp`, or `auto` with
//! neither a native handler nor a `spec`). Hands on: one [`Handler`](crate::transport::Handler) per tool, all the tools of an
//! endpoint sharing one session with its server.
//!
//! - Endpoints: `mcp+stdio://<command line>` (a child process, the command line split as a POSIX
//!   shell would), `mcp+http://<url>` (streamable HTTP) and `mcp+sse://<url>` (the older HTTP+SSE
//!   transport, see [`sse`]).
//! - A call: the remote tool is `metadata.mcpTool` when set, else the part of `id` after its last
//!   `.`; the input is the arguments; `structuredContent` (else the content list) is the output;
//!   `isError` makes the call an `error` with code `mcp-tool-error`. A call dropped by its deadline
//!   or by cancellation sends MCP's `notifications/cancelled` for its request.
//! - A server that dies is started again by the next call; calls in flight at its death fail with
//!   `mcp-server-exited`, or `limits-exceeded` when the kernel killed it for its memory
//!   ([`memory`]).
//! - [`import`] turns a server's tool list into Kindgi manifests (`sluice mcp import`), with
//!   effects from [`effects`]: overlays, a trusted server's own, the catalog of well-known servers.

mod call;
mod death;
pub mod effects;
pub mod import;
pub mod memory;
mod session;
pub mod sse;
mod wire;

pub(crate) use call::handler;
pub use call::remote_name;
pub use effects::{
    EffectsCatalog, EffectsFile, ServerEffects, ToolEffects, EFFECTS_META, PATHS_META,
};
pub use import::{import_manifests, ImportOptions, Imported};
pub use session::{Endpoint, EndpointStatus, McpOptions, McpSessions};
