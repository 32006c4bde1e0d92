#![allow(missing_docs)]
//! Kindgi packs (issue: pack protocol v2): one call of a pack tool through Sluice (the kernel's
//! whole pipeline, then one `POST /v1/invoke`) against one bare `invoke` of the same service, in
//! the same run, on loopback, sequentially (one call in flight: the overhead, not the service's
//! concurrency). The service is the real `kindgi` package's (installed into
//! `target/python-tools`), serving the tests' pack; the tool is `ledger.probe`, which answers at
//! once. Reports p50 and p99 per call and their ratios.
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

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let dir = support::temp_dir("bench-pack");
    let index_path = support::pack::write_pack(&dir, "1.0.0");
    let service = support::pack::Service::start(&index_path, support::pack::free_port());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let index = PackIndex::read(&index_path).unwrap();
        let pack = PackService::new(
            &index,
            &service.url(),
            PackToken::new(support::pack::TOKEN),
            PackOptions::default(),
        )
        .unwrap();
        let mut registry = ToolRegistry::new();
        pack.register(&index, &mut registry).unwrap();
        let kernel = Kernel::builder().tools(registry).build().unwrap();
        let client = reqwest::Client::new();
        let invoke_url = format!("{}/v1/invoke", service.url());

        let bare = |i: usize| {
            let body = json!({"v": 2, "kind": "invoke", "tool": {"id": "ledger.probe", "version": "1.0.0"},
                "input": {}, "ctx": {"tenantId": "acme", "runId": "bench", "requestId": format!("c{i}"), "idempotencyKey": "0123456789abcdef0123456789abcdef"}})
            .to_string();
            let req = client
                .post(&invoke_url)
                .header("content-type", "application/json")
                .header("kindgi-pack-token", support::pack::TOKEN);
            // The headers and body Sluice sends, so that only the path differs.
            let req = req
                .header("kindgi-run-id", "b18f0a-12345678-1")
                .header("kindgi-request-id", format!("c{i}"))
                .header("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
                .body(body.into_bytes());
            async move {
                let mut r = req.send().await.unwrap();
                assert_eq!(r.status(), 200);
                let mut bytes = Vec::new();
                while let Some(c) = r.chunk().await.unwrap() {
                    bytes.extend_from_slice(&c);
                }
                let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
                assert_eq!(v["kind"], "result", "{v}");
            }
        };
        let through = |i: usize| {
            let batch = Batch::new("acme", vec![Call::new(format!("c{i}"), "ledger.probe", json!({}))])
                .unwrap();
            let kernel = kernel.clone();
            async move {
                let r = kernel.run(batch).await.unwrap();
                assert_eq!(r.results[0].status.as_str(), "ok", "{:?}", r.results[0]);
            }
        };
        // Warm both paths (connections, the service's imports, the info check).
        for i in 0..50 {
            bare(i).await;
            through(i).await;
        }
        let mut bare_times = Vec::with_capacity(CALLS);
        let mut sluice_times = Vec::with_capacity(CALLS);
        // Interleaved, so that drift in the service hits both alike.
        for i in 0..CALLS {
            let t = Instant::now();
            bare(i).await;
            bare_times.push(t.elapsed());
            let t = Instant::now();
            through(i).await;
            sluice_times.push(t.elapsed());
        }
        bare_times.sort();
        sluice_times.sort();
        let (b50, b99) = (percentile(&bare_times, 0.5), percentile(&bare_times, 0.99));
        let (s50, s99) = (percentile(&sluice_times, 0.5), percentile(&sluice_times, 0.99));
        println!("pack: {CALLS} sequential calls of ledger.probe on kindgi's pack service (loopback)");
        println!("  bare invoke      p50 {:>8.1} us   p99 {:>8.1} us", b50.as_secs_f64() * 1e6, b99.as_secs_f64() * 1e6);
        println!("  through Sluice   p50 {:>8.1} us   p99 {:>8.1} us", s50.as_secs_f64() * 1e6, s99.as_secs_f64() * 1e6);
        println!(
            "  ratio (Sluice / bare)   p50 {:.3}x   p99 {:.3}x   (+{:.1} us at p50)",
            s50.as_secs_f64() / b50.as_secs_f64(),
            s99.as_secs_f64() / b99.as_secs_f64(),
            (s50.as_secs_f64() - b50.as_secs_f64()) * 1e6
        );
    });
}
