//! `sluice mcp import`: adopt an MCP server's tools as Kindgi manifests.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use sluice::kernel::transport::mcp::{import_manifests, EffectsCatalog, ImportOptions, McpOptions};

use super::failure::Failure;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// List an MCP server's tools and write one Kindgi manifest per tool.
    ///
    /// Each tool's effects come from, in order: an `--effects` overlay naming it; the effects
    /// the server publishes in `_meta` (`io.sluice/effects`), with `--trust-effects` only; the
    /// catalog of well-known servers (the reference filesystem, memory, git, fetch and
    /// everything servers), when the tool's input schema is still the one its entry was
    /// written for (else a warning names the tool); else the server's hints, conservatively:
    /// only `readOnlyHint: true` makes a tool read-only (`mutating: false`, `reads <prefix>:*`);
    /// any other tool declares no changing effect, so it runs alone; `openWorldHint: true` adds
    /// a `network` effect on `net:*`. Warnings go to standard error. Without `--out` the
    /// manifests are printed as one JSON array; with it each is written to `<out>/<id>.json`
    /// (an existing file is kept unless `--force`) and a summary is printed. Exit 1 when the
    /// server cannot be reached, an overlay names a tool the server does not have, or a
    /// manifest would not validate; 2 for an unusable endpoint, prefix or overlay file.
    Import(ImportArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct ImportArgs {
    /// The server: `mcp+stdio://<command line>`, `mcp+http://<host>/<path>` or
    /// `mcp+sse://<host>/<path>`.
    endpoint: String,
    /// Tool ids are `<prefix>.<tool>`; read-only tools read `<prefix>:*`. Default: the server's
    /// name.
    #[arg(long)]
    prefix: Option<String>,
    /// Write one `<id>.json` per tool into this directory (created if missing).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Overwrite manifests already in `--out` (by default they are kept: a person may have
    /// declared their effects).
    #[arg(long)]
    force: bool,
    /// Effects overlays (JSON or TOML) giving tools their effects by server and tool name
    /// (repeatable; see docs/mcp-effects.md). Kept apart from the manifests, so a re-import
    /// with `--force` applies them again.
    #[command(flatten)]
    effects: super::adopt::EffectsArgs,
    /// Use the effects the server publishes in `_meta` (another Sluice's `tools/list`):
    /// only for a server you trust.
    #[arg(long)]
    trust_effects: bool,
    /// Do not apply the catalog of well-known servers (each tool falls back to its hints).
    #[arg(long)]
    no_catalog: bool,
    /// How long starting the server and its handshake may take, in milliseconds.
    #[arg(long, default_value_t = 60_000)]
    timeout_ms: u64,
}

pub(crate) fn run(command: Command) -> anyhow::Result<ExitCode> {
    let Command::Import(args) = command;
    let endpoint = super::adopt::endpoint_of("mcp import", &args.endpoint)?;
    if let Some(p) = &args.prefix {
        super::adopt::check_prefix("--prefix", p)?;
    }
    let mut options = ImportOptions::default()
        .with_mcp(
            McpOptions::default()
                .with_connect_timeout(Duration::from_millis(args.timeout_ms.max(1))),
        )
        .trusting_published(args.trust_effects);
    if args.no_catalog {
        options = options.with_catalog(EffectsCatalog::empty());
    }
    options.prefix = args.prefix.clone();
    options.overlays = args.effects.load()?;
    let runtime = tokio::runtime::Runtime::new()?;
    let imported = runtime.block_on(import_manifests(&endpoint, &options))?;
    super::adopt::overlays_match(&options.overlays, std::slice::from_ref(&imported.server.0))?;
    for w in &imported.warnings {
        eprintln!("warning: {w}");
    }
    super::adopt::check_manifests(&imported.manifests)?;
    let Some(out) = &args.out else {
        outln!("{}", serde_json::to_string_pretty(&imported.manifests)?);
        return Ok(ExitCode::SUCCESS);
    };
    std::fs::create_dir_all(out)
        .with_context(|| format!("cannot create the directory `{}`", out.display()))
        .map_err(|e| Failure {
            code: 2,
            message: super::failure::render_error(&e),
        })?;
    let mut tools = Vec::new();
    for m in &imported.manifests {
        let id = m["id"].as_str().unwrap_or_default();
        let file = out.join(format!("{}.json", file_stem(id)));
        let kept = file.exists() && !args.force;
        if !kept {
            write_manifest(&file, m)?;
        }
        tools.push(json!({
            "id": id,
            "file": file.display().to_string(),
            "written": !kept,
            "read_only": m["mutating"] == Value::Bool(false),
            "effects_from": m
                .pointer("/metadata/sluice/effects")
                .and_then(Value::as_str)
                .unwrap_or("hints"),
        }));
    }
    let summary = json!({
        "endpoint": endpoint.as_str(),
        "server": {"name": imported.server.0, "version": imported.server.1},
        "prefix": imported.prefix,
        "tools": tools,
        "warnings": imported.warnings,
    });
    outln!("{}", serde_json::to_string_pretty(&summary)?);
    Ok(ExitCode::SUCCESS)
}

/// A file name for a tool id: every character outside `A-Z a-z 0-9 . - _` becomes `_`.
fn file_stem(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn write_manifest(file: &Path, manifest: &Value) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(manifest)?;
    text.push('\n');
    std::fs::write(file, text).map_err(|e| {
        Failure {
            code: 2,
            message: format!("cannot write `{}`: {e}", file.display()),
        }
        .into()
    })
}
