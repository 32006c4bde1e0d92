//! Import: one Kindgi manifest per tool an MCP server lists (`sluice mcp import`, and `sluice
//! serve --mcp-server`).
//!
//! A tool's effects come from an overlay, the effects a trusted server publishes, or the catalog
//! (see [`super::effects`]). Without any of them, the server's annotations are hints from a
//! party Sluice does not trust, so they never grant more than this, conservatively:
//! - `readOnlyHint: true` alone makes a tool read-only: `mutating: false` and one effect
//!   `reads <prefix>:*`;
//! - any other tool is `mutating: true` with no changing effect declared, so the kernel gives it
//!   `(writes, *)` and it runs alone, until a person declares its effects;
//! - `openWorldHint: true` adds a `network` effect on `net:*`;
//! - the raw annotations are kept in `metadata.mcpAnnotations`, the server's own tool name in
//!   `metadata.mcpTool`, the server's name and version in `metadata.mcpServer`, and where the
//!   effects came from in `metadata.sluice.effects` (`overlay:<file>`, `published`,
//!   `catalog:<file>` or `hints`).

use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::error::{Error, Result};
use crate::model::McpEndpoint;

use super::effects::{self, EffectsCatalog, EffectsFile, ServerEffects, ServerPaths, ToolEffects};
use super::session::{Endpoint, McpOptions};
use crate::access::PathRules;

/// How to name what an import writes, and where its effects come from.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ImportOptions {
    /// The id prefix (`<prefix>.<tool>`) and the resource scheme of read-only tools
    /// (`<prefix>:*`). Default: the server's name, its last `/`-separated part, lowercased, each
    /// character outside `a-z 0-9 - _` made `-`.
    pub prefix: Option<String>,
    /// How to reach the server.
    pub mcp: McpOptions,
    /// The catalog of effects (default: [`EffectsCatalog::builtin`]).
    pub catalog: EffectsCatalog,
    /// Overlays, later ones winning for a tool several name.
    pub overlays: Vec<EffectsFile>,
    /// Whether the effects the server publishes in `_meta` are used (only for a server the
    /// operator trusts: another Sluice).
    pub trust_published: bool,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            prefix: None,
            mcp: McpOptions::default(),
            catalog: EffectsCatalog::builtin(),
            overlays: Vec::new(),
            trust_published: false,
        }
    }
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

    /// These options with this catalog ([`EffectsCatalog::empty`]: none, the hints alone).
    pub fn with_catalog(mut self, catalog: EffectsCatalog) -> Self {
        self.catalog = catalog;
        self
    }

    /// These options with one more overlay.
    pub fn with_overlay(mut self, overlay: EffectsFile) -> Self {
        self.overlays.push(overlay);
        self
    }

    /// These options trusting (or not) the effects the server publishes.
    pub fn trusting_published(mut self, trust: bool) -> Self {
        self.trust_published = trust;
        self
    }
}

/// What an import found.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Imported {
    /// The prefix used.
    pub prefix: String,
    /// The server's name and version, as it announced them.
    pub server: (String, String),
    /// One manifest per tool, in the server's order.
    pub manifests: Vec<Value>,
    /// What a person should know: a catalog entry not applied (and why), a tool the catalog
    /// lacks, effects published by a server not trusted.
    pub warnings: Vec<String>,
}

/// Lists the tools of the server at `endpoint` and makes a manifest of each, with effects from
/// the overlays, the server (when trusted), the catalog, or its hints. An overlay naming a tool
/// the server does not have is an error naming it.
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
    let overlays: Vec<&ServerEffects> = options
        .overlays
        .iter()
        .flat_map(|o| &o.servers)
        .filter(|s| s.server == name)
        .collect();
    for o in &overlays {
        if let Some(t) = o
            .tools
            .keys()
            .find(|t| !tools.iter().any(|x| x.name == **t))
        {
            let mut have: Vec<&str> = tools.iter().map(|x| x.name.as_ref()).collect();
            have.sort_unstable();
            return Err(Error::EffectsOverlay {
                origin: o.origin.clone(),
                reason: format!(
                    "it names the tool `{t}`, which the server `{name}` does not have (its tools: \
                     {})",
                    have.join(", ")
                ),
            });
        }
    }
    let catalog = options.catalog.server(&name);
    let mut warnings = Vec::new();
    // How the server resolves paths: an overlay's word, else the catalog's.
    let server_paths = overlays
        .iter()
        .rev()
        .map(|o| &o.paths)
        .find(|p| **p != ServerPaths::default())
        .or(catalog.map(|c| &c.paths))
        .cloned()
        .unwrap_or_default();
    let base = path_base(&session, endpoint, &server_paths, &mut warnings).await;
    let mut published_untrusted = 0usize;
    let mut manifests = Vec::with_capacity(tools.len());
    for t in &tools {
        let mut m = manifest_of(t, endpoint, &prefix, &version);
        if let Some(Value::Object(meta)) = m.get_mut("metadata") {
            meta.insert(
                "mcpServer".into(),
                json!({"name": name, "version": version}),
            );
        }
        let rules = |fields: &[String]| {
            (!fields.is_empty()).then(|| base.for_fields(fields.iter().cloned()))
        };
        let tool_name = t.name.as_ref();
        let published = t.meta.as_ref().and_then(|m| effects::published(&m.0));
        let overlay = overlays
            .iter()
            .rev()
            .find_map(|o| o.tools.get(tool_name).map(|e| (o, e)));
        let entry = catalog.and_then(|c| c.tools.get(tool_name).map(|e| (c, e)));
        if let Some((o, e)) = overlay {
            let from = format!("overlay:{}", o.origin);
            match guard(e, t) {
                None => effects::apply(&mut m, e, rules(&e.paths).as_ref(), &from),
                Some(why) => warnings.push(format!(
                    "the overlay `{}` is not applied to the tool `{tool_name}`: its input \
                     schema is not the one it was written for ({why})",
                    o.origin
                )),
            }
        } else if let (true, Some(p)) = (options.trust_published, &published) {
            match p {
                Ok((e, r)) => effects::apply(&mut m, e, r.as_ref(), "published"),
                Err(why) => warnings.push(format!(
                    "the tool `{tool_name}` publishes effects that do not read ({why}): its \
                     hints are used instead"
                )),
            }
        } else if let Some((c, e)) = entry {
            match guard(e, t) {
                None => effects::apply(&mut m, e, rules(&e.paths).as_ref(), &c.origin),
                Some(why) => warnings.push(format!(
                    "the catalog's effects of `{tool_name}` ({name}) are not applied: its \
                     input schema is not the one they were written for ({why}); it falls back \
                     to its hints"
                )),
            }
        } else if catalog.is_some() {
            warnings.push(format!(
                "the catalog of `{name}` has no entry for its tool `{tool_name}`: it falls back \
                 to its hints"
            ));
        }
        if published.is_some() && !options.trust_published {
            published_untrusted += 1;
        }
        manifests.push(m);
    }
    if published_untrusted > 0 {
        warnings.push(format!(
            "`{name}` publishes effects for {published_untrusted} tool(s) in `_meta`; they are \
             not used, since the server is not marked trusted"
        ));
    }
    Ok(Imported {
        prefix,
        server: (name, version),
        manifests,
        warnings,
    })
}

/// Why an entry's guard refuses the tool's input schema, if it does.
fn guard(entry: &ToolEffects, tool: &rmcp::model::Tool) -> Option<String> {
    let expected = entry.input.as_ref()?;
    effects::shape_difference(expected, &effects::input_shape(&tool.input_schema))
}

/// What a server's relative paths and `~` resolve against, found once per import.
struct PathBase {
    roots: Vec<std::path::PathBuf>,
    base: Option<std::path::PathBuf>,
    home: Option<std::path::PathBuf>,
}

impl PathBase {
    fn for_fields(&self, fields: impl IntoIterator<Item = String>) -> PathRules {
        let mut r = PathRules::new(fields).with_roots(self.roots.clone());
        r.base = self.base.clone();
        r.home = self.home.clone();
        r
    }
}

/// The roots the server lists (its tool's text, one absolute path a line), or else, for a server
/// Sluice starts over stdio, Sluice's working directory (the child's).
async fn path_base(
    session: &super::session::Session,
    endpoint: &McpEndpoint,
    paths: &ServerPaths,
    warnings: &mut Vec<String>,
) -> PathBase {
    let home = paths
        .home
        .then(|| std::env::var_os("HOME").map(std::path::PathBuf::from))
        .flatten()
        .filter(|h| h.is_absolute());
    let mut out = PathBase {
        roots: Vec::new(),
        base: None,
        home,
    };
    if let Some(tool) = &paths.roots {
        let params = rmcp::model::CallToolRequestParams::new(std::borrow::Cow::Owned(tool.clone()));
        match session.peer().call_tool(params).await {
            Ok(r) if r.is_error != Some(true) => {
                out.roots = r
                    .content
                    .iter()
                    .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                    .flat_map(|t| {
                        t.lines()
                            .map(str::trim)
                            .filter(|l| l.starts_with('/'))
                            .map(std::path::PathBuf::from)
                            .collect::<Vec<_>>()
                    })
                    .collect();
            }
            Ok(_) | Err(_) => warnings.push(format!(
                "the server's directories could not be read with its tool `{tool}`: its \
                 relative paths could be any file"
            )),
        }
        return out;
    }
    if endpoint.argv().is_some() {
        out.base = std::env::current_dir().ok();
    }
    out
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
