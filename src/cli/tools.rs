//! `sluice tools`: list the registered tools, or print them as a model API's tool definitions.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::ValueEnum;
use serde_json::Value;
use sluice::kernel::adapters::{Api, ExportOptions, ToolNames};
use sluice::kernel::builtin::KvStore;

use super::common::{bind_endpoints, load_tools};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A manifest file or a directory of *.json manifests (repeatable). The built-in tools are
    /// always registered.
    #[arg(long = "tools", num_args = 1.., action = clap::ArgAction::Append)]
    tools: Vec<PathBuf>,
    /// `text` and `json` list the tools; `openai`, `openai-responses`, `anthropic`, `gemini`
    /// and `mcp` print that API's tool definitions (a JSON array; what was changed to fit the
    /// API is listed on standard error).
    #[arg(long, value_enum, default_value = "text")]
    format: ToolsFormat,
    /// Offer every version of each id (others than the highest under `id@version`'s name), not
    /// only the highest.
    #[arg(long)]
    all_versions: bool,
    /// OpenAI strict function schemas (`strict: true`; `openai` and `openai-responses`).
    #[arg(long)]
    strict: bool,
    /// Binds an MCP endpoint to an MCP tool whose manifest names none: `ID=URI` (repeatable).
    #[arg(long = "mcp-endpoint", value_name = "ID=URI")]
    mcp_endpoint: Vec<String>,
    #[command(flatten)]
    packs: super::common::PackArgs,
    #[command(flatten)]
    mcp_servers: super::adopt::McpServerArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ToolsFormat {
    Text,
    Json,
    Openai,
    OpenaiResponses,
    Anthropic,
    Gemini,
    Mcp,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut registry = load_tools(&args.tools, None, KvStore::new())?;
    bind_endpoints(&mut registry, &args.mcp_endpoint)?;
    args.mcp_servers.adopt(&mut registry)?;
    args.packs.register(&mut registry, None)?;
    let names = ToolNames::new(&registry)?;
    let options = ExportOptions::default()
        .with_all_versions(args.all_versions)
        .with_strict(args.strict);
    let api = match args.format {
        ToolsFormat::Openai => Some(Api::Openai),
        ToolsFormat::OpenaiResponses => Some(Api::OpenaiResponses),
        ToolsFormat::Anthropic => Some(Api::Anthropic),
        ToolsFormat::Gemini => Some(Api::Gemini),
        ToolsFormat::Mcp => Some(Api::Mcp),
        ToolsFormat::Text | ToolsFormat::Json => None,
    };
    let defs: Vec<Value> = match (api, args.format) {
        (Some(api), _) => {
            let exported = api.export(&registry, &names, &options);
            for c in &exported.changes {
                let at = if c.pointer.is_empty() {
                    "(root)"
                } else {
                    &c.pointer
                };
                eprintln!("sluice: {}: input schema {at}: {}", c.tool, c.what);
            }
            exported.definitions
        }
        (None, ToolsFormat::Json) => registry
            .iter()
            .filter(|t| args.all_versions || registry.is_latest(t))
            .map(|t| t.manifest().to_value())
            .collect(),
        (None, _) => {
            let w = registry.iter().map(|t| t.id().len()).max().unwrap_or(2);
            for t in registry.iter() {
                if !args.all_versions && !registry.is_latest(t) {
                    continue;
                }
                let effects: Vec<String> = t
                    .manifest()
                    .effects()
                    .iter()
                    .map(|e| format!("{} {}", e.kind, e.resource.as_deref().unwrap_or("*")))
                    .collect();
                let ro = if t.access_plan().is_read_only() {
                    "read-only"
                } else {
                    "mutating "
                };
                outln!(
                    "{:w$}  {:8}  {ro}  {}  [{}]",
                    t.id(),
                    t.manifest().version.as_str(),
                    t.manifest().description.as_str(),
                    effects.join(", ")
                );
            }
            return Ok(ExitCode::SUCCESS);
        }
    };
    outln!("{}", serde_json::to_string_pretty(&defs)?);
    Ok(ExitCode::SUCCESS)
}
