#![allow(missing_docs)]
//! The throughput bench (`benches/throughput.rs`) on `stats_alloc`'s counting wrapper of the
//! system allocator: the heap held per call in flight (live bytes sampled every 20 ms while the
//! agents run, less those before they start, over the calls in flight then), through Sluice and
//! without it. Counting makes every allocation an atomic add on counters both cores share, so
//! the calls per second here are lower than `throughput`'s: quote those.
//!
//! Run: `cargo bench --bench throughput_heap`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::alloc::System;

use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};

#[path = "throughput/agents.rs"]
mod agents;

/// Counts the heap, for the memory per call in flight.
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Live heap bytes now.
fn live() -> isize {
    // `stats_alloc` counts a realloc's growth in `bytes_allocated` and its shrinking in
    // `bytes_deallocated` already.
    let s = GLOBAL.stats();
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

/// Allocations made while `f` runs.
fn allocations(f: impl FnOnce()) -> usize {
    let before = GLOBAL.stats().allocations + GLOBAL.stats().reallocations;
    f();
    GLOBAL.stats().allocations + GLOBAL.stats().reallocations - before
}

/// Allocations per call: through the pipeline (one batch of 10,000 no-op calls, against the
/// same handler futures spawned on tokio) and planning one turn.
fn allocation_counts() {
    use serde_json::json;
    use sluice::kernel::access::Normalizers;
    use sluice::kernel::order::Plan;
    use sluice::kernel::run::Kernel;
    use sluice::kernel::transport::ToolContext;
    use sluice::kernel::{Batch, Call};
    const N: usize = 10_000;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let registry = agents::registry(std::time::Duration::ZERO);
    let manifest = registry.get("t.pure").unwrap().manifest().clone();
    let turn = Batch::new("acme", agents::turn(0)).unwrap();
    let plans = 1_000;
    let planning = allocations(|| {
        for _ in 0..plans {
            std::hint::black_box(Plan::new(&registry, &Normalizers::default(), turn.clone()));
        }
    }) as f64
        / plans as f64;
    let kernel = runtime.block_on(async { Kernel::builder().tools(registry).build().unwrap() });
    let batch = || {
        let calls = (0..N)
            .map(|i| Call::new(format!("c{i}"), "t.pure", json!({})))
            .collect();
        Batch::new("acme", calls).unwrap()
    };
    runtime.block_on(kernel.run(batch())).unwrap(); // warm
    let b = batch();
    let pipeline = allocations(|| {
        runtime.block_on(kernel.run(b)).unwrap();
    }) as f64
        / N as f64;
    let h = agents::handler_of(std::time::Duration::ZERO);
    let floor = allocations(|| {
        runtime.block_on(async {
            let tasks: Vec<_> = (0..N)
                .map(|i| {
                    let ctx = ToolContext::detached("acme", &format!("c{i}"), manifest.clone());
                    tokio::spawn(h.call(ctx, json!({})))
                })
                .collect();
            for t in tasks {
                t.await.unwrap().unwrap();
            }
        })
    }) as f64
        / N as f64;
    println!("allocations (and reallocations):");
    println!("  per no-op call through the pipeline  {pipeline:>6.1}   (tokio spawn + join of the handler: {floor:.1})");
    println!("  per turn planned (10 calls)         {planning:>6.1}");
}

fn main() {
    allocation_counts();
    agents::run(Some(live));
}
