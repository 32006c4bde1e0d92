#![allow(missing_docs)]
//! Provenance benchmark (issue: the provenance log): records appended per second by the
//! hash-chained log in buffered mode and in durable group-commit mode (64 appends in flight, as
//! concurrent calls produce them), against a plain `BufWriter` writing the same records as JSON
//! lines without hashing (the floor), and against one `fsync` per record (the naive durable log).
//!
//! Also the open of a 1,000,000-record log (calls writing and reading 10,000 distinct resources,
//! with their edges): time and peak memory (the child process's `VmHWM`), each open in a fresh
//! child process so that one open's peak does not hide the next.
//!
//! Run: `cargo bench --bench provenance`. Throughput is records per second.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::io::Write;
use std::path::PathBuf;

use criterion::{criterion_group, Criterion, Throughput};
use sluice::kernel::provenance::{AccessRecord, CallRecord, EdgeRecord, Record};
use sluice::kernel::Status;
use sluice::provenance::{Durability, ProvenanceLog};

fn record(i: u64) -> Record {
    Record::Call(CallRecord {
        batch: "b-bench".into(),
        tenant: "acme".into(),
        call: format!("c{i}"),
        tool: "acme.kv-put".into(),
        tool_version: Some("1.0.0".into()),
        input_sha256: "a".repeat(64),
        output_sha256: Some("b".repeat(64)),
        accesses: vec![AccessRecord {
            kind: "writes".into(),
            resource: format!("kv:users/{i}"),
            mode: "write".into(),
        }],
        decision: Some("allow".into()),
        decided_by: Some("write-kv".into()),
        approver: None,
        started_at_ms: Some(1.0e12 + i as f64),
        ended_at_ms: Some(1.0e12 + i as f64 + 3.5),
        outcome: Status::Ok,
        error_code: None,
        error_message: None,
    })
}

fn fresh(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-bench-prov-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("bench dir");
    let p = dir.join(name);
    let _ = std::fs::remove_file(&p);
    p
}

fn appends(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("provenance/append");
    group.sample_size(10);

    const FAST: u64 = 10_000;
    group.throughput(Throughput::Elements(FAST));
    group.bench_function("bufwriter_floor", |b| {
        b.iter(|| {
            let path = fresh("floor.jsonl");
            let mut w = std::io::BufWriter::new(std::fs::File::create(&path).expect("file"));
            for i in 0..FAST {
                serde_json::to_writer(&mut w, &record(i)).expect("serializes");
                w.write_all(b"\n").expect("writes");
            }
            w.flush().expect("flushes");
        })
    });
    group.bench_function("sluice_buffered", |b| {
        b.iter(|| {
            let path = fresh("buffered.jsonl");
            let log = ProvenanceLog::open(&path, Durability::Buffered).expect("log");
            for i in 0..FAST {
                drop(log.append(record(i)));
            }
            log.close();
        })
    });

    const DURABLE: u64 = 500;
    group.throughput(Throughput::Elements(DURABLE));
    group.bench_function("sluice_durable_group_commit", |b| {
        b.iter(|| {
            let path = fresh("durable.jsonl");
            let log = ProvenanceLog::open(&path, Durability::Durable).expect("log");
            rt.block_on(async {
                let mut in_flight = std::collections::VecDeque::new();
                for i in 0..DURABLE {
                    in_flight.push_back(log.append(record(i)));
                    if in_flight.len() >= 64 {
                        let ack = in_flight.pop_front().expect("one in flight");
                        ack.await.expect("acked").expect("written");
                    }
                }
                for ack in in_flight {
                    ack.await.expect("acked").expect("written");
                }
            });
            log.close();
        })
    });
    group.bench_function("naive_fsync_per_record", |b| {
        b.iter(|| {
            let path = fresh("naive.jsonl");
            let mut f = std::fs::File::create(&path).expect("file");
            for i in 0..DURABLE {
                let mut line = serde_json::to_vec(&record(i)).expect("serializes");
                line.push(b'\n');
                f.write_all(&line).expect("writes");
                f.sync_data().expect("syncs");
            }
        })
    });
    group.finish();
}

/// Records in the log the open benchmark opens.
const OPEN_RECORDS: u64 = 1_000_000;
/// The environment variable that makes this binary the child that opens one log.
const CHILD: &str = "SLUICE_BENCH_OPEN_CHILD";

/// The log the open benchmark opens: calls that write and read 10,000 distinct resources, each
/// read with the edge from its resource's last writer.
fn open_fixture() -> PathBuf {
    let path = fresh("open-1m.jsonl");
    let log = ProvenanceLog::open(&path, Durability::Buffered).expect("log");
    let mut n = 0u64;
    let mut i = 0u64;
    while n < OPEN_RECORDS {
        let mut r = record(i);
        if let Record::Call(c) = &mut r {
            c.call = format!("c{i}");
            c.batch = format!("b{}", i / 100);
            c.accesses[0].resource = format!("kv:users/{}", i % 10_000);
            if i % 2 == 1 {
                c.accesses[0].kind = "reads".into();
                c.accesses[0].mode = "read".into();
                drop(log.append(Record::Edge(EdgeRecord {
                    tenant: "acme".into(),
                    from_batch: format!("b{}", (i - 1) / 100),
                    from: format!("c{}", i - 1),
                    to_batch: c.batch.clone(),
                    to: c.call.clone(),
                    resource: c.accesses[0].resource.clone(),
                    kind: "read-after-write".into(),
                    causal: true,
                })));
                n += 1;
            }
        }
        drop(log.append(r));
        n += 1;
        i += 1;
    }
    log.close();
    path
}

/// The child: opens the log once, prints `seconds peak_kib`.
fn open_child(path: &str) {
    let started = std::time::Instant::now();
    let log = ProvenanceLog::open(std::path::Path::new(path), Durability::Durable).expect("open");
    let secs = started.elapsed().as_secs_f64();
    assert!(log.opened().records >= OPEN_RECORDS);
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let peak = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0);
    println!("{secs} {peak}");
}

fn open_1m() {
    let path = open_fixture();
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let mut runs = Vec::new();
    for _ in 0..3 {
        let out = std::process::Command::new(std::env::current_exe().expect("bench binary"))
            .env(CHILD, &path)
            .output()
            .expect("child runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut it = text.split_whitespace();
        let secs: f64 = it
            .next()
            .and_then(|s| s.parse().ok())
            .expect("child prints time");
        let kib: u64 = it
            .next()
            .and_then(|s| s.parse().ok())
            .expect("child prints peak");
        runs.push((secs, kib));
    }
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (secs, kib) = runs[1];
    println!(
        "provenance/open_1m: {OPEN_RECORDS} records, {:.0} MiB on disk: median open {secs:.2} s, \
         peak memory {:.0} MiB (runs: {runs:?})",
        size as f64 / 1048576.0,
        kib as f64 / 1024.0
    );
    let _ = std::fs::remove_file(&path);
}

/// Calls through a kernel whose log is durable: what recording costs a call end to end (under
/// durable first, its intent too, before the handler starts). Independent no-op writes, 64 in
/// one batch (group commit shares the syncs), and single-call batches one after another (a
/// lone call pays its syncs alone).
fn kernel_durable(c: &mut Criterion) {
    use serde_json::{json, Value};
    use sluice::kernel::transport::{handler, ToolContext};
    use sluice::kernel::{Batch, Call, Kernel};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let kernel = |log: &std::sync::Arc<ProvenanceLog>| {
        let manifest = sluice::kernel::model::Manifest::from_value(json!({
            "id": "b.write", "description": "writes x:{key}", "version": "1.0.0",
            "input": {"type": "object"}, "output": {}, "mutating": true,
            "effects": [{"kind": "writes", "resource": "x:{key}"}]}))
        .expect("manifest");
        let tool = sluice::kernel::transport::Tool::new(
            manifest,
            sluice::kernel::model::ManifestSource::built_in(),
            Some(handler(|_ctx: ToolContext, _input: Value| async {
                Ok(json!({}))
            })),
        )
        .expect("tool");
        Kernel::builder()
            .tool(tool)
            .provenance_arc(log.clone())
            .build()
            .expect("kernel")
    };
    let mut group = c.benchmark_group("provenance/kernel_durable");
    group.sample_size(10);
    const BATCH: u64 = 64;
    group.throughput(Throughput::Elements(BATCH));
    group.bench_function("batch_of_64_independent", |b| {
        b.iter(|| {
            let path = fresh("kernel-batch.jsonl");
            let log =
                std::sync::Arc::new(ProvenanceLog::open(&path, Durability::Durable).expect("log"));
            let k = kernel(&log);
            rt.block_on(async {
                let calls = (0..BATCH)
                    .map(|i| Call::new(format!("c{i}"), "b.write", json!({"key": i})))
                    .collect();
                let out = k.run(Batch::new("acme", calls).expect("batch")).await;
                assert!(out
                    .expect("ran")
                    .results
                    .iter()
                    .all(|r| r.recorded == Some(true)));
            });
            // Dropping the kernel and the last handle closes the log (written, synced).
            drop(k);
            drop(log);
        })
    });
    const LONE: u64 = 32;
    group.throughput(Throughput::Elements(LONE));
    group.bench_function("lone_calls_in_sequence", |b| {
        b.iter(|| {
            let path = fresh("kernel-lone.jsonl");
            let log =
                std::sync::Arc::new(ProvenanceLog::open(&path, Durability::Durable).expect("log"));
            let k = kernel(&log);
            rt.block_on(async {
                for i in 0..LONE {
                    let call = Call::new(format!("c{i}"), "b.write", json!({"key": i}));
                    let out = k.run(Batch::new("acme", vec![call]).expect("batch")).await;
                    assert_eq!(out.expect("ran").results[0].recorded, Some(true));
                }
            });
            drop(k);
            drop(log);
        })
    });
    group.finish();
}

criterion_group!(benches, appends, kernel_durable);

fn main() {
    if let Ok(path) = std::env::var(CHILD) {
        open_child(&path);
        return;
    }
    // `cargo bench --bench provenance -- <filter>` runs only the matching criterion benches;
    // the open is measured when no filter is given or the filter names it.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if filter
        .as_deref()
        .is_none_or(|f| "provenance/open_1m".contains(f))
    {
        open_1m();
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
