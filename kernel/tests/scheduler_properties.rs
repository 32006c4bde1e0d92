//! Property tests of the scheduler, run for real on tokio:
//! - serializability: random kv batches with random delays give the reads and final store of
//!   serial execution in submission order;
//! - conflicting calls' execution intervals never overlap;
//! - no false waits: a call never waits for a call it is not ordered after (a call that did would
//!   deadlock here, since the unrelated calls wait for it to start);
//! - a failing or panicking call changes no independent call's outcome;
//! - cancelling mid-batch leaves no handler running.
//!
//! Case counts are small by default (each case runs a batch); `PROPTEST_CASES` raises them.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::{json, Value};
use sluice_kernel::builtin::{self, BuiltinConfig, KvStore};
use sluice_kernel::order::naive_edges;
use sluice_kernel::run::Kernel;
use sluice_kernel::transport::{handler, ToolContext, ToolError};
use sluice_kernel::{Batch, Call, Status};

fn cases(default: u32) -> ProptestConfig {
    let n = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    ProptestConfig::with_cases(n)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
}

#[derive(Debug, Clone)]
enum Op {
    Get(u8),
    Put(u8, i64),
    Incr(u8, i64),
    Delete(u8),
}

fn op() -> impl Strategy<Value = (Op, u64)> {
    let key = 0u8..4;
    (
        prop_oneof![
            key.clone().prop_map(Op::Get),
            (key.clone(), -5i64..5).prop_map(|(k, v)| Op::Put(k, v)),
            (key.clone(), 1i64..4).prop_map(|(k, v)| Op::Incr(k, v)),
            key.prop_map(Op::Delete),
        ],
        0u64..4,
    )
}

fn to_call(i: usize, op: &Op, delay: u64) -> Call {
    let (tool, input) = match op {
        Op::Get(k) => ("sluice.kv.get", json!({"key": format!("k{k}")})),
        Op::Put(k, v) => ("sluice.kv.put", json!({"key": format!("k{k}"), "value": v})),
        Op::Incr(k, by) => ("sluice.kv.incr", json!({"key": format!("k{k}"), "by": by})),
        Op::Delete(k) => ("sluice.kv.delete", json!({"key": format!("k{k}")})),
    };
    let mut input = input;
    input["delay_ms"] = json!(delay);
    Call::new(format!("c{i}"), tool, input)
}

/// The serial oracle: the outputs and final store of running the ops one by one.
fn serial(ops: &[Op]) -> (Vec<Value>, BTreeMap<String, Value>) {
    let mut store: BTreeMap<String, Value> = BTreeMap::new();
    let outputs = ops
        .iter()
        .map(|op| match op {
            Op::Get(k) => {
                let key = format!("k{k}");
                json!({"key": key, "value": store.get(&key).cloned().unwrap_or(Value::Null)})
            }
            Op::Put(k, v) => {
                let key = format!("k{k}");
                let prev = store.insert(key.clone(), json!(v)).unwrap_or(Value::Null);
                json!({"key": key, "previous": prev})
            }
            Op::Incr(k, by) => {
                let key = format!("k{k}");
                let cur = store.get(&key).and_then(Value::as_i64).unwrap_or(0);
                store.insert(key.clone(), json!(cur + by));
                json!({"key": key, "value": cur + by})
            }
            Op::Delete(k) => {
                let key = format!("k{k}");
                json!({"key": key, "existed": store.remove(&key).is_some()})
            }
        })
        .collect();
    (outputs, store)
}

proptest! {
    #![proptest_config(cases(24))]

    #[test]
    fn kv_batches_are_serializable_and_conflicts_never_overlap(
        ops in prop::collection::vec(op(), 1..14)
    ) {
        let kv = KvStore::new();
        let registry = builtin::registry(BuiltinConfig::new(std::env::temp_dir()).with_kv(kv.clone())).unwrap();
        let kernel = Kernel::builder().tools(registry).build().unwrap();
        let calls: Vec<Call> = ops.iter().enumerate().map(|(i, (op, d))| to_call(i, op, *d)).collect();
        let plan = kernel.plan(Batch::new("t", calls.clone()).unwrap());
        let result = rt().block_on(kernel.run(Batch::new("t", calls).unwrap())).unwrap();

        let just_ops: Vec<Op> = ops.iter().map(|(o, _)| o.clone()).collect();
        let (outputs, store) = serial(&just_ops);
        for (r, expected) in result.results.iter().zip(&outputs) {
            prop_assert_eq!(r.status, Status::Ok, "{:?}", r.error);
            prop_assert_eq!(r.output.as_ref().unwrap(), expected, "call {}", r.id);
        }
        let actual: BTreeMap<String, Value> = kv.tenant("t").snapshot().into_iter().collect();
        prop_assert_eq!(actual, store);

        // Conflicting calls never overlap in time.
        let accesses: Vec<_> = plan.calls.iter().map(|c| c.accesses.clone()).collect();
        for e in naive_edges(&accesses) {
            let (a, b) = (&result.results[e.from], &result.results[e.to]);
            prop_assert!(a.ended.unwrap() <= b.started.unwrap(),
                "{} and {} conflict on {} but overlap", a.id, b.id, e.resource);
        }
    }
}

/// A tool that reads and writes the resources its input names, and waits on a gate before it
/// ends: `{"reads": [..], "writes": [..], "gate": "name"}`.
struct Gates {
    started: HashMap<String, tokio::sync::watch::Sender<bool>>,
}

proptest! {
    #![proptest_config(cases(24))]

    #[test]
    fn a_call_never_waits_for_a_call_it_is_not_ordered_after(
        calls in prop::collection::vec(
            (prop::collection::vec(0u8..5, 0..3), prop::collection::vec(0u8..5, 0..2)), 2..10),
        pick in any::<prop::sample::Index>(),
    ) {
        // Call X is picked; every call unrelated to X (neither ancestor nor descendant) refuses
        // to end until X has started. A scheduler that made X wait for any of them (waves, a
        // global lock, a false edge) would deadlock; the test would then time out.
        let n = calls.len();
        let x = pick.index(n);
        let mut gates = Gates { started: HashMap::new() };
        let mut rxs = Vec::new();
        for i in 0..n {
            let (tx, rx) = tokio::sync::watch::channel(false);
            gates.started.insert(format!("c{i}"), tx);
            rxs.push(rx);
        }
        let gates = Arc::new(gates);
        let x_started = rxs[x].clone();
        let g = gates.clone();
        let h = handler(move |ctx: ToolContext, input: Value| {
            let g = g.clone();
            let x_started = x_started.clone();
            async move {
                if let Some(tx) = g.started.get(ctx.call_id()) {
                    let _ = tx.send(true);
                }
                if input["wait_for_x"] == true {
                    let mut rx = x_started;
                    while !*rx.borrow_and_update() {
                        if rx.changed().await.is_err() { break; }
                    }
                }
                Ok::<_, ToolError>(json!({}))
            }
        });
        let t = support::tool_with(json!({"id": "t.rw", "mutating": true, "effects": [
            {"kind": "reads", "resource": "r:{reads}"}, {"kind": "writes", "resource": "r:{writes}"}]}), h);
        let kernel = Kernel::builder().tool(t).build().unwrap();
        let batch_calls = |wait: &dyn Fn(usize) -> bool| -> Vec<Call> {
            calls.iter().enumerate().map(|(i, (r, w))| Call::new(format!("c{i}"), "t.rw", json!({
                "reads": r.iter().map(|k| format!("{k}")).collect::<Vec<_>>(),
                "writes": w.iter().map(|k| format!("{k}")).collect::<Vec<_>>(),
                "wait_for_x": wait(i)}))).collect()
        };
        let plan = kernel.plan(Batch::new("t", batch_calls(&|_| false)).unwrap());
        let accesses: Vec<_> = plan.calls.iter().map(|c| c.accesses.clone()).collect();
        let reach = support::reachability(n, naive_edges(&accesses).iter().map(|e| (e.from, e.to)));
        let unrelated: HashSet<usize> = (0..n).filter(|&i| i != x && !reach[i][x] && !reach[x][i]).collect();
        let batch = Batch::new("t", batch_calls(&|i| unrelated.contains(&i))).unwrap();
        let result = rt().block_on(async {
            tokio::time::timeout(Duration::from_secs(20), kernel.run(batch)).await
        });
        prop_assert!(result.is_ok(), "deadlock: call c{} waited for an unrelated call", x);
        let result = result.unwrap().unwrap();
        prop_assert!(result.results.iter().all(|r| r.status == Status::Ok));
    }

    #[test]
    fn failures_and_panics_change_no_independent_outcome(
        ops in prop::collection::vec(op(), 1..10),
        failing in prop::collection::vec(any::<bool>(), 10),
        panics in any::<bool>(),
    ) {
        // The same batch twice: once clean, once with some calls replaced by a tool that fails
        // (or panics) on the same resources. Calls that do not depend on a failing call must end
        // exactly as in the clean run.
        let run = |with_failures: bool| {
            let kv = KvStore::new();
            let mut reg = builtin::registry(BuiltinConfig::new(std::env::temp_dir()).with_kv(kv)).unwrap();
            let h = handler(move |_ctx: ToolContext, _input: Value| async move {
                if panics { panic!("boom"); }
                Err::<Value, _>(ToolError::new("broken", "this call fails on purpose"))
            });
            reg.insert(support::tool_with(json!({"id": "t.fail", "mutating": true,
                "input": {"type": "object"},
                "effects": [{"kind": "writes", "resource": "kv:{key}"}]}), h)).unwrap();
            let kernel = Kernel::builder().tools(reg).build().unwrap();
            let calls: Vec<Call> = ops.iter().enumerate().map(|(i, (op, d))| {
                let mut c = to_call(i, op, *d);
                if with_failures && failing[i] { c.tool = "t.fail".into(); }
                c
            }).collect();
            let plan = kernel.plan(Batch::new("t", calls.clone()).unwrap());
            let r = rt().block_on(kernel.run(Batch::new("t", calls).unwrap())).unwrap();
            (plan, r)
        };
        let (_, clean) = run(false);
        let (plan, broken) = run(true);
        let accesses: Vec<_> = plan.calls.iter().map(|c| c.accesses.clone()).collect();
        let reach = support::reachability(accesses.len(), naive_edges(&accesses).iter().map(|e| (e.from, e.to)));
        for i in 0..ops.len() {
            if failing[i] {
                prop_assert_eq!(broken.results[i].status, Status::Error);
                let code = &broken.results[i].error.as_ref().unwrap().code;
                prop_assert_eq!(code.as_str(), if panics { "panic" } else { "broken" });
                continue;
            }
            let depends_on_failure = (0..i).any(|j| failing[j] && reach[j][i]);
            if !depends_on_failure {
                prop_assert_eq!(&broken.results[i].status, &clean.results[i].status);
                prop_assert_eq!(&broken.results[i].output, &clean.results[i].output, "call c{}", i);
            }
        }
    }

    #[test]
    fn cancelling_mid_batch_leaves_no_handler_running(
        n in 2usize..12, cancel_after in 0u64..6, chain in any::<bool>()
    ) {
        let running = Arc::new(AtomicUsize::new(0));
        let r = running.clone();
        struct Guard(Arc<AtomicUsize>);
        impl Drop for Guard { fn drop(&mut self) { self.0.fetch_sub(1, Ordering::SeqCst); } }
        let h = handler(move |ctx: ToolContext, _input: Value| {
            let r = r.clone();
            async move {
                r.fetch_add(1, Ordering::SeqCst);
                let _g = Guard(r);
                tokio::time::sleep(Duration::from_millis(2)).await;
                // Some calls ignore cancellation and just go on sleeping: the kernel must stop them.
                if ctx.call_id().ends_with('1') { tokio::time::sleep(Duration::from_secs(60)).await; }
                Ok::<_, ToolError>(json!({}))
            }
        });
        let effects = if chain { json!([{"kind": "writes", "resource": "x:one"}]) } else { json!([]) };
        let t = support::tool_with(json!({"id": "t.slow", "mutating": chain, "effects": effects}), h);
        let kernel = Kernel::builder().tool(t).build().unwrap();
        let batch = Batch::new("t", (0..n).map(|i| Call::new(format!("c{i}"), "t.slow", json!({}))).collect()).unwrap();
        let result = rt().block_on(async {
            let handle = kernel.submit(batch).unwrap();
            tokio::time::sleep(Duration::from_millis(cancel_after)).await;
            handle.cancel();
            tokio::time::timeout(Duration::from_secs(20), handle.finish()).await
        });
        prop_assert!(result.is_ok(), "cancelled batch did not finish");
        let result = result.unwrap();
        prop_assert_eq!(running.load(Ordering::SeqCst), 0, "a handler is still running");
        prop_assert_eq!(result.results.len(), n);
        for r in &result.results {
            prop_assert!(matches!(r.status, Status::Ok | Status::Cancelled), "{:?}", r.status);
        }
        // The call that ignores cancellation cannot have finished: it was cancelled.
        prop_assert_eq!(result.results[1].status, Status::Cancelled);
    }
}
