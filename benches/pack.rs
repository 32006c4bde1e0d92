#![allow(missing_docs)]
//! Kindgi packs (issue: pack protocol v2): one call of a pack tool through Sluice (the kernel's
//! whole pipeline, then one `POST /v1/invoke`) against one bare `invoke` of the same service, in
//! the same run, on loopback, sequentially (one call in flight: the overhead, not the service's
//! concurrency). The service is the real `kindgi` package's (installed into
//! `target/python-tools`), serving the tests' pack; the tool is `ledger.probe`, which answers at
//! once. Each path runs its calls back to back on its own keep-alive connection, in alternating
//! blocks of 100, with the same headers and body. Measured twice: against the service as kindgi
//! 0.1.10 ships it (its sockets without `TCP_NODELAY`: each answer's body waits for the client's
//! delayed ACK), and with `TCP_NODELAY` set on them (`support::pack::NODELAY_LAUNCHER`). Reports
//! p50 and p99 per call and their ratios.
//!
//! Run: `cargo bench --bench pack` (prints the figures).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::time::{Duration, Instant};

use serde_json::json;
use sluice::kernel::model::PackIndex;
use sluice::kernel::run::Kernel;
use sluice::kernel::transport::pack::{PackOptions, PackService, PackToken};
use sluice::kernel::transport::ToolRegistry;
use sluice::kernel::{Batch, Call};

#[path = "../tests/support/mod.rs"]
mod support;

const CALLS: usize = 1000;
const BLOCK: usize = 100;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let dir = support::temp_dir("bench-pack");
    let index_path = support::pack::write_pack(&dir, "1.0.0");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for nodelay in [false, true] {
        let service =
            support::pack::Service::start_with(&index_path, support::pack::free_port(), nodelay);
        let label = if nodelay {
            "with TCP_NODELAY on the service's sockets"
        } else {
            "as kindgi 0.1.10 ships it (no TCP_NODELAY)"
        };
        runtime.block_on(measure(&index_path, &service.url(), label));
        service.stop();
    }
}

async fn measure(index_path: &std::path::Path, url: &str, label: &str) {
    let index = PackIndex::read(index_path).unwrap();
    let pack = PackService::new(
        &index,
        url,
        PackToken::new(support::pack::TOKEN),
        PackOptions::default(),
    )
    .unwrap();
    let mut registry = ToolRegistry::new();
    pack.register(&index, &mut registry).unwrap();
    let kernel = Kernel::builder().tools(registry).build().unwrap();
    let client = reqwest::Client::new();
    let invoke_url = format!("{url}/v1/invoke");

    let bare = |i: usize| {
        let body =
            json!({"v": 2, "kind": "invoke", "tool": {"id": "ledger.probe", "version": "1.0.0"},
            "input": {}, "ctx": {"tenantId": "acme", "runId": "bench", "requestId": format!("c{i}"),
                                 "idempotencyKey": "0123456789abcdef0123456789abcdef"}})
            .to_string();
        // The headers and body Sluice sends, so that only the path differs.
        let req = client
            .post(&invoke_url)
            .header("content-type", "application/json")
            .header("kindgi-pack-token", support::pack::TOKEN)
            .header("kindgi-run-id", "b18f0a-12345678-1")
            .header("kindgi-request-id", format!("c{i}"))
            .header(
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
            )
            .body(body.into_bytes());
        async move {
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), 200);
            let v: serde_json::Value = r.json().await.unwrap();
            assert_eq!(v["kind"], "result", "{v}");
        }
    };
    let through = |i: usize| {
        let batch = Batch::new(
            "acme",
            vec![Call::new(format!("c{i}"), "ledger.probe", json!({}))],
        )
        .unwrap();
        let kernel = kernel.clone();
        async move {
            let r = kernel.run(batch).await.unwrap();
            assert_eq!(r.results[0].status.as_str(), "ok", "{:?}", r.results[0]);
        }
    };
    // Warm both paths (connections, the service's imports, the info check).
    for i in 0..20 {
        bare(i).await;
        through(i).await;
    }
    let mut bare_times = Vec::with_capacity(CALLS);
    let mut sluice_times = Vec::with_capacity(CALLS);
    for block in 0..CALLS / BLOCK {
        for i in block * BLOCK..(block + 1) * BLOCK {
            let t = Instant::now();
            bare(i).await;
            bare_times.push(t.elapsed());
        }
        for i in block * BLOCK..(block + 1) * BLOCK {
            let t = Instant::now();
            through(i).await;
            sluice_times.push(t.elapsed());
        }
    }
    bare_times.sort();
    sluice_times.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let (b50, b99) = (percentile(&bare_times, 0.5), percentile(&bare_times, 0.99));
    let (s50, s99) = (
        percentile(&sluice_times, 0.5),
        percentile(&sluice_times, 0.99),
    );
    println!("pack: {CALLS} sequential calls of ledger.probe, kindgi's pack service {label}");
    println!(
        "  bare invoke      p50 {:>9.1} us   p99 {:>9.1} us",
        us(b50),
        us(b99)
    );
    println!(
        "  through Sluice   p50 {:>9.1} us   p99 {:>9.1} us",
        us(s50),
        us(s99)
    );
    println!(
        "  ratio (Sluice / bare)   p50 {:.3}x   p99 {:.3}x   (+{:.1} us at p50)",
        us(s50) / us(b50),
        us(s99) / us(b99),
        us(s50) - us(b50)
    );
}
