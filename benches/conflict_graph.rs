#![allow(missing_docs)]
//! Conflict-graph benchmarks (issue: resource patterns and the conflict graph).
//!
//! (a) exact keys: 1,000 and 10,000 calls x 1-3 accesses over a zipf-skewed key space (70% reads),
//!     Sluice's incremental index, and the full petgraph-backed `ConflictGraph`, against the
//!     `prio-graph` crate (Solana Agave's scheduler graph) inserting the same transactions with the
//!     same string keys;
//! (b) the same with 10% of accesses replaced by wildcard patterns (`kv:bucket7/*`);
//! (c) a typical agent batch, 8 calls x 3 accesses, planned end to end (resolve, validate the
//!     input, compute accesses, build the graph).
//!
//! Run: `cargo bench --bench conflict_graph`. Throughput is reported per (call, access).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use prio_graph::{AccessKind, PrioGraph, TopLevelId};
use serde_json::json;
use sluice::kernel::access::{Access, Normalizers, Pattern};
use sluice::kernel::model::{EffectKind, Manifest, ManifestSource};
use sluice::kernel::order::{ConflictGraph, ConflictIndex, Plan};
use sluice::kernel::transport::{Tool, ToolRegistry};
use sluice::kernel::Batch;
use std::hint::black_box;

/// A small deterministic generator (xorshift64*), so both builders see identical batches.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Zipf(s = 1.0) over `n` ranks, by inverse CDF.
struct Zipf(Vec<f64>);

impl Zipf {
    fn new(n: usize) -> Self {
        let mut cdf = Vec::with_capacity(n);
        let mut acc = 0.0;
        for k in 1..=n {
            acc += 1.0 / k as f64;
            cdf.push(acc);
        }
        for c in &mut cdf {
            *c /= acc;
        }
        Zipf(cdf)
    }
    fn sample(&self, rng: &mut Rng) -> usize {
        let u = rng.unit();
        self.0.partition_point(|c| *c < u).min(self.0.len() - 1)
    }
}

struct Workload {
    /// Per call: (key text, pattern, is_write).
    calls: Vec<Vec<(&'static str, Pattern, bool)>>,
    accesses: usize,
}

/// `n` calls of 1-3 accesses; keys `kv:bucket{b}/{i}` over 4,096 keys in 64 buckets, zipf-ranked;
/// `wild` is the share of accesses that become `kv:bucket{b}/*`.
fn workload(n: usize, wild: f64, seed: u64) -> Workload {
    let mut rng = Rng(seed);
    let zipf = Zipf::new(4096);
    let keys: Vec<&'static str> = (0..4096)
        .map(|i| &*Box::leak(format!("kv:bucket{}/{}", i % 64, i).into_boxed_str()))
        .collect();
    let wilds: Vec<&'static str> = (0..64)
        .map(|b| &*Box::leak(format!("kv:bucket{b}/*").into_boxed_str()))
        .collect();
    let mut accesses = 0;
    let calls = (0..n)
        .map(|_| {
            let k = 1 + (rng.next() % 3) as usize;
            accesses += k;
            (0..k)
                .map(|_| {
                    let rank = zipf.sample(&mut rng);
                    let write = rng.unit() < 0.3;
                    let text = if rng.unit() < wild {
                        wilds[rank % 64]
                    } else {
                        keys[rank]
                    };
                    (
                        text,
                        Pattern::parse(text).expect("bench patterns parse"),
                        write,
                    )
                })
                .collect()
        })
        .collect();
    Workload { calls, accesses }
}

fn to_accesses(w: &Workload) -> Vec<Vec<Access>> {
    w.calls
        .iter()
        .map(|c| {
            c.iter()
                .map(|(_, p, write)| {
                    let kind = if *write {
                        EffectKind::Writes
                    } else {
                        EffectKind::Reads
                    };
                    Access::new(kind, p.clone())
                })
                .collect()
        })
        .collect()
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Earliest(std::cmp::Reverse<usize>);

impl TopLevelId<usize> for Earliest {
    fn id(&self) -> usize {
        self.0 .0
    }
}

fn exact_keys(c: &mut Criterion) {
    for (label, wild) in [("exact", 0.0), ("wildcard10", 0.1)] {
        let mut group = c.benchmark_group(format!("conflict_graph/{label}"));
        for n in [1_000usize, 10_000] {
            let w = workload(n, wild, 42 + n as u64);
            let calls = to_accesses(&w);
            group.throughput(Throughput::Elements(w.accesses as u64));
            group.bench_with_input(BenchmarkId::new("sluice_index", n), &calls, |b, calls| {
                // The edges as the dispatch path takes them (`insert_compact`: an edge caused
                // by the call's own access names it); `sluice_graph` keeps every edge resolved.
                let mut edges = Vec::with_capacity(calls.len() * 2);
                b.iter(|| {
                    let mut index = ConflictIndex::new();
                    edges.clear();
                    for (i, c) in calls.iter().enumerate() {
                        index.insert_compact(i, c, &mut edges);
                    }
                    black_box(edges.len())
                })
            });
            group.bench_with_input(BenchmarkId::new("sluice_graph", n), &calls, |b, calls| {
                b.iter(|| {
                    let mut g = ConflictGraph::new();
                    for c in calls {
                        g.add_call(c);
                    }
                    black_box(g.len())
                })
            });
            if wild == 0.0 {
                group.bench_with_input(BenchmarkId::new("prio_graph", n), &w, |b, w| {
                    b.iter(|| {
                        let mut g =
                            PrioGraph::new(|id: &usize, _| Earliest(std::cmp::Reverse(*id)));
                        for (i, c) in w.calls.iter().enumerate() {
                            g.insert_transaction(
                                i,
                                c.iter().map(|(k, _, write)| {
                                    (
                                        *k,
                                        if *write {
                                            AccessKind::Write
                                        } else {
                                            AccessKind::Read
                                        },
                                    )
                                }),
                            );
                        }
                        black_box(g.is_empty())
                    })
                });
            }
        }
        group.finish();
    }
}

fn agent_batch(c: &mut Criterion) {
    let tool = |id: &str, effects: serde_json::Value, mutating: bool| {
        let m = Manifest::from_value(json!({
            "id": id, "description": "bench tool", "version": "1.0.0",
            "input": {"type": "object", "properties": {"path": {"type": "string"},
                      "key": {"type": "string"}, "q": {"type": "string"}}},
            "output": {"type": "object"}, "mutating": mutating, "effects": effects
        }))
        .expect("bench manifest parses");
        Tool::new(m, ManifestSource::built_in(), None).expect("bench manifest compiles")
    };
    let mut registry = ToolRegistry::new();
    for t in [
        tool(
            "fs.read",
            json!([{"kind": "reads", "resource": "fs:/repo/{path}"},
                              {"kind": "reads", "resource": "meta:{path}"},
                              {"kind": "network", "resource": "net:none"}]),
            false,
        ),
        tool(
            "fs.edit",
            json!([{"kind": "reads", "resource": "fs:/repo/{path}"},
                              {"kind": "writes", "resource": "fs:/repo/{path}"},
                              {"kind": "emits-event", "resource": "events:edits"}]),
            true,
        ),
        tool(
            "search",
            json!([{"kind": "reads", "resource": "fs:/repo/*"},
                              {"kind": "reads", "resource": "index:{q}"},
                              {"kind": "network", "resource": "net:none"}]),
            false,
        ),
        tool(
            "mem.put",
            json!([{"kind": "reads", "resource": "memory:{key}"},
                               {"kind": "writes", "resource": "memory:{key}"},
                               {"kind": "emits-event", "resource": "events:memory"}]),
            true,
        ),
    ] {
        registry.insert(t).expect("bench tools register");
    }
    let batch = Batch::from_value(&json!({"tenant": "acme", "calls": [
        {"id": "1", "tool": "fs.read", "input": {"path": "src/main.rs"}},
        {"id": "2", "tool": "fs.read", "input": {"path": "src/lib.rs"}},
        {"id": "3", "tool": "search", "input": {"q": "fn main"}},
        {"id": "4", "tool": "fs.edit", "input": {"path": "src/lib.rs"}},
        {"id": "5", "tool": "fs.edit", "input": {"path": "src/lib.rs"}},
        {"id": "6", "tool": "fs.edit", "input": {"path": "README.md"}},
        {"id": "7", "tool": "mem.put", "input": {"key": "facts"}},
        {"id": "8", "tool": "fs.read", "input": {"path": "Cargo.toml"}}
    ]}))
    .expect("bench batch parses");
    let norm = Normalizers::default();
    let mut group = c.benchmark_group("conflict_graph/agent_batch");
    group.throughput(Throughput::Elements(24));
    group.bench_function("plan_8_calls_x_3_accesses", |b| {
        b.iter_batched(
            || batch.clone(),
            |batch| black_box(Plan::new(&registry, &norm, batch).graph.len()),
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, exact_keys, agent_batch);
criterion_main!(benches);
