//! The MCP transport: tools carried out by Model Context Protocol servers (cargo feature `mcp`,
//! on by default), through `rmcp`, the official Rust SDK.
//!
//! Takes in: the manifests whose transport resolves to MCP (`transport: mcp`, or `auto` with
//! neither a native handler nor a `spec`). Hands on: one [`Handler`] per tool, all the tools of an
//! endpoint sharing one [`session`] with its server.
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
//! - [`import`] turns a server's tool list into Kindgi manifests (`sluice mcp import`).

pub mod import;
pub mod memory;
pub mod session;
pub mod sse;

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::ServiceError;
use serde_json::Value;

use crate::manifest::Manifest;
use crate::tool::{Handler, HandlerFuture, ToolContext, ToolError};

pub use import::{import_manifests, ImportOptions, Imported};
pub use session::{Endpoint, EndpointStatus, McpOptions, McpSessions};

/// The name of the tool on its server: `metadata.mcpTool` when it is a string, else the part of
/// `id` after its last `.` (all of `id` when it has none).
pub fn remote_name(manifest: &Manifest) -> &str {
    if let Some(Value::String(name)) = manifest.metadata.as_ref().and_then(|m| m.get("mcpTool")) {
        return name;
    }
    let id = manifest.id.as_str();
    id.rsplit_once('.').map_or(id, |(_, tail)| tail)
}

/// Carries out one tool's calls on its endpoint's shared session.
#[derive(Debug)]
pub(crate) struct McpHandler {
    endpoint: Arc<Endpoint>,
    remote: Arc<str>,
}

impl McpHandler {
    pub(crate) fn new(endpoint: Arc<Endpoint>, remote: &str) -> Self {
        McpHandler {
            endpoint,
            remote: remote.into(),
        }
    }
}

impl Handler for McpHandler {
    fn call(&self, _ctx: ToolContext, input: Value) -> HandlerFuture {
        let endpoint = self.endpoint.clone();
        let remote = self.remote.clone();
        Box::pin(async move {
            let arguments = match input {
                Value::Object(map) => Some(map),
                Value::Null => None,
                other => {
                    return Err(ToolError::new(
                        "invalid-input",
                        format!(
                            "an MCP tool takes an object of arguments, not {}",
                            json_kind(&other)
                        ),
                    ))
                }
            };
            let session = endpoint.session().await?;
            let mut params = CallToolRequestParams::new(Cow::Owned(remote.to_string()));
            params.arguments = arguments;
            // Dropping this future (deadline, cancellation) drops the request, and rmcp sends
            // `notifications/cancelled` for it. An answer that is already here wins over a
            // death declared at the same moment.
            let result = tokio::select! {
                biased;
                r = session.peer().call_tool(params) => r,
                why = session.died() => return Err(why),
            };
            match result {
                Ok(r) => output_of(r, &remote),
                Err(e) => Err(session.failure(&remote, e)),
            }
        })
    }
}

/// The output of a tool result: `structuredContent`, else the content list; `isError` makes it
/// an error whose message is the content's text.
pub(crate) fn output_of(result: CallToolResult, remote: &str) -> Result<Value, ToolError> {
    if result.is_error == Some(true) {
        let text: Vec<&str> = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
            .collect();
        let message = if text.is_empty() {
            result
                .structured_content
                .as_ref()
                .map(Value::to_string)
                .unwrap_or_else(|| "the server gave no reason".into())
        } else {
            text.join("\n")
        };
        return Err(ToolError::new(
            "mcp-tool-error",
            format!("the MCP tool `{remote}` failed: {message}"),
        ));
    }
    if let Some(structured) = result.structured_content {
        return Ok(structured);
    }
    serde_json::to_value(&result.content).map_err(|e| {
        ToolError::new(
            "mcp-protocol",
            format!("the content of `{remote}`'s result cannot be read as JSON: {e}"),
        )
    })
}

/// Turns an rmcp error on a call into the call's error.
pub(crate) fn call_error(endpoint: &str, remote: &str, e: ServiceError) -> ToolError {
    match e {
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => ToolError::new(
            "mcp-server-exited",
            format!(
                "the MCP server `{endpoint}` went away while `{remote}` ran; the next call starts \
                 it again"
            ),
        ),
        ServiceError::McpError(data) => ToolError::new(
            "mcp-error",
            format!(
                "the MCP server `{endpoint}` refused `{remote}`: {} (code {})",
                data.message, data.code.0
            ),
        ),
        ServiceError::Timeout { timeout } => ToolError::new(
            "timeout",
            format!(
                "the MCP server `{endpoint}` did not answer `{remote}` within {} ms",
                timeout.as_millis()
            ),
        ),
        other => ToolError::new(
            "mcp-protocol",
            format!("the call of `{remote}` on the MCP server `{endpoint}` failed: {other}"),
        ),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ContentBlock as Content;
    use serde_json::json;

    fn manifest(v: Value) -> Manifest {
        Manifest::from_value(v).unwrap()
    }

    #[test]
    fn remote_name_prefers_metadata_then_the_last_segment() {
        let base = json!({"id": "pack.sub.get-sum", "description": "d", "version": "1.0.0",
                          "input": {}, "output": {}});
        assert_eq!(remote_name(&manifest(base.clone())), "get-sum");
        let mut m = base.clone();
        m["metadata"] = json!({"mcpTool": "getSum"});
        assert_eq!(remote_name(&manifest(m)), "getSum");
        let mut bare = base;
        bare["id"] = json!("echo");
        assert_eq!(remote_name(&manifest(bare)), "echo");
    }

    #[test]
    fn structured_content_wins_else_the_content_list() {
        let r = CallToolResult::structured(json!({"sum": 3}));
        assert_eq!(output_of(r, "t").unwrap(), json!({"sum": 3}));
        let r = CallToolResult::success(vec![Content::text("hi")]);
        assert_eq!(
            output_of(r, "t").unwrap(),
            json!([{"type": "text", "text": "hi"}])
        );
    }

    #[test]
    fn is_error_makes_an_error_with_the_text() {
        let r = CallToolResult::error(vec![Content::text("no such file")]);
        let e = output_of(r, "read").unwrap_err();
        assert_eq!(e.code, "mcp-tool-error");
        assert!(e.message.contains("no such file"), "{}", e.message);
    }
}
