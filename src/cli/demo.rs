//! `sluice demo`: one agent turn run three ways — serially, behind one global read/write lock,
//! and with Sluice — with a timeline of each and the same results.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice::kernel::batch::{Batch, BatchResult, Call, CallResult, Status};
use sluice::kernel::builtin::{self, BuiltinConfig, KvStore};
use sluice::kernel::kernel::Kernel;
use sluice::kernel::registry::ToolRegistry;

use super::run::to_text;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Where the demo writes its files (default: a new folder under the system's temp dir).
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

/// The turn: what a coding agent emits in one answer.
fn turn() -> Vec<Call> {
    let c = |id: &str, tool: &str, input: Value| Call::new(id, tool, input);
    vec![
        c(
            "read-main",
            "sluice.fs.read",
            json!({"path": "src/main.rs"}),
        ),
        c("read-lib", "sluice.fs.read", json!({"path": "src/lib.rs"})),
        c("search", "sluice.sleep", json!({"ms": 120})),
        c(
            "edit-lib-1",
            "sluice.fs.write",
            json!({"path": "src/lib.rs", "content": "pub fn parse() {}\n"}),
        ),
        c(
            "recall",
            "sluice.kv.get",
            json!({"key": "memory/facts", "delay_ms": 60}),
        ),
        c(
            "edit-lib-2",
            "sluice.fs.write",
            json!({"path": "./src/../src/lib.rs", "content": "pub fn parse() {}\npub fn check() {}\n"}),
        ),
        c(
            "edit-readme",
            "sluice.fs.write",
            json!({"path": "README.md", "content": "# demo\n"}),
        ),
        c(
            "remember",
            "sluice.kv.incr",
            json!({"key": "memory/turns", "delay_ms": 60}),
        ),
        c(
            "reread-lib",
            "sluice.fs.read",
            json!({"path": "src/lib.rs"}),
        ),
        c(
            "note",
            "sluice.kv.put",
            json!({"key": "memory/facts", "value": "lib has parse and check", "delay_ms": 60}),
        ),
        c("think", "sluice.sleep", json!({"ms": 100})),
        c("echo", "sluice.echo", json!({"summary": "done"})),
    ]
}

fn workspace(out: &std::path::Path) -> anyhow::Result<std::path::PathBuf> {
    let root = out.join("workspace");
    std::fs::create_dir_all(root.join("src"))?;
    std::fs::write(root.join("src/main.rs"), "fn main() { demo::parse(); }\n")?;
    std::fs::write(root.join("src/lib.rs"), "pub fn parse() { todo!() }\n")?;
    std::fs::write(root.join("README.md"), "")?;
    Ok(root)
}

fn registry(root: &std::path::Path) -> anyhow::Result<(ToolRegistry, KvStore)> {
    let kv = KvStore::new();
    let r = builtin::registry(BuiltinConfig {
        root: root.to_owned(),
        kv: kv.clone(),
    })?;
    Ok((r, kv))
}

/// Runs the turn with Sluice.
async fn with_sluice(out: &std::path::Path) -> anyhow::Result<(BatchResult, Vec<(String, Value)>)> {
    let root = workspace(&out.join("sluice"))?;
    let (tools, kv) = registry(&root)?;
    let kernel = Kernel::builder().tools(tools).build()?;
    let r = kernel.run(Batch::new("demo", turn())?).await?;
    Ok((r, kv.snapshot()))
}

/// Runs the turn one call at a time, or behind one global read/write lock (read-only tools
/// share it, every other tool takes it alone), through the same kernel with a cap of one call at
/// a time per lock holder.
async fn with_baseline(
    out: &std::path::Path,
    rw_lock: bool,
) -> anyhow::Result<(BatchResult, Vec<(String, Value)>)> {
    let name = if rw_lock { "rwlock" } else { "serial" };
    let root = workspace(&out.join(name))?;
    let (tools, kv) = registry(&root)?;
    let kernel = Kernel::builder().tools(tools).build()?;
    let lock = Arc::new(tokio::sync::RwLock::new(()));
    let start = Instant::now();
    let mut tasks = Vec::new();
    let mut results: Vec<CallResult> = Vec::new();
    for call in turn() {
        let read_only = kernel
            .tools()
            .get(&call.tool)
            .is_some_and(|t| t.access_plan().is_read_only());
        let kernel = kernel.clone();
        let lock = lock.clone();
        // One call per batch, with the baseline's own ordering around it.
        let run_one = move |call: Call| async move {
            let t0 = start.elapsed();
            let mut r = kernel.run(Batch::new("demo", vec![call])?).await?;
            let mut one: CallResult = r.results.remove(0);
            one.started = one.started.map(|s| s + t0);
            one.ended = one.ended.map(|e| e + t0);
            anyhow::Ok(one)
        };
        if !rw_lock {
            results.push(run_one(call).await?);
            continue;
        }
        // Fair lock, taken in submission order: reads share it, each write holds it alone.
        if read_only {
            let guard = lock.clone().read_owned().await;
            tasks.push(tokio::spawn(async move {
                let r = run_one(call).await;
                drop(guard);
                r
            }));
        } else {
            let guard = lock.clone().write_owned().await;
            tasks.push(tokio::spawn(async move {
                let r = run_one(call).await;
                drop(guard);
                r
            }));
        }
    }
    for t in tasks {
        results.push(t.await??);
    }
    let tasks = results;
    let makespan = tasks
        .iter()
        .filter_map(|r| r.ended)
        .max()
        .unwrap_or(Duration::ZERO);
    Ok((
        BatchResult {
            batch_id: name.into(),
            tenant: "demo".into(),
            results: tasks,
            makespan,
        },
        kv.snapshot(),
    ))
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let out = match args.out {
        Some(o) => o,
        None => std::env::temp_dir().join(format!("sluice-demo-{}", std::process::id())),
    };
    std::fs::create_dir_all(&out)?;
    let rt = tokio::runtime::Runtime::new()?;
    outln!(
        "One agent turn: {} tool calls, run three ways.\n",
        turn().len()
    );
    let (serial, kv_serial) = rt.block_on(with_baseline(&out, false))?;
    outln!("1. Serially, one call at a time:\n{}", to_text(&serial));
    let (locked, kv_locked) = rt.block_on(with_baseline(&out, true))?;
    outln!(
        "2. Behind one global read/write lock (reads together, each write alone):\n{}",
        to_text(&locked)
    );
    let (sluice, kv_sluice) = rt.block_on(with_sluice(&out))?;
    outln!(
        "3. With Sluice (conflicting calls in order, the rest at once):\n{}",
        to_text(&sluice)
    );

    let outputs = |r: &BatchResult| -> Vec<(String, Status, Option<Value>)> {
        r.results
            .iter()
            .map(|c| (c.id.clone(), c.status, c.output.clone().map(strip_paths)))
            .collect()
    };
    let same = outputs(&serial) == outputs(&sluice)
        && outputs(&locked) == outputs(&sluice)
        && kv_serial == kv_sluice
        && kv_locked == kv_sluice;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    outln!(
        "Results identical in all three runs: {}",
        if same { "yes" } else { "NO" }
    );
    outln!(
        "Makespan: serial {:.0} ms, global lock {:.0} ms, Sluice {:.0} ms — {:.1}x and {:.1}x faster.",
        ms(serial.makespan),
        ms(locked.makespan),
        ms(sluice.makespan),
        ms(serial.makespan) / ms(sluice.makespan),
        ms(locked.makespan) / ms(sluice.makespan)
    );
    outln!("Files the demo wrote: {}", out.display());
    Ok(if same {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The fs tools answer with absolute paths, which differ between the three workspaces.
fn strip_paths(v: Value) -> Value {
    match v {
        Value::Object(mut m) => {
            if let Some(Value::String(p)) = m.get("path") {
                let tail = p.rsplit("/workspace/").next().unwrap_or(p).to_owned();
                m.insert("path".into(), Value::String(tail));
            }
            Value::Object(m)
        }
        v => v,
    }
}
