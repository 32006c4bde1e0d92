//! The JSON shapes of docs/cli.md, built once for the CLI and the gateway: a plan (`sluice plan
//! --format json`, `POST /v1/plan`) and a batch's results (`sluice run --format json`,
//! `POST /v1/run`).

use std::time::Duration;

use serde_json::{json, Value};

use super::schema::strip_optional_nulls;
use crate::authorize::Authorization;
use crate::model::Batch;
use crate::order::Plan;
use crate::run::{BatchResult, CallResult};
use crate::transport::ToolRegistry;

/// The plan as cli.md's JSON.
pub fn plan_json(plan: &Plan, auth: Option<&[Authorization]>) -> Value {
    let calls: Vec<Value> = plan
        .calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let accesses: Vec<Value> = c
                .accesses
                .iter()
                .map(|a| {
                    json!({"kind": a.kind.as_str(), "resource": a.resource.to_text(),
                           "mode": a.mode().as_str()})
                })
                .collect();
            let mut v = json!({"id": c.call.id, "tool": c.call.tool,
                               "version": c.tool.as_ref().map(|t| t.manifest().version.as_str()),
                               "read_only": c.is_read_only(), "accesses": accesses});
            if let Some(a) = auth.and_then(|a| a.get(i)) {
                let decision = json!({"decision": a.decision.as_str(), "by": a.by});
                super::common::set(&mut v, "authorization", decision);
            }
            v
        })
        .collect();
    let edges: Vec<Value> = plan
        .graph
        .edges()
        .iter()
        .map(|e| {
            json!({"from": plan.call_id(e.from), "to": plan.call_id(e.to),
                   "resource": e.resource.to_text(), "kind": e.kind.as_str()})
        })
        .collect();
    let waves: Vec<Vec<&str>> = plan
        .graph
        .waves()
        .iter()
        .map(|w| w.iter().map(|&i| plan.call_id(i)).collect())
        .collect();
    let critical = plan.critical_path_ids();
    json!({"tenant": plan.tenant, "calls": calls, "edges": edges, "waves": waves,
           "critical_path": critical})
}

/// Milliseconds with microsecond precision.
pub fn ms(d: Duration) -> f64 {
    (d.as_micros() as f64) / 1000.0
}

/// One result as cli.md's JSON.
pub fn result_json(r: &CallResult) -> Value {
    let mut v = json!({
        "id": r.id,
        "tool": r.tool,
        "version": r.version,
        "status": r.status.as_str(),
        "output": r.output,
        "error": r.error.as_ref().map(|e| json!({"code": e.code, "message": e.message})),
        "started_ms": r.started.map(ms),
        "ended_ms": r.ended.map(ms),
    });
    if let Some(recorded) = r.recorded {
        super::common::set(&mut v, "recorded", json!(recorded));
    }
    v
}

/// A `null` an OpenAI model gave for an optional property that does not take `null` is how
/// strict mode says "absent": read so, when that makes the input valid (otherwise the input is
/// left as it came, for the schema check to name).
pub fn absent_for_null(batch: &mut Batch, registry: &ToolRegistry) {
    for call in &mut batch.calls {
        let Some(tool) = registry.get(&call.tool) else {
            continue;
        };
        if tool.check_input(&call.input).is_ok() {
            continue;
        }
        let mut input = call.input.clone();
        strip_optional_nulls(&mut input, &Value::Object(tool.manifest().input.clone()));
        if tool.check_input(&input).is_ok() {
            call.input = input;
        }
    }
}

/// The batch result as cli.md's JSON.
pub fn run_json(result: &BatchResult) -> Value {
    json!({
        "results": result.results.iter().map(result_json).collect::<Vec<_>>(),
        "makespan_ms": ms(result.makespan),
    })
}
