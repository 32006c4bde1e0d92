//! Import: one Kindgi manifest per tool an MCP server lists (`sluice mcp import`).
//!
//! The server's annotations are hints from a party Sluice does not trust, so they never grant
//! more than this, conservatively:
//! - `readOnlyHint: true` alone makes a tool read-only: `mutating: false` and one effect
//!   `reads <prefix>:*`;
//! - any other tool is `mutating: true` with no changing effect declared, so the kernel gives it
//!   `(writes, *)` and it runs alone, until a person declares its effects;
//! - `openWorldHint: true` adds a `network` effect on `net:*`;
//! - the raw annotations are kept in `metadata.mcpAnnotations`, the server's own tool name in
//!   `metadata.mcpTool`.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::error::{Error, Result};
use crate::model::McpEndpoint;

use super::session::{Endpoint, McpOptions};

/// How to name what an import writes.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ImportOptions {
    /// The id prefix (`<prefix>.<tool>`) and the resource scheme of read-only tools
    /// (`<prefix>:*`). Default: the server's name, its last `/`-separated part, lowercased, each
    /// character outside `a-z 0-9 - _` made `-`.
    pub prefix: Option<String>,
    /// How to reach the server.
    pub mcp: McpOptions,
}

impl ImportOptions {
    /// These options with this prefix.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// These options with these MCP options.
    pub fn with_mcp(mut self, mcp: McpOptions) -> Self {
        self.mcp = mcp;
        self
    }
}

/// What an import found.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The prefix used.
    pub prefix: String,
    /// The server's name and version, as it announced them.
    pub server: (String, String),
    /// One manifest per tool, in the server's order.
    pub manifests: Vec<Value>,
}

/// Lists the tools of the server at `endpoint` and makes a manifest of each.
pub async fn import_manifests(endpoint: &McpEndpoint, options: &ImportOptions) -> Result<Imported> {
    let failed = |why: String| Error::McpImport {
        endpoint: endpoint.as_str().to_owned(),
        reason: why,
    };
    let ep = Arc::new(Endpoint::standalone(endpoint.clone(), options.mcp.clone()));
    let session = ep.session().await.map_err(|e| failed(e.message))?;
    let tools = session
        .peer()
        .list_all_tools()
        .await
        .map_err(|e| failed(format!("tools/list failed: {e}")))?;
    let (name, version) = session
        .peer()
        .peer_info()
        .and_then(|i| i.server_info.clone())
        .map(|s| (s.name, s.version))
        .unwrap_or_default();
    let prefix = match &options.prefix {
        Some(p) => p.clone(),
        None => default_prefix(&name),
    };
    let version = if is_semver(&version) {
        version
    } else {
        "0.0.0".to_owned()
    };
    let manifests = tools
        .iter()
        .map(|t| manifest_of(t, endpoint, &prefix, &version))
        .collect();
    Ok(Imported {
        prefix,
        server: (name, version),
        manifests,
    })
}

/// The manifest of one MCP tool.
pub fn manifest_of(
    tool: &rmcp::model::Tool,
    endpoint: &McpEndpoint,
    prefix: &str,
    version: &str,
) -> Value {
    let annotations = tool.annotations.as_ref();
    let read_only = annotations.and_then(|a| a.read_only_hint) == Some(true);
    let open_world = annotations.and_then(|a| a.open_world_hint) == Some(true);
    let mut effects = Vec::new();
    if read_only {
        effects.push(json!({"kind": "reads", "resource": format!("{prefix}:*"),
                            "notes": "imported: the server hints readOnlyHint"}));
    }
    if open_world {
        effects.push(json!({"kind": "network", "resource": "net:*",
                            "notes": "imported: the server hints openWorldHint"}));
    }
    let description = tool
        .description
        .as_deref()
        .filter(|d| !d.trim().is_empty())
        .map(str::to_owned)
        .or_else(|| tool.title.clone().filter(|t| !t.trim().is_empty()))
        .unwrap_or_else(|| format!("The tool `{}` of {}", tool.name, endpoint.as_str()));
    let mut metadata = Map::new();
    metadata.insert("mcpTool".into(), json!(tool.name));
    if let Some(title) = &tool.title {
        metadata.insert("mcpTitle".into(), json!(title));
    }
    if let Some(a) = annotations {
        metadata.insert(
            "mcpAnnotations".into(),
            serde_json::to_value(a).unwrap_or(Value::Null),
        );
    }
    let mut m = json!({
        "id": format!("{prefix}.{}", tool.name),
        "description": description,
        "version": version,
        "input": Value::Object((*tool.input_schema).clone()),
        "output": tool.output_schema.as_ref().map_or_else(|| json!({}), |s| Value::Object((**s).clone())),
        "transport": "mcp",
        "mcpEndpoint": endpoint.as_str(),
        "mutating": !read_only,
        "metadata": metadata,
    });
    if let (false, Some(o)) = (effects.is_empty(), m.as_object_mut()) {
        o.insert("effects".into(), Value::Array(effects));
    }
    m
}

fn default_prefix(server_name: &str) -> String {
    let last = server_name.rsplit('/').next().unwrap_or(server_name);
    let p: String = last
        .trim()
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let p = p.trim_matches('-').to_owned();
    if p.is_empty() {
        "mcp".to_owned()
    } else {
        p
    }
}

fn is_semver(v: &str) -> bool {
    let parts: Vec<&str> = v.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{Tool, ToolAnnotations};

    fn tool(annotations: Option<ToolAnnotations>) -> Tool {
        let schema: Map<String, Value> = serde_json::from_value(
            json!({"type": "object", "properties": {"a": {"type": "number"}}}),
        )
        .unwrap();
        let mut t = Tool::new("get-sum", "Adds", Arc::new(schema));
        t.annotations = annotations;
        t
    }

    fn endpoint() -> McpEndpoint {
        McpEndpoint::parse("mcp+stdio://mcp-server-everything").unwrap()
    }

    #[test]
    fn read_only_hint_alone_makes_a_reader() {
        let mut a = ToolAnnotations::default();
        a.read_only_hint = Some(true);
        let m = manifest_of(&tool(Some(a)), &endpoint(), "ev", "1.2.3");
        assert_eq!(m["id"], "ev.get-sum");
        assert_eq!(m["mutating"], false);
        assert_eq!(m["effects"][0]["kind"], "reads");
        assert_eq!(m["effects"][0]["resource"], "ev:*");
        assert_eq!(m["metadata"]["mcpTool"], "get-sum");
        assert_eq!(m["metadata"]["mcpAnnotations"]["readOnlyHint"], true);
        assert_eq!(m["output"], json!({}));
        let report = crate::model::validate(&m, Default::default());
        assert!(report.is_valid(), "{:?}", report.errors);
    }

    #[test]
    fn other_hints_never_grant_more() {
        for hints in [
            None,
            Some(ToolAnnotations::default()),
            Some({
                let mut a = ToolAnnotations::default();
                a.read_only_hint = Some(false);
                a.destructive_hint = Some(false);
                a.idempotent_hint = Some(true);
                a
            }),
        ] {
            let m = manifest_of(&tool(hints), &endpoint(), "ev", "1.2.3");
            assert_eq!(m["mutating"], true);
            assert!(m.get("effects").is_none(), "{m}");
            let manifest = crate::model::Manifest::from_value(m).unwrap();
            let plan = crate::access::AccessPlan::compile(&manifest).unwrap();
            let accesses = plan.accesses(&json!({}), &Default::default());
            assert_eq!(accesses.len(), 1, "runs alone: one implicit write of *");
        }
    }

    #[test]
    fn open_world_adds_network() {
        let mut a = ToolAnnotations::default();
        a.read_only_hint = Some(true);
        a.open_world_hint = Some(true);
        let m = manifest_of(&tool(Some(a)), &endpoint(), "ev", "1.2.3");
        assert_eq!(m["effects"][1]["kind"], "network");
        assert_eq!(m["mutating"], false);
    }

    #[test]
    fn default_prefix_comes_from_the_server_name() {
        assert_eq!(default_prefix("mcp-servers/everything"), "everything");
        assert_eq!(default_prefix("My Server!"), "my-server");
        assert_eq!(default_prefix(""), "mcp");
        assert!(is_semver("2026.8.31"));
        assert!(!is_semver("1.0"));
    }
}
