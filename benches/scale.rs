#![allow(missing_docs)]
//! The shared conflict domain on PostgreSQL (issue: past one machine): what admission costs per
//! call, and the throughput of independent and of conflicting calls over three domains (three
//! owners with their own connections, as three processes would have) against the in-memory domain
//! of one kernel, in the same run, on a server started on loopback (tests/support/postgres.rs).
//!
//! Run: `cargo bench --bench scale` (needs Debian's postgresql package, as the tests do).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice::kernel::run::Kernel;
use sluice::kernel::transport::{handler, ToolContext};
use sluice::kernel::{Batch, Call, Status};
use sluice::postgres::PgDomain;

/// A tool that writes `x:{key}` and does nothing else: what is measured is the domain.
fn kernel(domain: Option<Arc<PgDomain>>) -> Kernel {
    let tool = support::tool(
        "b.write",
        json!([{"kind": "writes", "resource": "x:{key}"}]),
        true,
        handler(|_ctx: ToolContext, _input: Value| async { Ok(json!({})) }),
    );
    let b = Kernel::builder().tool(tool);
    match domain {
        Some(d) => b.shared_domain(d),
        None => b,
    }
    .build()
    .unwrap()
}

/// `n` single-call batches one after another: the cost of one call end to end.
async fn sequential(k: &Kernel, n: usize) -> Duration {
    let start = Instant::now();
    for i in 0..n {
        let b = Batch::new(
            "acme",
            vec![Call::new(
                format!("c{i}"),
                "b.write",
                json!({"key": format!("s{i}")}),
            )],
        )
        .unwrap();
        let r = k.run(b).await.unwrap();
        assert_eq!(r.results[0].status, Status::Ok);
    }
    start.elapsed() / n as u32
}

/// Each kernel runs `per` single-call batches from 8 tasks at once; `keys` distinct keys in all
/// (0: every call its own key). Calls per second over all kernels.
/// Calls per second when each of 8 tasks per kernel runs batches of `size` independent calls
/// (a model's turn: the whole batch is submitted at once, so it is admitted as one group).
async fn batched(kernels: &[Kernel], per: usize, size: usize) -> f64 {
    let start = Instant::now();
    let mut tasks = Vec::new();
    let rounds = per / 8 / size;
    for (ki, k) in kernels.iter().enumerate() {
        for t in 0..8 {
            let k = k.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..rounds {
                    let calls = (0..size)
                        .map(|j| {
                            Call::new(
                                format!("c{t}-{i}-{j}"),
                                "b.write",
                                json!({"key": format!("k{ki}-{t}-{i}-{j}")}),
                            )
                        })
                        .collect();
                    let r = k.run(Batch::new("acme", calls).unwrap()).await.unwrap();
                    assert!(r.results.iter().all(|r| r.status == Status::Ok));
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    (kernels.len() * rounds * size * 8) as f64 / start.elapsed().as_secs_f64()
}

async fn throughput(kernels: &[Kernel], per: usize, keys: usize) -> f64 {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (ki, k) in kernels.iter().enumerate() {
        for t in 0..8 {
            let k = k.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..per / 8 {
                    let key = if keys == 0 {
                        format!("k{ki}-{t}-{i}")
                    } else {
                        format!("k{}", (ki + t + i) % keys)
                    };
                    let b = Batch::new(
                        "acme",
                        vec![Call::new(
                            format!("c{t}-{i}"),
                            "b.write",
                            json!({"key": key}),
                        )],
                    )
                    .unwrap();
                    let r = k.run(b).await.unwrap();
                    assert_eq!(r.results[0].status, Status::Ok);
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    (kernels.len() * (per / 8) * 8) as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let pg = support::postgres::Postgres::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let lease = Duration::from_secs(10);
        let mut domains = Vec::new();
        for _ in 0..3 {
            domains.push(PgDomain::connect(&pg.url, lease).await.unwrap());
        }
        let shared: Vec<Kernel> = domains.iter().map(|d| kernel(Some(d.clone()))).collect();
        let memory = kernel(None);

        // Warm up, then the cost of one call, end to end, alone.
        let _ = sequential(&shared[0], 50).await;
        let _ = sequential(&memory, 50).await;
        let pg_call = sequential(&shared[0], 500).await;
        let mem_call = sequential(&memory, 500).await;
        println!("one call at a time (admit, run, release), 500 calls:");
        println!(
            "  in-memory {:>8.1} us   postgres {:>8.1} us   ratio {:.0}x",
            mem_call.as_secs_f64() * 1e6,
            pg_call.as_secs_f64() * 1e6,
            pg_call.as_secs_f64() / mem_call.as_secs_f64()
        );
        println!(
            "  round trips per admission group on postgres (statements prepared once): 2 (BEGIN, \
             the tenants' locks, the lease check, their unfinished calls and the group's \
             numbers, pipelined; then the insert and COMMIT, pipelined); releases are grouped \
             too (1 statement for all queued); a call with predecessors adds 1 check, off the \
             admission path"
        );

        for (name, keys) in [("independent (own keys)", 0), ("conflicting (4 keys)", 4)] {
            let mem = throughput(std::slice::from_ref(&memory), 2400, keys).await;
            let pg3 = throughput(&shared, 800, keys).await;
            println!(
                "{name}: in-memory, one kernel, 8 tasks: {mem:>7.0} calls/s; postgres, 3 domains x 8 tasks: {pg3:>7.0} calls/s; ratio {:.2}x",
                pg3 / mem
            );
        }
        let mem = batched(std::slice::from_ref(&memory), 6400, 16).await;
        let pg3 = batched(&shared, 3200, 16).await;
        println!(
            "independent, batches of 16: in-memory, one kernel, 8 tasks: {mem:>7.0} calls/s; postgres, 3 domains x 8 tasks: {pg3:>7.0} calls/s; ratio {:.2}x",
            pg3 / mem
        );
        for d in &domains {
            d.close().await;
        }
    });
}
