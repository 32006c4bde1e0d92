//! `sluice mcp import`: adopt an MCP server's tools as Kindgi manifests.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use sluice::kernel::model::{self, McpEndpoint, ValidateOptions};
use sluice::kernel::transport::mcp::{import_manifests, ImportOptions, McpOptions};

use super::failure::{invalid, Failure};

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// List an MCP server's tools and write one Kindgi manifest per tool.
    ///
    /// Effects come from the server's annotations, conservatively: only `readOnlyHint: true`
    /// makes a tool read-only (`mutating: false`, `reads <prefix>:*`); any other tool declares
    /// no changing effect, so it runs alone until a person declares its effects;
    /// `openWorldHint: true` adds a `network` effect on `net:*`. Without `--out` the manifests are
    /// printed as one JSON array; with it each is written to `<out>/<id>.json` (an existing file
    /// is kept unless `--force`) and a summary is printed. Exit 1 when the server cannot be
    /// reached or a manifest would not validate.
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
    /// How long starting the server and its handshake may take, in milliseconds.
    #[arg(long, default_value_t = 60_000)]
    timeout_ms: u64,
}

pub(crate) fn run(command: Command) -> anyhow::Result<ExitCode> {
    let Command::Import(args) = command;
    let endpoint = McpEndpoint::parse(&args.endpoint).map_err(|e| Failure {
        code: 2,
        message: format!("the endpoint is not usable: {e}"),
    })?;
    if let Some(Err(e)) = endpoint.argv() {
        return Err(Failure {
            code: 2,
            message: format!("the endpoint `{}` is not usable: {e}", args.endpoint),
        }
        .into());
    }
    if let Some(p) = &args.prefix {
        if p.is_empty() || p.contains(['*', '?', '{', '}', '\\', ':', '.']) {
            return Err(Failure {
                code: 2,
                message: format!(
                    "--prefix `{p}` must be non-empty, without `.`, `:`, `*`, `?`, braces or `\\`"
                ),
            }
            .into());
        }
    }
    let mut options = ImportOptions::default().with_mcp(
        McpOptions::default().with_connect_timeout(Duration::from_millis(args.timeout_ms.max(1))),
    );
    options.prefix = args.prefix.clone();
    let runtime = tokio::runtime::Runtime::new()?;
    let imported = runtime.block_on(import_manifests(&endpoint, &options))?;
    let mut invalid_tools = Vec::new();
    for m in &imported.manifests {
        let report = model::validate(m, ValidateOptions::default());
        if !report.is_valid() {
            let errors: Vec<String> = report
                .errors
                .iter()
                .map(|d| format!("`{}`: {}", d.pointer, d.message))
                .collect();
            invalid_tools.push(format!("`{}`: {}", m["id"], errors.join("; ")));
        }
    }
    if !invalid_tools.is_empty() {
        return Err(invalid(format!(
            "the server's tools would not make valid manifests: {}",
            invalid_tools.join(" | ")
        )));
    }
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
        }));
    }
    let summary = json!({
        "endpoint": endpoint.as_str(),
        "server": {"name": imported.server.0, "version": imported.server.1},
        "prefix": imported.prefix,
        "tools": tools,
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
