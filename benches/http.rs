#![allow(missing_docs)]
//! HTTP-tool benchmark (issue: declarative HTTP tools): the per-call cost of an HTTP tool through
//! the whole pipeline against a loopback server, compared with a bare reqwest request to the same
//! server in the same run.
//!
//! Run: `cargo bench --bench http`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[path = "../tests/support/http_server.rs"]
mod http_server;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use serde_json::json;
use sluice::kernel::model::{Manifest, ManifestSource};
use sluice::kernel::run::Kernel;
use sluice::kernel::transport::Tool;
use sluice::kernel::{Batch, Call};

fn per_call(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let server = rt.block_on(http_server::start());
    let url = server.url("/echo/{id}");
    let manifest = Manifest::from_value(json!({"id": "b.http", "description": "bench",
        "version": "1.0.0", "input": {"type": "object"}, "output": {}, "mutating": false,
        "effects": [], "spec": {"kind": "http", "method": "GET", "urlTemplate": url}}))
    .expect("manifest");
    let kernel = Kernel::builder()
        .tool(Tool::new(manifest, ManifestSource::built_in(), None).expect("tool"))
        .build()
        .expect("kernel");
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .expect("client");
    let bare = server.url("/echo/7");

    let mut group = c.benchmark_group("http/one_call_loopback");
    group.bench_function("sluice_http_tool", |b| {
        b.iter_batched(
            || {
                Batch::new("bench", vec![Call::new("c", "b.http", json!({"id": "7"}))])
                    .expect("batch")
            },
            |batch| rt.block_on(kernel.run(batch)).expect("runs"),
            BatchSize::SmallInput,
        )
    });
    group.bench_function("bare_reqwest", |b| {
        b.iter(|| {
            rt.block_on(async {
                let r = client.get(&bare).send().await.expect("sent");
                let bytes = r.bytes().await.expect("body");
                serde_json::from_slice::<serde_json::Value>(&bytes).expect("json")
            })
        })
    });
    group.finish();
}

criterion_group!(benches, per_call);
criterion_main!(benches);
