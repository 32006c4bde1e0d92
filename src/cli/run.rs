//! `sluice run`: run a batch and print its results.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::ValueEnum;
use serde_json::{json, Value};
use sluice::kernel::adapters::{strip_optional_nulls, Api, IngestOptions, ToolNames};
use sluice::kernel::authorize::{ApproveAll, RejectAll};
use sluice::kernel::run::{Kernel, OnFailure};
#[cfg(feature = "mcp")]
use sluice::kernel::transport::egress::EgressOptions;
use sluice::kernel::transport::http::{HttpOptions, HttpSynthesizer};
#[cfg(feature = "mcp")]
use sluice::kernel::transport::mcp::McpOptions;
use sluice::kernel::transport::EnvSecrets;
use sluice::kernel::transport::ToolRegistry;
use sluice::kernel::{BatchResult, CallResult};
use sluice::provenance::{CheckpointOptions, Durability, LogOptions};

use super::common::{read_batch, BatchInput};

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
    /// Append a record of every call, conflict edge and the batch to this provenance log
    /// (created if missing; a torn last line is repaired).
    #[arg(long)]
    provenance: Option<PathBuf>,
    /// `durable`: a call's record is on disk before its result is reported; `buffered`: faster.
    #[arg(long, value_enum, default_value = "durable")]
    durability: DurabilityMode,
    /// Append a signed checkpoint of the log to `LOG.checkpoints` every N records (and one when
    /// the run ends); needs `--key` and `--provenance`.
    #[arg(long, value_name = "N", requires = "key", requires = "provenance",
          value_parser = clap::value_parser!(u64).range(1..))]
    checkpoint_every: Option<u64>,
    /// The signer key checkpoints are signed with (`sluice provenance keygen` writes one).
    #[arg(long, value_name = "KEYFILE", requires = "checkpoint_every")]
    key: Option<PathBuf>,
    /// The checkpoints' origin line (default: the key's name).
    #[arg(long, requires = "checkpoint_every")]
    origin: Option<String>,
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
enum DurabilityMode {
    Durable,
    Buffered,
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
    let registry = args.input.registry()?;
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
    // `needsSpec.env` values come from this process's environment, by the declared name.
    let declared_env: std::collections::BTreeSet<String> = registry
        .iter()
        .filter_map(|t| t.manifest().needs_spec.as_ref()?.env.as_ref())
        .flat_map(|env| env.keys().cloned())
        .collect();
    let mut builder = Kernel::builder().tools(registry);
    for name in &declared_env {
        if let Ok(value) = std::env::var(name) {
            builder = builder.env(name, &value);
        }
    }
    let mut builder = builder
        .secrets(EnvSecrets)
        .allow_unrunnable_tools(true)
        .on_failure(match args.on_failure {
            FailureMode::Continue => OnFailure::Continue,
            FailureMode::SkipDependents => OnFailure::SkipDependents,
        });
    if let Some(n) = args.max_concurrency {
        builder = builder.max_concurrency(n);
    }
    if args.proxy_from_env {
        let http = HttpOptions::default().with_proxy_from_env(true);
        builder = builder.synthesizer(
            "http",
            HttpSynthesizer::new(http).map_err(anyhow::Error::msg)?,
        );
        #[cfg(feature = "mcp")]
        {
            let egress = EgressOptions::default().with_proxy_from_env(true);
            builder = builder.mcp_options(McpOptions::default().with_egress(egress));
        }
    }
    if let Some(engine) = engine {
        builder = builder.authorizer(engine);
    }
    builder = match args.approve {
        ApproveMode::All => builder.approver(ApproveAll),
        ApproveMode::None => builder.approver(RejectAll),
        ApproveMode::Prompt => builder.approver(super::policy::PromptApprover::default()),
    };
    let log = match &args.provenance {
        Some(p) => {
            let mut options = LogOptions::new(match args.durability {
                DurabilityMode::Durable => Durability::Durable,
                DurabilityMode::Buffered => Durability::Buffered,
            });
            if let (Some(every), Some(key)) = (args.checkpoint_every, &args.key) {
                let key = super::provenance::read_signer_key(key)?;
                let mut c = CheckpointOptions::new(key, every);
                if let Some(origin) = &args.origin {
                    c = c.with_origin(origin);
                }
                options = options.with_checkpoints(c);
            }
            Some(std::sync::Arc::new(super::provenance::open(p, options)?))
        }
        None => None,
    };
    if let Some(log) = &log {
        builder = builder.provenance_arc(log.clone());
    }
    let kernel = builder.build()?;
    let runtime = tokio::runtime::Runtime::new()?;
    let result = runtime.block_on(kernel.run(batch))?;
    {
        // MCP sessions close inside the runtime that runs them.
        let _inside = runtime.enter();
        drop(kernel);
    }
    // Everything the log holds is on disk before the answer; with the runtime gone no task
    // holds the log any more, so closing it here also writes the last checkpoint first.
    let flushed = log.as_ref().map(|log| runtime.block_on(log.flush()));
    drop(runtime);
    let log_failure = log.and_then(|log| {
        let path = log.path().display().to_string();
        if let Ok(log) = std::sync::Arc::try_unwrap(log) {
            log.close();
        }
        flushed.and_then(Result::err).map(|e| (path, e))
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
        (_, None) => outln!("{}", serde_json::to_string_pretty(&to_json(&result))?),
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
        return Err(super::invalid(format!(
            "the provenance log `{path}` could not be written: {why}{calls}"
        )));
    }
    Ok(ExitCode::SUCCESS)
}

/// Milliseconds with microsecond precision.
pub(crate) fn ms(d: Duration) -> f64 {
    (d.as_micros() as f64) / 1000.0
}

fn result_json(r: &CallResult) -> Value {
    let mut v = json!({
        "id": r.id,
        "tool": r.tool,
        "version": r.version,
        "status": r.status.as_str(),
        "output": r.output,
        "error": r.error.as_ref().map(|e| json!({"code": e.code, "message": e.message})),
        "started_ms": r.started.map(ms),
        "ended_ms": r.ended.map(ms),
    });
    if let Some(recorded) = r.recorded {
        v["recorded"] = json!(recorded);
    }
    v
}

/// A `null` an OpenAI model gave for an optional property that does not take `null` is how
/// strict mode says "absent": read so, when that makes the input valid (otherwise the input is
/// left as it came, for the schema check to name).
fn absent_for_null(batch: &mut sluice::kernel::Batch, registry: &ToolRegistry) {
    for call in &mut batch.calls {
        let Some(tool) = registry.get(&call.tool) else {
            continue;
        };
        if tool.check_input(&call.input).is_ok() {
            continue;
        }
        let mut input = call.input.clone();
        strip_optional_nulls(&mut input, &Value::Object(tool.manifest().input.clone()));
        if tool.check_input(&input).is_ok() {
            call.input = input;
        }
    }
}

/// The batch result as cli.md's JSON.
pub(crate) fn to_json(result: &BatchResult) -> Value {
    json!({
        "results": result.results.iter().map(result_json).collect::<Vec<_>>(),
        "makespan_ms": ms(result.makespan),
    })
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
