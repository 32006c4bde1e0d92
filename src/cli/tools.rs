//! `sluice tools`: list the registered tools, or print them as a model API's tool definitions.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::ValueEnum;
use serde_json::Value;
use sluice::kernel::adapters::{self, ToolNames};
use sluice::kernel::builtin::KvStore;

use super::common::load_tools;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A manifest file or a directory of *.json manifests (repeatable). The built-in tools are
    /// always registered.
    #[arg(long = "tools", num_args = 1.., action = clap::ArgAction::Append)]
    tools: Vec<PathBuf>,
    /// `text` and `json` list the tools; `openai`, `anthropic` and `mcp` print that API's tool
    /// definitions (a JSON array).
    #[arg(long, value_enum, default_value = "text")]
    format: ToolsFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ToolsFormat {
    Text,
    Json,
    Openai,
    Anthropic,
    Mcp,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let registry = load_tools(&args.tools, None, KvStore::new())?;
    let names = ToolNames::new(&registry)?;
    let defs: Vec<Value> = match args.format {
        ToolsFormat::Openai => adapters::openai::tools(&registry, &names),
        ToolsFormat::Anthropic => adapters::anthropic::tools(&registry, &names),
        ToolsFormat::Mcp => adapters::mcp::tools(&registry, &names),
        ToolsFormat::Json => registry.iter().map(|t| t.manifest().to_value()).collect(),
        ToolsFormat::Text => {
            let w = registry.iter().map(|t| t.id().len()).max().unwrap_or(2);
            for t in registry.iter() {
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
                    "{:w$}  {ro}  {}  [{}]",
                    t.id(),
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
