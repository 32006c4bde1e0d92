#![allow(missing_docs)]
//! Policy benchmark (issue: the policy engine): access decisions for 1,000 tenants x 200 rules,
//! half with literal resources and half with patterns, by the indexed engine and by the naive
//! linear scan of the same rules, in the same run.
//!
//! Run: `cargo bench --bench policy`. Throughput is per access decision.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde_json::json;
use sluice::kernel::access::{Access, Pattern};
use sluice::kernel::model::EffectKind;
use sluice::policy::{PolicyDocument, PolicyEngine};
use std::hint::black_box;

const TENANTS: usize = 1_000;
const RULES: usize = 200;
const KINDS: [&str; 4] = ["reads", "writes", "deletes", "network"];

fn document() -> PolicyDocument {
    let mut tenants = serde_json::Map::new();
    for t in 0..TENANTS {
        let rules: Vec<_> = (0..RULES)
            .map(|r| {
                let resource = if r % 2 == 0 {
                    format!("kv:t{t}/key{r}")
                } else {
                    format!("fs:/repo{}/dir{}/*", r % 17, r % 23)
                };
                let decision = match r % 10 {
                    0 => "deny",
                    1 => "ask",
                    _ => "allow",
                };
                json!({"id": format!("r{r}"), "decision": decision,
                       "effects": [KINDS[r % 4]], "resource": resource})
            })
            .collect();
        tenants.insert(format!("t{t}"), json!({"default": "deny", "rules": rules}));
    }
    PolicyDocument::from_value(&json!({"tenants": tenants})).expect("the bench policy is valid")
}

fn accesses() -> Vec<(String, Access)> {
    (0..1_000)
        .map(|i| {
            let t = (i * 7919) % TENANTS;
            let r = (i * 31) % RULES;
            let resource = match i % 3 {
                0 => format!("kv:t{t}/key{r}"),
                1 => format!("fs:/repo{}/dir{}/src/main.rs", r % 17, r % 23),
                _ => format!("kv:t{t}/other{i}"),
            };
            let kind = EffectKind::parse(KINDS[i % 4]).expect("a kind");
            (
                format!("t{t}"),
                Access::new(kind, Pattern::parse(&resource).expect("a pattern")),
            )
        })
        .collect()
}

fn decisions(c: &mut Criterion) {
    let doc = document();
    let engine = PolicyEngine::new(doc.clone());
    let accesses = accesses();
    let mut group = c.benchmark_group("policy/1000_tenants_x_200_rules");
    group.throughput(Throughput::Elements(accesses.len() as u64));
    group.bench_function("indexed", |b| {
        b.iter(|| {
            for (tenant, a) in &accesses {
                black_box(engine.decide_access(tenant, "acme.tool", a.kind, &a.resource));
            }
        })
    });
    group.bench_function("linear", |b| {
        b.iter(|| {
            for (tenant, a) in &accesses {
                let t = &doc.tenants[tenant.as_str()];
                black_box(sluice::policy::linear::decide_access(t, "acme.tool", a));
            }
        })
    });
    group.finish();
}

criterion_group!(benches, decisions);
criterion_main!(benches);
