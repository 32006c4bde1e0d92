//! The agents, their turns and the two ways to run them, shared by `benches/throughput.rs` (the
//! calls per second and latencies, on the system allocator) and `benches/throughput_heap.rs`
//! (the same run on a counting allocator, for the heap per call in flight: counting costs every
//! allocation an atomic add, so its rates are lower and are not the ones to quote).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice::kernel::access::Normalizers;
use sluice::kernel::model::{Manifest, ManifestSource};
use sluice::kernel::order::Plan;
use sluice::kernel::run::Kernel;
use sluice::kernel::transport::{handler, Handler, Tool, ToolContext, ToolError, ToolRegistry};
use sluice::kernel::{Batch, Call, Status};

const RUN: Duration = Duration::from_secs(2);

fn tool(id: &str, effects: Value, h: Arc<dyn Handler>) -> Tool {
    let mutating = effects
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["kind"] != "reads");
    let m = Manifest::from_value(json!({
        "id": id, "description": "bench", "version": "1.0.0",
        "input": {"type": "object", "properties": {"path": {"type": "string"}, "dir": {"type": "string"}}},
        "output": {"type": "object"}, "mutating": mutating, "effects": effects
    }))
    .unwrap();
    Tool::new(m, ManifestSource::built_in(), Some(h)).unwrap()
}

pub(crate) fn handler_of(work: Duration) -> Arc<dyn Handler> {
    handler(move |_ctx: ToolContext, _input: Value| async move {
        if !work.is_zero() {
            tokio::time::sleep(work).await;
        }
        Ok::<_, ToolError>(json!({}))
    })
}

pub(crate) fn registry(work: Duration) -> ToolRegistry {
    let h = handler_of(work);
    let mut r = ToolRegistry::new();
    for t in [
        tool(
            "t.read",
            json!([{"kind": "reads", "resource": "fs:{path}"}]),
            h.clone(),
        ),
        tool(
            "t.search",
            json!([{"kind": "reads", "resource": "fs:{dir}/*"}]),
            h.clone(),
        ),
        tool(
            "t.edit",
            json!([{"kind": "writes", "resource": "fs:{path}"}]),
            h.clone(),
        ),
        tool(
            "t.remember",
            json!([{"kind": "writes", "resource": "memory:{path}"}]),
            h.clone(),
        ),
        tool("t.pure", json!([]), h),
    ] {
        r.insert(t).unwrap();
    }
    r
}

/// One turn of agent `a`: (call id, tool, input).
pub(crate) fn turn(a: usize) -> Vec<Call> {
    let d = format!("/repo/agent{a}");
    let path = |f: &str| json!({"path": format!("{d}/{f}")});
    [
        ("r1", "t.read", path("src/main.rs")),
        ("r2", "t.read", path("src/lib.rs")),
        ("r3", "t.read", path("Cargo.toml")),
        ("s", "t.search", json!({"dir": format!("{d}/src")})),
        ("e1", "t.edit", path("src/lib.rs")),
        ("e2", "t.edit", path("src/lib.rs")),
        ("e3", "t.edit", path("README.md")),
        ("r4", "t.read", path("README.md")),
        ("m", "t.remember", path("notes")),
        ("p", "t.pure", json!({})),
    ]
    .into_iter()
    .map(|(id, tool, input)| Call::new(id, tool, input))
    .collect()
}

/// Latencies in buckets 2% wide from 1 µs (to ~40 s), counted in place: recording allocates
/// nothing, so the heap sampled is the calls' alone.
struct Histogram(Vec<AtomicUsize>);

const GROWTH: f64 = 1.02;

impl Histogram {
    fn new() -> Self {
        Histogram((0..900).map(|_| AtomicUsize::new(0)).collect())
    }

    fn record(&self, d: Duration) {
        let us = d.as_secs_f64() * 1e6;
        let i = if us <= 1.0 {
            0
        } else {
            (us.ln() / GROWTH.ln()) as usize + 1
        };
        self.0[i.min(self.0.len() - 1)].fetch_add(1, Ordering::Relaxed);
    }

    /// The upper edge of the bucket holding the `p` quantile, in µs.
    fn quantile(&self, p: f64) -> f64 {
        let counts: Vec<usize> = self.0.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        let total: usize = counts.iter().sum();
        let want = ((total as f64) * p).ceil().max(1.0) as usize;
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return GROWTH.powi(i as i32);
            }
        }
        f64::NAN
    }
}

struct Figures {
    calls: usize,
    latencies: Histogram,
    bytes_per_call: Vec<f64>,
}

/// Samples live bytes over calls in flight while `running` (nothing without `live`).
async fn sample(
    running: Arc<AtomicBool>,
    in_flight: Arc<AtomicUsize>,
    live: Option<Live>,
) -> Vec<f64> {
    let mut out = Vec::new();
    let Some(live) = live else {
        return out;
    };
    let idle = live();
    while running.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let n = in_flight.load(Ordering::Relaxed);
        if n > 0 {
            out.push((live() - idle) as f64 / n as f64);
        }
    }
    out
}

/// Runs `agents` agents for [`RUN`], each running `one_turn(agent, latencies)` (which runs one
/// turn, records the latencies of its calls with no predecessor and returns how many calls it
/// ran) again and again, with the heap sampled meanwhile.
async fn drive<F, Fut>(agents: usize, live: Option<Live>, one_turn: F) -> Figures
where
    F: Fn(usize, Arc<Histogram>) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = usize> + Send,
{
    let latencies = Arc::new(Histogram::new());
    let calls = Arc::new(AtomicUsize::new(0));
    let running = Arc::new(AtomicBool::new(true));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let sampler = tokio::spawn(sample(running.clone(), in_flight.clone(), live));
    let start = Instant::now();
    let tasks: Vec<_> = (0..agents)
        .map(|a| {
            let one_turn = one_turn.clone();
            let (in_flight, latencies, count) =
                (in_flight.clone(), latencies.clone(), calls.clone());
            tokio::spawn(async move {
                while start.elapsed() < RUN {
                    // Every turn has the same number of calls.
                    in_flight.fetch_add(TURN_CALLS, Ordering::Relaxed);
                    let n = one_turn(a, latencies.clone()).await;
                    in_flight.fetch_sub(TURN_CALLS, Ordering::Relaxed);
                    count.fetch_add(n, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    running.store(false, Ordering::Relaxed);
    Figures {
        calls: calls.load(Ordering::Relaxed),
        latencies: Arc::into_inner(latencies).unwrap(),
        bytes_per_call: sampler.await.unwrap(),
    }
}

/// The calls of a turn ([`turn`]).
const TURN_CALLS: usize = 10;

async fn through_sluice(
    kernel: &Kernel,
    agents: usize,
    roots: &[usize],
    live: Option<Live>,
) -> Figures {
    let (kernel, roots) = (kernel.clone(), Arc::new(roots.to_vec()));
    drive(agents, live, move |a, latencies: Arc<Histogram>| {
        let (kernel, roots) = (kernel.clone(), roots.clone());
        async move {
            let r = kernel
                .run(Batch::new("acme", turn(a)).unwrap())
                .await
                .unwrap();
            for (i, c) in r.results.iter().enumerate() {
                assert_eq!(c.status, Status::Ok, "{c:?}");
                if roots.contains(&i) {
                    latencies.record(c.started.unwrap());
                }
            }
            r.results.len()
        }
    })
    .await
}

async fn without_sluice(
    h: Arc<dyn Handler>,
    manifest: Arc<Manifest>,
    agents: usize,
    live: Option<Live>,
) -> Figures {
    drive(agents, live, move |a, latencies: Arc<Histogram>| {
        let (h, manifest) = (h.clone(), manifest.clone());
        async move {
            let submitted = Instant::now();
            let spawned: Vec<_> = turn(a)
                .into_iter()
                .map(|c| {
                    let ctx = ToolContext::detached("acme", &c.id, manifest.clone());
                    let h = h.clone();
                    tokio::spawn(async move {
                        let started = submitted.elapsed();
                        h.call(ctx, c.input).await.unwrap();
                        started
                    })
                })
                .collect();
            let n = spawned.len();
            for s in spawned {
                latencies.record(s.await.unwrap());
            }
            n
        }
    })
    .await
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn report(label: &str, mut f: Figures) -> f64 {
    let rate = f.calls as f64 / RUN.as_secs_f64();
    let heap = match f.bytes_per_call.is_empty() {
        true => String::new(),
        false => format!(
            "   heap per call in flight {:>6.0} B",
            median(&mut f.bytes_per_call)
        ),
    };
    println!(
        "  {label:<16} {rate:>10.0} calls/s   latency p50 {:>8.1} µs  p99 {:>8.1} µs{heap}",
        f.latencies.quantile(0.5),
        f.latencies.quantile(0.99),
    );
    rate
}

/// Live heap bytes now, when the binary counts them.
pub(crate) type Live = fn() -> isize;

/// Runs every configuration and prints its figures (the heap per call in flight with `live`).
pub(crate) fn run(live: Option<Live>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for work in [Duration::ZERO, Duration::from_millis(1)] {
        let registry = registry(work);
        // The calls of a turn with no predecessor in it: their latency is Sluice's alone.
        let plan = Plan::new(
            &registry,
            &Normalizers::default(),
            Batch::new("acme", turn(0)).unwrap(),
        );
        let roots: Vec<usize> = (0..plan.calls.len())
            .filter(|&i| plan.graph.predecessors(i).is_empty())
            .collect();
        let manifest = registry.get("t.read").unwrap().manifest().clone();
        let h = handler_of(work);
        let kernel = runtime.block_on(async { Kernel::builder().tools(registry).build().unwrap() });
        for agents in [8, 64] {
            println!(
                "{agents} agents, handlers of {} ms, {} of 10 calls a turn without predecessor:",
                work.as_millis(),
                roots.len()
            );
            let s = runtime.block_on(through_sluice(&kernel, agents, &roots, live));
            let b = runtime.block_on(without_sluice(h.clone(), manifest.clone(), agents, live));
            let s = report("through Sluice", s);
            let b = report("without Sluice", b);
            println!(
                "  ratio            {:>9.2}x the calls/s without Sluice",
                s / b
            );
        }
    }
}
