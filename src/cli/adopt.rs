//! Effects for MCP servers' tools: overlay files (`--effects FILE`) and servers adopted at start
//! (`--mcp-server NAME=URI`), shared by `mcp import`, `validate`, `run` and `serve`
//! (docs/mcp-effects.md).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use sluice::kernel::model::{validate, ManifestSource, McpEndpoint, RawManifest, ValidateOptions};
use sluice::kernel::transport::mcp::{import_manifests, EffectsFile, ImportOptions, McpOptions};
use sluice::kernel::transport::ToolRegistry;

use super::failure::Failure;

/// `--effects FILE`: overlays giving imported tools their effects.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct EffectsArgs {
    /// An effects overlay: a JSON or TOML file (`.toml`) giving tools of an MCP server their
    /// effects by server and tool name, over the catalog's (repeatable; a later file wins for
    /// a tool both name). See docs/mcp-effects.md.
    #[arg(long = "effects", value_name = "FILE")]
    pub(crate) effects: Vec<PathBuf>,
}

impl EffectsArgs {
    /// Reads every overlay; exit 2 for a file that cannot be read, 1 for one that is not an
    /// overlay (saying where and why).
    pub(crate) fn load(&self) -> anyhow::Result<Vec<EffectsFile>> {
        self.effects.iter().map(|p| read_overlay(p)).collect()
    }
}

/// Reads one overlay: TOML for a `.toml` file, else JSON.
pub(crate) fn read_overlay(path: &Path) -> anyhow::Result<EffectsFile> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| Failure {
        code: 2,
        message: format!("cannot read the effects overlay `{origin}`: {e}"),
    })?;
    let bad = |why: String| -> anyhow::Error {
        sluice::kernel::Error::EffectsOverlay {
            origin: origin.clone(),
            reason: why,
        }
        .into()
    };
    let value: Value = if path.extension().is_some_and(|e| e == "toml") {
        toml::from_str(&text).map_err(|e| bad(format!("not TOML: {e}")))?
    } else {
        serde_json::from_str(&text).map_err(|e| {
            bad(format!(
                "not JSON (line {}, column {}): {e}",
                e.line(),
                e.column()
            ))
        })?
    };
    EffectsFile::from_value(value, &origin).map_err(bad)
}

/// `--mcp-server NAME=URI`: MCP servers whose tools a command adopts at start.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct McpServerArgs {
    /// An MCP server whose tools are adopted at start, as `NAME.<tool>`, with effects from the
    /// overlays, the catalog of well-known servers, or its hints: `NAME=URI`, URI
    /// `mcp+stdio://<command line>`, `mcp+http://…` or `mcp+sse://…` (repeatable).
    #[arg(long = "mcp-server", value_name = "NAME=URI")]
    pub(crate) mcp_server: Vec<String>,
    /// Use the effects this adopted server publishes in `tools/list` (`_meta`
    /// `io.sluice/effects`: another Sluice's), by its NAME (repeatable). Untrusted, they are
    /// ignored.
    #[arg(long = "trust-effects", value_name = "NAME")]
    pub(crate) trust_effects: Vec<String>,
    #[command(flatten)]
    pub(crate) overlays: EffectsArgs,
}

/// One `--mcp-server`, parsed.
struct ServerSpec {
    name: String,
    endpoint: McpEndpoint,
}

/// Checks a tool id prefix: non-empty, without `.`, `:`, `*`, `?`, braces or `\`.
pub(crate) fn check_prefix(flag: &str, p: &str) -> anyhow::Result<()> {
    if p.is_empty() || p.contains(['*', '?', '{', '}', '\\', ':', '.', '=']) {
        return Err(Failure {
            code: 2,
            message: format!(
                "{flag} `{p}` must be non-empty, without `.`, `:`, `=`, `*`, `?`, braces or `\\`"
            ),
        }
        .into());
    }
    Ok(())
}

/// Parses an endpoint a flag names; exit 2 when it is not usable.
pub(crate) fn endpoint_of(flag: &str, uri: &str) -> anyhow::Result<McpEndpoint> {
    let usage = |why: String| -> anyhow::Error {
        Failure {
            code: 2,
            message: format!("{flag}: the endpoint `{uri}` is not usable: {why}"),
        }
        .into()
    };
    let endpoint = McpEndpoint::parse(uri).map_err(|e| usage(e.to_string()))?;
    if let Some(Err(e)) = endpoint.argv() {
        return Err(usage(e.to_string()));
    }
    Ok(endpoint)
}

impl McpServerArgs {
    fn specs(&self) -> anyhow::Result<Vec<ServerSpec>> {
        let mut out: Vec<ServerSpec> = Vec::new();
        for text in &self.mcp_server {
            let Some((name, uri)) = text.split_once('=') else {
                return Err(Failure {
                    code: 2,
                    message: format!(
                        "`--mcp-server {text}`: expected NAME=URI, e.g. --mcp-server \
                         fs=\"mcp+stdio://npx -y @modelcontextprotocol/server-filesystem .\""
                    ),
                }
                .into());
            };
            let name = name.trim();
            check_prefix("--mcp-server's NAME", name)?;
            if out.iter().any(|s| s.name == name) {
                return Err(Failure {
                    code: 2,
                    message: format!("--mcp-server: the name `{name}` is given twice"),
                }
                .into());
            }
            out.push(ServerSpec {
                name: name.to_owned(),
                endpoint: endpoint_of("--mcp-server", uri.trim())?,
            });
        }
        if let Some(t) = self
            .trust_effects
            .iter()
            .find(|t| !out.iter().any(|s| s.name == **t))
        {
            return Err(Failure {
                code: 2,
                message: format!("--trust-effects `{t}` names no --mcp-server"),
            }
            .into());
        }
        Ok(out)
    }

    /// Lists each server's tools and registers them (`NAME.<tool>`, carried out by the server),
    /// each warning of the import told on standard error. Exit 1 when a server cannot be
    /// reached, an overlay names a tool its server lacks, or a tool would not make a valid
    /// manifest.
    pub(crate) fn adopt(&self, registry: &mut ToolRegistry) -> anyhow::Result<()> {
        let specs = self.specs()?;
        let overlays = self.overlays.load()?;
        if specs.is_empty() {
            if let Some(o) = overlays.first() {
                return Err(Failure {
                    code: 2,
                    message: format!(
                        "--effects `{}` applies to servers' tools as they are adopted: name \
                         the server with --mcp-server NAME=URI",
                        o.origin
                    ),
                }
                .into());
            }
            return Ok(());
        }
        let runtime = tokio::runtime::Runtime::new()?;
        let mut servers = Vec::new();
        for spec in specs {
            let mut options = ImportOptions::default()
                .with_prefix(&spec.name)
                .with_mcp(McpOptions::default().with_connect_timeout(Duration::from_secs(60)))
                .trusting_published(self.trust_effects.contains(&spec.name));
            options.overlays = overlays.clone();
            let imported = runtime.block_on(import_manifests(&spec.endpoint, &options))?;
            for w in &imported.warnings {
                eprintln!("warning: --mcp-server {}: {w}", spec.name);
            }
            servers.push(imported.server.0.clone());
            check_manifests(&imported.manifests)?;
            for (i, m) in imported.manifests.into_iter().enumerate() {
                registry.insert_raw(RawManifest {
                    source: ManifestSource {
                        path: PathBuf::from(format!("--mcp-server {}", spec.name)),
                        pointer: format!("/tools/{i}"),
                    },
                    value: m,
                })?;
            }
        }
        overlays_match(&overlays, &servers)
    }
}

/// Exit 1 when an overlay names a server none of `servers` (the `serverInfo.name`s of the servers
/// adopted or imported) is: a misspelt server would otherwise leave every tool it names without
/// the effects the overlay gives them, silently.
pub(crate) fn overlays_match(overlays: &[EffectsFile], servers: &[String]) -> anyhow::Result<()> {
    for o in overlays {
        if let Some(s) = o.servers.iter().find(|s| !servers.contains(&s.server)) {
            return Err(sluice::kernel::Error::EffectsOverlay {
                origin: o.origin.clone(),
                reason: format!(
                    "it names the server `{}`, which is none of the servers here ({}): an \
                     overlay matches a server by the `serverInfo.name` it announces",
                    s.server,
                    servers
                        .iter()
                        .map(|n| format!("`{n}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
            .into());
        }
    }
    Ok(())
}

/// Exit 1 naming each tool whose manifest would not validate.
pub(crate) fn check_manifests(manifests: &[Value]) -> anyhow::Result<()> {
    let mut invalid_tools = Vec::new();
    for m in manifests {
        let report = validate(m, ValidateOptions::default());
        if !report.is_valid() {
            let errors: Vec<String> = report
                .errors
                .iter()
                .map(|d| format!("`{}`: {}", d.pointer, d.message))
                .collect();
            let id = m.get("id").cloned().unwrap_or(Value::Null);
            invalid_tools.push(format!("`{id}`: {}", errors.join("; ")));
        }
    }
    if invalid_tools.is_empty() {
        return Ok(());
    }
    Err(super::failure::invalid(format!(
        "the server's tools would not make valid manifests: {}",
        invalid_tools.join(" | ")
    )))
}

/// The overlays' problems against the imported manifests among those validated: a tool an
/// overlay names that the manifests of its server (by `metadata.mcpServer.name`) do not have.
/// An overlay whose server has no manifest here is checked for its own shape only.
pub(crate) fn overlay_problems(
    overlay: &EffectsFile,
    manifests: &[&Value],
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (i, server) in overlay.servers.iter().enumerate() {
        let tools: Vec<&str> = manifests
            .iter()
            .filter(|m| m.pointer("/metadata/mcpServer/name") == Some(&json!(server.server)))
            .filter_map(|m| m.pointer("/metadata/mcpTool").and_then(Value::as_str))
            .collect();
        if tools.is_empty() {
            continue;
        }
        let at = match overlay.servers.len() {
            1 => String::new(),
            _ => format!("/servers/{i}"),
        };
        for t in server.tools.keys().filter(|t| !tools.contains(&t.as_str())) {
            out.push((
                format!("{at}/tools/{t}"),
                format!(
                    "the server `{}` has no tool `{t}` (its tools here: {})",
                    server.server,
                    tools.join(", ")
                ),
            ));
        }
    }
    out
}
