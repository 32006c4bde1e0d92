#![allow(missing_docs)]
//! MCP-tool benchmark (issue: MCP transport): the cost of MCP calls through the whole pipeline
//! (validation, accesses, graph, task, shared session) against the reference server over stdio,
//! compared with the same calls sent by a bare rmcp client on its own session to the same server
//! binary, in the same run. One call, and 50 independent calls in flight together.
//!
//! Run: `cargo bench --bench mcp` (the reference server is installed into target/ on first use).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[path = "../tests/support/mcp.rs"]
mod mcp;

use std::borrow::Cow;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::json;
use sluice::kernel::run::Kernel;
use sluice::kernel::{Batch, Call};

fn echo_params(i: usize) -> CallToolRequestParams {
    let mut p = CallToolRequestParams::new(Cow::Borrowed("echo"));
    p.arguments = serde_json::from_value(json!({"message": format!("m{i}")})).ok();
    p
}

fn batch(n: usize) -> Batch {
    let calls = (0..n)
        .map(|i| {
            Call::new(
                format!("c{i}"),
                "ev.echo",
                json!({"message": format!("m{i}")}),
            )
        })
        .collect();
    Batch::new("bench", calls).expect("batch")
}

fn per_call(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let endpoint = mcp::everything_stdio("");
    let kernel = Kernel::builder()
        .tool(mcp::unresolved_tool(mcp::mcp_manifest(
            "ev.echo",
            &endpoint,
            json!({}),
        )))
        .build()
        .expect("kernel");
    // Start Sluice's session before measuring.
    rt.block_on(kernel.run(batch(1))).expect("warm");
    let bare = rt.block_on(async {
        let cmd = tokio::process::Command::new(mcp::everything_bin());
        let transport = TokioChildProcess::new(cmd).expect("server starts");
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("bench", "0"),
        )
        .serve(transport)
        .await
        .expect("handshake")
    });
    let peer = bare.peer().clone();

    for n in [1usize, 50] {
        let mut group = c.benchmark_group(format!("mcp/echo_stdio_x{n}"));
        group.bench_function("sluice_mcp_tool", |b| {
            b.iter_batched(
                || batch(n),
                |batch| rt.block_on(kernel.run(batch)).expect("runs"),
                BatchSize::SmallInput,
            )
        });
        group.bench_function("bare_rmcp", |b| {
            b.iter(|| {
                rt.block_on(futures::future::join_all(
                    (0..n).map(|i| peer.call_tool(echo_params(i))),
                ))
            })
        });
        group.finish();
    }
    drop(peer);
    rt.block_on(async move {
        let _ = bare.cancel().await;
    });
}

criterion_group!(benches, per_call);
criterion_main!(benches);
