#![allow(missing_docs)]
//! Dispatch benchmarks (issue: the kernel).
//!
//! (a) overhead: 10,000 independent no-op native calls through the whole pipeline (resolve,
//!     validate, authorize, order, wait, invoke, record, deliver) against the same handler futures
//!     spawned straight on tokio and joined — the floor;
//! (b) makespan: a realistic mixed batch — 16 calls, 40% reads and 30% writes on overlapping
//!     keys, the rest pure, 20 ms each — run by Sluice, serially, behind one global read/write
//!     lock (reads together, each write alone: what codex does), and by consecutive grouping
//!     (runs of read-only calls together: what Claude Code does). The critical-path lower bound
//!     is printed beside them.
//!
//! Run: `cargo bench --bench dispatch`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use serde_json::{json, Value};
use sluice::kernel::model::{Manifest, ManifestSource};
use sluice::kernel::run::Kernel;
use sluice::kernel::transport::{handler, Handler, Tool, ToolContext, ToolError};
use sluice::kernel::{Batch, Call};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn tool(id: &str, effects: Value, mutating: bool, h: Arc<dyn Handler>) -> Tool {
    let m = Manifest::from_value(json!({
        "id": id, "description": "bench", "version": "1.0.0",
        "input": {"type": "object", "properties": {"key": {"type": "string"}}},
        "output": {"type": "object"}, "mutating": mutating, "effects": effects
    }))
    .expect("bench manifest");
    Tool::new(m, ManifestSource::built_in(), Some(h)).expect("bench tool")
}

fn noop() -> Arc<dyn Handler> {
    handler(|_ctx: ToolContext, _input: Value| async move { Ok::<_, ToolError>(json!({})) })
}

fn overhead(c: &mut Criterion) {
    let rt = runtime();
    let kernel = Kernel::builder()
        .tool(tool("b.noop", json!([]), false, noop()))
        .build()
        .expect("bench kernel");
    let calls: Vec<Call> = (0..10_000)
        .map(|i| Call::new(format!("c{i}"), "b.noop", json!({})))
        .collect();
    let batch = Batch::new("bench", calls).expect("bench batch");
    let h = noop();
    let manifest = kernel
        .tools()
        .get("b.noop")
        .expect("tool")
        .manifest()
        .clone();

    let mut group = c.benchmark_group("dispatch/overhead_10k_noop");
    group.sample_size(20);
    group.bench_function("sluice_pipeline", |b| {
        b.iter_batched(
            || batch.clone(),
            |batch| rt.block_on(kernel.run(batch)).expect("runs"),
            BatchSize::LargeInput,
        )
    });
    group.bench_function("tokio_spawn_floor", |b| {
        b.iter(|| {
            rt.block_on(async {
                let tasks: Vec<_> = (0..10_000)
                    .map(|i| {
                        let ctx =
                            ToolContext::detached("bench", &format!("c{i}"), manifest.clone());
                        tokio::spawn(h.call(ctx, json!({})))
                    })
                    .collect();
                for t in tasks {
                    let _ = t.await;
                }
            })
        })
    });
    group.finish();
}

/// The mixed batch: (kind, key) where kind is r(ead), w(rite) or p(ure).
const MIXED: [(&str, &str); 16] = [
    ("r", "a"),
    ("p", ""),
    ("w", "a"),
    ("r", "b"),
    ("p", ""),
    ("r", "c"),
    ("w", "b"),
    ("r", "a"),
    ("p", ""),
    ("w", "c"),
    ("r", "d"),
    ("p", ""),
    ("w", "d"),
    ("r", "b"),
    ("p", ""),
    ("w", "a"),
];
const STEP: Duration = Duration::from_millis(20);

fn sleeper() -> Arc<dyn Handler> {
    handler(|_ctx: ToolContext, _input: Value| async move {
        tokio::time::sleep(STEP).await;
        Ok::<_, ToolError>(json!({}))
    })
}

fn mixed_kernel() -> Kernel {
    Kernel::builder()
        .tool(tool(
            "b.read",
            json!([{"kind": "reads", "resource": "kv:{key}"}]),
            false,
            sleeper(),
        ))
        .tool(tool(
            "b.write",
            json!([{"kind": "writes", "resource": "kv:{key}"}]),
            true,
            sleeper(),
        ))
        .tool(tool("b.pure", json!([]), false, sleeper()))
        .build()
        .expect("bench kernel")
}

fn mixed_batch() -> Batch {
    let calls = MIXED
        .iter()
        .enumerate()
        .map(|(i, (k, key))| {
            let tool = match *k {
                "r" => "b.read",
                "w" => "b.write",
                _ => "b.pure",
            };
            Call::new(format!("c{i}"), tool, json!({"key": key}))
        })
        .collect();
    Batch::new("bench", calls).expect("bench batch")
}

async fn serial() {
    for _ in MIXED {
        tokio::time::sleep(STEP).await;
    }
}

/// One global read/write lock: every read-only call takes it shared, every other call exclusive,
/// in submission order (tokio's lock is fair, as codex's is).
async fn global_rw_lock() {
    let lock = Arc::new(tokio::sync::RwLock::new(()));
    let mut tasks = Vec::new();
    for (kind, _) in MIXED {
        let lock = lock.clone();
        if kind == "w" {
            let guard = lock.write_owned().await;
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep(STEP).await;
                drop(guard);
            }));
        } else {
            let guard = lock.read_owned().await;
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep(STEP).await;
                drop(guard);
            }));
        }
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// Consecutive runs of read-only calls run together; every other call runs alone.
async fn consecutive_grouping() {
    let mut i = 0;
    while i < MIXED.len() {
        let mut j = i;
        while j < MIXED.len() && MIXED[j].0 != "w" {
            j += 1;
        }
        if j == i {
            tokio::time::sleep(STEP).await;
            i += 1;
        } else {
            let group: Vec<_> = (i..j)
                .map(|_| tokio::spawn(tokio::time::sleep(STEP)))
                .collect();
            for t in group {
                let _ = t.await;
            }
            i = j;
        }
    }
}

fn makespan(c: &mut Criterion) {
    let rt = runtime();
    let kernel = mixed_kernel();
    let batch = mixed_batch();
    let chain = kernel.plan(batch.clone()).graph.critical_path().len();
    let nominal = STEP * chain as u32;
    // One run of each, printed as ratios (criterion's figures follow).
    let time = |f: &dyn Fn()| {
        let t = Instant::now();
        f();
        t.elapsed()
    };
    // The achievable lower bound on this machine: the critical path's calls run back to back
    // (tokio's timer rounds each sleep up, so this is a little above the nominal bound).
    let bound = time(&|| {
        rt.block_on(async {
            for _ in 0..chain {
                tokio::time::sleep(STEP).await;
            }
        })
    });
    let sluice = time(&|| {
        rt.block_on(kernel.run(batch.clone())).expect("runs");
    });
    let serial_t = time(&|| rt.block_on(serial()));
    let lock_t = time(&|| rt.block_on(global_rw_lock()));
    let group_t = time(&|| rt.block_on(consecutive_grouping()));
    let r = |d: Duration| d.as_secs_f64() / sluice.as_secs_f64();
    println!(
        "mixed batch, one run: critical path {chain} calls, nominal bound {:.1} ms, measured \
         bound {:.1} ms; sluice {:.1} ms ({:.3}x the measured bound); serial {:.1} ms ({:.2}x \
         sluice); global rw lock {:.1} ms ({:.2}x); consecutive grouping {:.1} ms ({:.2}x)",
        nominal.as_secs_f64() * 1e3,
        bound.as_secs_f64() * 1e3,
        sluice.as_secs_f64() * 1e3,
        sluice.as_secs_f64() / bound.as_secs_f64(),
        serial_t.as_secs_f64() * 1e3,
        r(serial_t),
        lock_t.as_secs_f64() * 1e3,
        r(lock_t),
        group_t.as_secs_f64() * 1e3,
        r(group_t),
    );

    let mut group = c.benchmark_group("dispatch/mixed_16_calls_20ms");
    group.sample_size(10);
    group.bench_function("sluice", |b| {
        b.iter_batched(
            || batch.clone(),
            |batch| rt.block_on(kernel.run(batch)).expect("runs"),
            BatchSize::SmallInput,
        )
    });
    group.bench_function("global_rw_lock", |b| {
        b.iter(|| rt.block_on(global_rw_lock()))
    });
    group.bench_function("consecutive_grouping", |b| {
        b.iter(|| rt.block_on(consecutive_grouping()))
    });
    group.bench_function("serial", |b| b.iter(|| rt.block_on(serial())));
    group.finish();
}

criterion_group!(benches, overhead, makespan);
criterion_main!(benches);
