//! `sluice run`: run a batch and print its results.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::ValueEnum;
use sluice::kernel::adapters::{Api, IngestOptions, ToolNames};
use sluice::kernel::authorize::{ApproveAll, RejectAll};
use sluice::kernel::run::OnFailure;
use sluice::kernel::BatchResult;
use sluice::report::{absent_for_null, ms, run_json};

use super::common::{read_batch, BatchInput, DomainArgs, LogArgs};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Tools (a tool the kernel cannot carry out is accepted; its calls end with `no-handler`),
    /// the batch, and the fs tools' root.
    #[command(flatten)]
    input: BatchInput,
    /// The batch's shape: Sluice's own, or a model's response (docs/cli.md lists what each
    /// takes): `openai` (a ChatCompletion, an assistant message or its `tool_calls`),
    /// `openai-responses` (a Response or its `output` items), `anthropic` (a Message, an
    /// assistant message or its content), `gemini` (a GenerateContentResponse, a Content or its
    /// parts), `mcp` (an array of tools/call requests).
    #[arg(long, value_enum, default_value = "sluice")]
    batch_format: BatchFormat,
    /// The tenant of a model-API batch.
    #[arg(long, default_value = "default")]
    tenant: String,
    /// Which choice of a ChatCompletion (or candidate of a Gemini response) holds the calls.
    #[arg(long, default_value_t = 0)]
    choice: usize,
    /// A policy document: every access is authorized per tenant. Without it, every access is
    /// allowed and nothing asks.
    #[arg(long)]
    policy: Option<PathBuf>,
    /// Who answers asks: `all` approves, `none` rejects (fail closed), `prompt` asks y/n on the
    /// terminal.
    #[arg(long, value_enum, default_value = "none")]
    approve: ApproveMode,
    /// The provenance log and its checkpoints.
    #[command(flatten)]
    log: LogArgs,
    /// The shared conflict domain (PostgreSQL), for several processes.
    #[command(flatten)]
    domain: DomainArgs,
    /// What happens to the dependents of a failed call.
    #[arg(long, value_enum, default_value = "continue")]
    on_failure: FailureMode,
    /// The most calls running at once (default: no cap).
    #[arg(long)]
    max_concurrency: Option<usize>,
    /// Send HTTP tools' and MCP servers' requests through the proxy the environment names
    /// (`HTTP_PROXY`, `HTTPS_PROXY`, `NO_PROXY`); by default they are ignored (docs/security.md).
    #[arg(long)]
    proxy_from_env: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "json")]
    format: RunFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum FailureMode {
    Continue,
    SkipDependents,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ApproveMode {
    All,
    None,
    Prompt,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BatchFormat {
    Sluice,
    Openai,
    OpenaiResponses,
    Anthropic,
    Gemini,
    Mcp,
}

impl BatchFormat {
    fn api(self) -> Option<Api> {
        match self {
            BatchFormat::Sluice => None,
            BatchFormat::Openai => Some(Api::Openai),
            BatchFormat::OpenaiResponses => Some(Api::OpenaiResponses),
            BatchFormat::Anthropic => Some(Api::Anthropic),
            BatchFormat::Gemini => Some(Api::Gemini),
            BatchFormat::Mcp => Some(Api::Mcp),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RunFormat {
    Json,
    Text,
    /// The OpenAI `tool` role messages to send back (a JSON array).
    Openai,
    /// The OpenAI Responses `function_call_output` items to send back (a JSON array).
    OpenaiResponses,
    /// The Anthropic `user` message of `tool_result` blocks to send back (a JSON array of one,
    /// or empty when nothing ran).
    Anthropic,
    /// The Gemini `user` Content of `functionResponse` parts to send back (a JSON array of one,
    /// or empty when nothing ran).
    Gemini,
    /// The MCP `tools/call` results (a JSON array).
    Mcp,
}

impl RunFormat {
    fn api(self) -> Option<Api> {
        match self {
            RunFormat::Json | RunFormat::Text => None,
            RunFormat::Openai => Some(Api::Openai),
            RunFormat::OpenaiResponses => Some(Api::OpenaiResponses),
            RunFormat::Anthropic => Some(Api::Anthropic),
            RunFormat::Gemini => Some(Api::Gemini),
            RunFormat::Mcp => Some(Api::Mcp),
        }
    }
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let engine = args
        .policy
        .as_deref()
        .map(super::policy::load)
        .transpose()?;
    let (registry, packs) = args.input.registry(Some(args.proxy_from_env))?;
    let names = ToolNames::new(&registry)?;
    let batch = match args.batch_format.api() {
        None => read_batch(&args.input.batch)?,
        Some(api) => {
            let doc = super::common::read_json_arg(&args.input.batch)?;
            let options = IngestOptions::default().with_choice(args.choice);
            let mut batch = api.batch(&args.tenant, &doc, &names, &options)?;
            if matches!(api, Api::Openai | Api::OpenaiResponses) {
                absent_for_null(&mut batch, &registry);
            }
            batch
        }
    };
    let mut builder =
        super::common::kernel_builder(registry, args.max_concurrency, args.proxy_from_env)?
            .on_failure(match args.on_failure {
                FailureMode::Continue => OnFailure::Continue,
                FailureMode::SkipDependents => OnFailure::SkipDependents,
            });
    if let Some(engine) = engine {
        builder = builder.authorizer(engine);
    }
    builder = match args.approve {
        ApproveMode::All => builder.approver(ApproveAll),
        ApproveMode::None => builder.approver(RejectAll),
        ApproveMode::Prompt => builder.approver(super::policy::PromptApprover::default()),
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let log = runtime.block_on(args.log.open())?;
    if let Some(log) = &log {
        builder = builder.provenance_arc(log.sink());
    }
    let domain = runtime.block_on(args.domain.connect())?;
    if let Some(d) = &domain {
        builder = builder.shared_domain(d.clone());
    }
    runtime.block_on(super::common::check_packs(&packs))?;
    let kernel = {
        let _inside = runtime.enter();
        builder.build()?
    };
    let result = runtime.block_on(kernel.run(batch))?;
    // The kernel's ordered close: the shared domain settled and closed, the MCP sessions closed
    // inside the runtime, then the log flushed and closed (its last checkpoint written), all
    // before the answer is printed.
    let closed = runtime.block_on(kernel.shutdown());
    drop(runtime);
    let log_failure = log.and_then(|log| {
        // Dropping the log joins its writer, which `shutdown` has closed.
        let path = log.name();
        closed.err().map(|e| match e {
            sluice::kernel::Error::ProvenanceUnkept { why } => (path, why),
            other => (path, other.to_string()),
        })
    });
    match (args.format, args.format.api()) {
        (_, Some(api)) => {
            let reply = api.results(&result.results, &names);
            if reply.is_empty() {
                eprintln!(
                    "sluice: the model called no tool: there is nothing to send back (an empty \
                     list of messages)"
                );
            }
            outln!("{}", serde_json::to_string_pretty(&reply)?)
        }
        (RunFormat::Text, None) => out!("{}", to_text(&result)),
        (_, None) => outln!("{}", serde_json::to_string_pretty(&run_json(&result))?),
    }
    // The batch ran and is printed; a log that could not keep it is still a failure (exit 1).
    let unrecorded: Vec<&str> = result
        .results
        .iter()
        .filter(|r| r.recorded == Some(false))
        .map(|r| r.id.as_str())
        .collect();
    if !unrecorded.is_empty() || log_failure.is_some() {
        let (path, why) = log_failure.unwrap_or_else(|| {
            let path = args
                .log
                .provenance
                .as_deref()
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            (path, "it refused records".into())
        });
        let calls = if unrecorded.is_empty() {
            String::new()
        } else {
            format!(
                "; the records of {} call(s) are not in it: {}",
                unrecorded.len(),
                unrecorded.join(", ")
            )
        };
        return Err(super::failure::invalid(format!(
            "the provenance log `{path}` could not be written: {why}{calls}"
        )));
    }
    Ok(ExitCode::SUCCESS)
}

/// A table of results with a small timeline.
pub(crate) fn to_text(result: &BatchResult) -> String {
    use std::fmt::Write;
    const WIDTH: f64 = 40.0;
    let span = ms(result.makespan).max(0.001);
    let id_w = result
        .results
        .iter()
        .map(|r| r.id.len())
        .max()
        .unwrap_or(2)
        .max(2);
    let tool_w = result
        .results
        .iter()
        .map(|r| r.tool.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:id_w$}  {:tool_w$}  {:9}  {:>17}  timeline (0 .. {:.1} ms)",
        "id", "tool", "status", "start..end ms", span
    );
    for r in &result.results {
        let (times, bar) = match (r.started, r.ended) {
            (Some(a), Some(b)) => {
                let (a, b) = (ms(a), ms(b));
                let from = ((a / span) * WIDTH).floor() as usize;
                let to = (((b / span) * WIDTH).ceil() as usize).max(from + 1);
                let bar = format!(
                    "{}{}",
                    " ".repeat(from),
                    "█".repeat(to.min(40) - from.min(to))
                );
                (format!("{a:>8.1}..{b:<8.1}"), bar)
            }
            _ => ("-".to_string(), String::new()),
        };
        let _ = writeln!(
            s,
            "{:id_w$}  {:tool_w$}  {:9}  {:>17}  |{bar:<40}|",
            r.id,
            r.tool,
            r.status.as_str(),
            times
        );
        if let Some(e) = &r.error {
            let _ = writeln!(s, "{:id_w$}  └ {}: {}", "", e.code, e.message);
        }
    }
    let _ = writeln!(s, "makespan {:.1} ms", ms(result.makespan));
    s
}
