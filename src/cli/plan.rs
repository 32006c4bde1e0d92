//! `sluice plan`: how a batch would run, without running it.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::ValueEnum;
use sluice::kernel::access::Normalizers;
use sluice::kernel::authorize::{Authorization, DecidedBy, Decision};
use sluice::kernel::order::Plan;

use super::common::{read_batch, BatchInput};
use super::failure::invalid;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    input: BatchInput,
    /// A policy document: each call then shows its decision and the reason for it.
    #[arg(long)]
    policy: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "json")]
    format: PlanFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum PlanFormat {
    Json,
    Text,
    Dot,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let engine = args
        .policy
        .as_deref()
        .map(super::policy::load)
        .transpose()?;
    let (registry, _) = args.input.registry(None)?;
    let batch = read_batch(&args.input.batch)?;
    let plan = Plan::new(&registry, &Normalizers::default(), batch);
    if let Some((call, rejection)) = plan.first_rejection() {
        return Err(invalid(rejection.message(&call.call)));
    }
    let auth: Option<Vec<Authorization>> = engine.map(|e| {
        plan.calls
            .iter()
            .map(|c| match &c.tool {
                Some(t) => e.decide(&plan.tenant, t.manifest(), &c.accesses),
                None => Authorization::new(Decision::Deny, DecidedBy::UnknownTool),
            })
            .collect()
    });
    match args.format {
        PlanFormat::Json => outln!(
            "{}",
            serde_json::to_string_pretty(&sluice::report::plan_json(&plan, auth.as_deref()))?
        ),
        PlanFormat::Text => out!("{}", to_text(&plan, auth.as_deref())),
        PlanFormat::Dot => out!("{}", to_dot(&plan)),
    }
    Ok(ExitCode::SUCCESS)
}

fn to_text(plan: &Plan, auth: Option<&[Authorization]>) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let waves = plan.graph.waves();
    let critical = plan.critical_path_ids();
    let _ = writeln!(
        s,
        "tenant {}: {} call(s), {} edge(s), {} wave(s); critical path {}",
        plan.tenant,
        plan.calls.len(),
        plan.graph.edges().len(),
        waves.len(),
        critical.join(" -> ")
    );
    for (i, c) in plan.calls.iter().enumerate() {
        let ro = if c.is_read_only() {
            "  (read-only)"
        } else {
            ""
        };
        let _ = writeln!(s, "\n{}  {}{ro}", c.call.id, c.call.tool);
        if let Some(a) = auth.and_then(|a| a.get(i)) {
            let _ = writeln!(s, "    {} by {}", a.decision, a.by);
        }
        if c.accesses.is_empty() {
            let _ = writeln!(s, "    touches nothing");
        }
        for a in &c.accesses {
            let _ = writeln!(s, "    {:<22} {}", a.kind.as_str(), a.resource);
        }
        let preds: Vec<String> = plan
            .graph
            .edges()
            .iter()
            .filter(|e| e.to == i)
            .map(|e| format!("{} ({} on {})", plan.call_id(e.from), e.kind, e.resource))
            .collect();
        if preds.is_empty() {
            let _ = writeln!(s, "    starts at once");
        } else {
            let _ = writeln!(s, "    waits for {}", preds.join(", "));
        }
    }
    let _ = writeln!(s, "\nwaves (informative: nothing waits for a wave):");
    for (k, w) in waves.iter().enumerate() {
        let ids: Vec<&str> = w.iter().map(|&i| plan.call_id(i)).collect();
        let _ = writeln!(s, "  {k}: {}", ids.join(", "));
    }
    s
}

fn dot_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

fn to_dot(plan: &Plan) -> String {
    use std::fmt::Write;
    let mut s = String::from("digraph plan {\n  rankdir=LR;\n  node [shape=box];\n");
    for c in &plan.calls {
        let _ = writeln!(
            s,
            "  \"{}\" [label=\"{}\\n{}\"];",
            dot_escape(&c.call.id),
            dot_escape(&c.call.id),
            dot_escape(&c.call.tool)
        );
    }
    for e in plan.graph.edges() {
        let _ = writeln!(
            s,
            "  \"{}\" -> \"{}\" [label=\"{}\\n{}\"];",
            dot_escape(plan.call_id(e.from)),
            dot_escape(plan.call_id(e.to)),
            dot_escape(&e.resource.to_text()),
            e.kind
        );
    }
    s.push_str("}\n");
    s
}
