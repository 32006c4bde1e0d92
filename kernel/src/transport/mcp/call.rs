//! A tool carried out on its endpoint's shared session.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::CallToolRequestParams;
use serde_json::Value;

use super::session::{Endpoint, McpSessions};
use super::wire::{json_kind, output_of};
use crate::error::ErrorCode;
use crate::model::Manifest;
use crate::transport::context::ToolContext;
use crate::transport::handler::{Handler, HandlerFuture, ToolError};

/// The name of the tool on its server: `metadata.mcpTool` when it is a string, else the part of
/// `id` after its last `.` (all of `id` when it has none).
pub fn remote_name(manifest: &Manifest) -> &str {
    if let Some(Value::String(name)) = manifest.metadata.as_ref().and_then(|m| m.get("mcpTool")) {
        return name;
    }
    let id = manifest.id.as_str();
    id.rsplit_once('.').map_or(id, |(_, tail)| tail)
}

/// The handler for a tool on one of `sessions`' endpoints; `None` when it names none of them.
pub(crate) fn handler(sessions: &McpSessions, manifest: &Manifest) -> Option<Arc<dyn Handler>> {
    let endpoint = sessions.endpoint(manifest)?;
    Some(Arc::new(McpHandler::new(endpoint, remote_name(manifest))))
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

/// The `_meta` key of a call's idempotency key on an MCP `tools/call`.
const IDEMPOTENCY_META: &str = "sluice/idempotency-key";

impl Handler for McpHandler {
    fn call(&self, ctx: ToolContext, input: Value) -> HandlerFuture {
        let endpoint = self.endpoint.clone();
        let remote = self.remote.clone();
        let key = ctx.idempotency_key();
        Box::pin(async move {
            let arguments = match input {
                Value::Object(map) => Some(map),
                Value::Null => None,
                other => {
                    return Err(ToolError::new(
                        ErrorCode::InvalidInput,
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
            // The call's idempotency key, for a server that deduplicates retried effects.
            let mut meta = rmcp::model::RequestMetaObject::new();
            meta.0
                 .0
                .insert(IDEMPOTENCY_META.into(), Value::String(key));
            params.meta = Some(meta);
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

#[cfg(test)]
mod tests {
    use super::*;
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
}
