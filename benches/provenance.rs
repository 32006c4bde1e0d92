#![allow(missing_docs)]
//! Provenance benchmark (issue: the provenance log): records appended per second by the
//! hash-chained log in buffered mode and in durable group-commit mode (64 appends in flight, as
//! concurrent calls produce them), against a plain `BufWriter` writing the same records as JSON
//! lines without hashing (the floor), and against one `fsync` per record (the naive durable log).
//!
//! Run: `cargo bench --bench provenance`. Throughput is records per second.

use std::io::Write;
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sluice::kernel::provenance::{AccessRecord, CallRecord, Record};
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

criterion_group!(benches, appends);
criterion_main!(benches);
