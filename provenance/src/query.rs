//! Questions about a log: lineage, causes, and a W3C PROV-JSON export.
//!
//! Takes in: a checked log's records. Hands on: answers — which calls wrote resources overlapping a
//! pattern ([`lineage`]), which calls a call may have seen the writes of ([`why`]), and the whole
//! log as a PROV-JSON document ([`prov_json`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;
use serde_json::{json, Map, Value};
use sluice_kernel::access::Pattern;
use sluice_kernel::provenance::{BatchOrigin, CallRecord, EdgeRecord, Record};

/// A call, named by its batch and id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct CallKey {
    /// The batch.
    pub batch: String,
    /// The call id.
    pub call: String,
}

fn key(c: &CallRecord) -> CallKey {
    CallKey {
        batch: c.batch.clone(),
        call: c.call.clone(),
    }
}

/// The calls that wrote (any write-mode access) a resource overlapping `pattern`, in log order,
/// with the edges among them and from them.
#[derive(Debug, Clone, Serialize)]
pub struct Lineage {
    /// The pattern asked about.
    pub resource: String,
    /// The writers, in log order: who, what they wrote, outcome.
    pub writers: Vec<Value>,
    /// Conflict edges that touch a writer.
    pub edges: Vec<EdgeRecord>,
}

/// Answers a lineage question.
pub fn lineage(records: &[Record], pattern: &Pattern) -> Lineage {
    let mut writers = Vec::new();
    let mut keys = BTreeSet::new();
    for r in records {
        if let Record::Call(c) = r {
            let wrote: Vec<&str> = c
                .accesses
                .iter()
                .filter(|a| a.mode == "write")
                .filter(|a| Pattern::parse(&a.resource).is_ok_and(|p| p.overlaps(pattern)))
                .map(|a| a.resource.as_str())
                .collect();
            // A call that did not run changed nothing.
            if !wrote.is_empty() && c.started_at_ms.is_some() {
                keys.insert(key(c));
                writers.push(json!({"batch": c.batch, "call": c.call, "tool": c.tool,
                    "wrote": wrote, "outcome": c.outcome, "decided_by": c.decided_by,
                    "started_at_ms": c.started_at_ms, "ended_at_ms": c.ended_at_ms}));
            }
        }
    }
    let edges = records
        .iter()
        .filter_map(|r| match r {
            Record::Edge(e) => Some(e),
            _ => None,
        })
        .filter(|e| {
            keys.contains(&CallKey {
                batch: e.from_batch.clone(),
                call: e.from.clone(),
            }) || keys.contains(&CallKey {
                batch: e.to_batch.clone(),
                call: e.to.clone(),
            })
        })
        .cloned()
        .collect();
    Lineage {
        resource: pattern.to_text(),
        writers,
        edges,
    }
}

/// A call's causal ancestors: every call reachable backwards through read-after-write edges —
/// within its batch and, through the lineage the log keeps, from earlier batches and processes —
/// with the edge that links each one.
#[derive(Debug, Clone, Serialize)]
pub struct Why {
    /// The call asked about.
    pub call: CallKey,
    /// Its ancestors, nearest first, each with the edge through which it was reached.
    pub ancestors: Vec<Ancestor>,
    /// Present (and true) for a call that started and never finished as far as the log knows
    /// (its intent is there, its record is not): its effect is in doubt.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub outcome_unknown: bool,
}

/// A call that started and never finished as far as the log knows: its intent is in the log
/// (durable first), its outcome is not. After a crash, these are the effects in doubt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unfinished {
    /// Its batch.
    pub batch: String,
    /// Its id.
    pub call: String,
    /// Its tool.
    pub tool: String,
    /// The key its handler was given: ask the system it wrote to whether it applied it.
    pub idempotency_key: String,
    /// When it started (unix ms).
    pub started_at_ms: f64,
    /// The tenant.
    pub tenant: String,
}

/// The calls whose intent is in the log and whose record is not, in log order.
pub fn outcome_unknown(records: &[Record]) -> Vec<Unfinished> {
    let mut t = OutcomeTracker::default();
    records.iter().for_each(|r| t.add(r));
    t.unfinished()
}

/// [`outcome_unknown`] as a log is read, one record at a time: it keeps the intents and the
/// finished calls' keys, never the whole log.
#[derive(Debug, Default)]
pub struct OutcomeTracker {
    intents: Vec<Unfinished>,
    finished: std::collections::HashSet<(String, String)>,
}

impl OutcomeTracker {
    /// Takes one record in.
    pub fn add(&mut self, record: &Record) {
        match record {
            Record::Intent(i) => self.intents.push(Unfinished {
                batch: i.batch.clone(),
                call: i.call.clone(),
                tool: i.tool.clone(),
                idempotency_key: i.idempotency_key.clone(),
                started_at_ms: i.started_at_ms,
                tenant: i.tenant.clone(),
            }),
            Record::Call(c) => {
                self.finished.insert((c.batch.clone(), c.call.clone()));
            }
            _ => {}
        }
    }

    /// The calls whose intent it saw and whose record it did not, in log order.
    pub fn unfinished(self) -> Vec<Unfinished> {
        let finished = self.finished;
        self.intents
            .into_iter()
            .filter(|u| !finished.contains(&(u.batch.clone(), u.call.clone())))
            .collect()
    }
}

/// One ancestor: the read-after-write edge through which it was reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ancestor {
    /// The writer's batch.
    pub from_batch: String,
    /// The writer.
    pub from: String,
    /// The reader's batch.
    pub to_batch: String,
    /// The reader.
    pub to: String,
    /// One overlapping pattern that causes the edge.
    pub resource: String,
    /// Always `read-after-write`.
    pub kind: String,
}

impl From<&EdgeRecord> for Ancestor {
    fn from(e: &EdgeRecord) -> Self {
        Self {
            from_batch: e.from_batch.clone(),
            from: e.from.clone(),
            to_batch: e.to_batch.clone(),
            to: e.to.clone(),
            resource: e.resource.clone(),
            kind: e.kind.clone(),
        }
    }
}

/// One call that a `--call ID` names, with what tells it from the others of that id.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    /// Its batch (what `--batch` takes).
    pub batch: String,
    /// Its tool.
    pub tool: String,
    /// When it started (unix ms; `None` for a call that never started).
    pub started_at_ms: Option<f64>,
    /// Where its batch came from (the gateway's transport, connection, request, session and
    /// client), when the batch record says.
    pub origin: Option<BatchOrigin>,
}

impl std::fmt::Display for Candidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "--batch {} ({}", self.batch, self.tool)?;
        if let Some(ms) = self.started_at_ms.filter(|ms| ms.is_finite()) {
            write!(f, ", started {}", iso(ms))?;
        }
        if let Some(o) = &self.origin {
            write!(f, ", {}", o.transport)?;
            if let Some(c) = &o.client {
                write!(f, ", client {c}")?;
                if let Some(v) = &o.client_version {
                    write!(f, " {v}")?;
                }
            }
            for (name, v) in [
                ("connection", &o.connection),
                ("peer", &o.peer),
                ("request", &o.request),
                ("session", &o.session),
            ] {
                if let Some(v) = v {
                    write!(f, ", {name} {v}")?;
                }
            }
        }
        f.write_str(")")
    }
}

/// Every call with id `call` (in `batch`, when given), in log order, with its batch's origin.
pub fn candidates(records: &[Record], call: &str, batch: Option<&str>) -> Vec<Candidate> {
    let origins: HashMap<&str, &BatchOrigin> = records
        .iter()
        .filter_map(|r| match r {
            Record::Batch(b) => b.origin.as_ref().map(|o| (b.batch.as_str(), o)),
            _ => None,
        })
        .collect();
    let mut out: Vec<Candidate> = records
        .iter()
        .filter_map(|r| match r {
            Record::Call(c) if c.call == call && batch.is_none_or(|b| b == c.batch) => {
                Some(Candidate {
                    batch: c.batch.clone(),
                    tool: c.tool.clone(),
                    started_at_ms: c.started_at_ms,
                    origin: origins.get(c.batch.as_str()).map(|o| (*o).clone()),
                })
            }
            _ => None,
        })
        .collect();
    // A call that started and never finished is a call too.
    for u in outcome_unknown(records) {
        if u.call == call && batch.is_none_or(|b| b == u.batch) {
            out.push(Candidate {
                origin: origins.get(u.batch.as_str()).map(|o| (*o).clone()),
                batch: u.batch,
                tool: u.tool,
                started_at_ms: Some(u.started_at_ms),
            });
        }
    }
    out
}

/// Answers a why question for every call with id `call` (in `batch`, when given).
pub fn why(records: &[Record], call: &str, batch: Option<&str>) -> Vec<Why> {
    let mut into: HashMap<CallKey, Vec<&EdgeRecord>> = HashMap::new();
    for r in records {
        if let Record::Edge(e) = r {
            if e.causal {
                into.entry(CallKey {
                    batch: e.to_batch.clone(),
                    call: e.to.clone(),
                })
                .or_default()
                .push(e);
            }
        }
    }
    let mut targets: Vec<(CallKey, bool)> = records
        .iter()
        .filter_map(|r| match r {
            Record::Call(c) if c.call == call && batch.is_none_or(|b| b == c.batch) => {
                Some((key(c), false))
            }
            _ => None,
        })
        .collect();
    for u in outcome_unknown(records) {
        if u.call == call && batch.is_none_or(|b| b == u.batch) {
            targets.push((
                CallKey {
                    batch: u.batch,
                    call: u.call,
                },
                true,
            ));
        }
    }
    targets
        .into_iter()
        .map(|(target, outcome_unknown)| {
            let mut seen = BTreeSet::new();
            let mut queue = std::collections::VecDeque::from([target.clone()]);
            let mut ancestors = Vec::new();
            while let Some(k) = queue.pop_front() {
                for e in into.get(&k).into_iter().flatten() {
                    let from = CallKey {
                        batch: e.from_batch.clone(),
                        call: e.from.clone(),
                    };
                    if seen.insert(from.clone()) {
                        ancestors.push(Ancestor::from(*e));
                        queue.push_back(from);
                    }
                }
            }
            Why {
                call: target,
                ancestors,
                outcome_unknown,
            }
        })
        .collect()
}

fn activity_id(batch: &str, call: &str) -> String {
    format!("sluice:call/{batch}/{call}")
}

fn iso(ms: f64) -> String {
    // RFC 3339 in UTC from unix milliseconds, without a date library.
    let secs = (ms / 1000.0).floor() as i64;
    let millis = (ms - secs as f64 * 1000.0).round().clamp(0.0, 999.0) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (h, m, s) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}.{millis:03}Z")
}

/// The log as W3C PROV-JSON: calls as activities, resource versions as entities (one per write;
/// a resource read before any recorded write is its `initial` version), `wasGeneratedBy` from the
/// writes, `used` from each read to the versions its read-after-write edges name (across batches
/// too: the log records those edges), `wasInformedBy` for read-after-write edges, and approvers
/// (and tenants) as agents.
pub fn prov_json(records: &[Record]) -> Value {
    let mut activity = Map::new();
    let mut entity = Map::new();
    let mut agent = Map::new();
    let mut used = Map::new();
    let mut generated = Map::new();
    let mut informed = Map::new();
    let mut associated = Map::new();
    let mut n = 0usize;
    let mut rel = |prefix: &str| {
        n += 1;
        format!("_:{prefix}{n}")
    };
    let calls: BTreeMap<CallKey, &CallRecord> = records
        .iter()
        .filter_map(|r| match r {
            Record::Call(c) => Some((key(c), c)),
            _ => None,
        })
        .collect();
    for c in calls.values() {
        let id = activity_id(&c.batch, &c.call);
        let mut a = json!({"prov:type": "sluice:call", "sluice:tool": c.tool,
            "sluice:tenant": c.tenant, "sluice:outcome": c.outcome,
            "sluice:inputSha256": c.input_sha256});
        if let Some(o) = a.as_object_mut() {
            if let Some(s) = c.started_at_ms {
                o.insert("prov:startTime".into(), json!(iso(s)));
            }
            if let Some(e) = c.ended_at_ms {
                o.insert("prov:endTime".into(), json!(iso(e)));
            }
            if let Some(d) = &c.decision {
                o.insert("sluice:decision".into(), json!(d));
                o.insert("sluice:decidedBy".into(), json!(c.decided_by));
            }
        }
        activity.insert(id.clone(), a);
        let tenant = format!("sluice:tenant/{}", c.tenant);
        agent
            .entry(tenant.clone())
            .or_insert_with(|| json!({"prov:type": "prov:Organization"}));
        associated.insert(
            rel("assoc"),
            json!({"prov:activity": id, "prov:agent": tenant}),
        );
        if let Some(who) = &c.approver {
            let ag = format!("sluice:approver/{who}");
            agent
                .entry(ag.clone())
                .or_insert_with(|| json!({"prov:type": "prov:Person"}));
            associated.insert(
                rel("assoc"),
                json!({"prov:activity": id, "prov:agent": ag,
                "prov:role": "sluice:approver"}),
            );
        }
        if c.started_at_ms.is_none() {
            continue; // did not run: generated nothing, used nothing
        }
        for a in &c.accesses {
            if a.mode == "write" {
                let e = format!("sluice:resource/{}@{}/{}", a.resource, c.batch, c.call);
                entity.insert(
                    e.clone(),
                    json!({"prov:type": "sluice:resource-version",
                    "sluice:resource": a.resource}),
                );
                generated.insert(rel("gen"), json!({"prov:entity": e, "prov:activity": id}));
            }
        }
    }
    // Reads: the versions written by the calls behind the reader's read-after-write edges (within
    // its batch or, through lineage, from earlier batches) whose resource overlaps the read; a
    // read no such edge explains used the resource's `initial` version.
    let mut edges_into: HashMap<CallKey, Vec<&EdgeRecord>> = HashMap::new();
    for r in records {
        if let Record::Edge(e) = r {
            if !e.causal {
                continue;
            }
            let from = activity_id(&e.from_batch, &e.from);
            let to = activity_id(&e.to_batch, &e.to);
            informed.insert(
                rel("inf"),
                json!({"prov:informed": to, "prov:informant": from}),
            );
            edges_into
                .entry(CallKey {
                    batch: e.to_batch.clone(),
                    call: e.to.clone(),
                })
                .or_default()
                .push(e);
        }
    }
    for c in calls.values().filter(|c| c.started_at_ms.is_some()) {
        let id = activity_id(&c.batch, &c.call);
        let into = edges_into
            .get(&key(c))
            .map(Vec::as_slice)
            .unwrap_or_default();
        for a in c.accesses.iter().filter(|a| a.mode == "read") {
            let Ok(read) = Pattern::parse(&a.resource) else {
                continue;
            };
            let mut explained = false;
            let mut seen = BTreeSet::new();
            for e in into {
                let writer = CallKey {
                    batch: e.from_batch.clone(),
                    call: e.from.clone(),
                };
                let Some(w) = calls.get(&writer) else {
                    continue;
                };
                for wa in w.accesses.iter().filter(|wa| wa.mode == "write") {
                    if !Pattern::parse(&wa.resource).is_ok_and(|p| p.overlaps(&read)) {
                        continue;
                    }
                    explained = true;
                    let ent = format!("sluice:resource/{}@{}/{}", wa.resource, w.batch, w.call);
                    if seen.insert(ent.clone()) {
                        used.insert(rel("use"), json!({"prov:activity": id, "prov:entity": ent}));
                    }
                }
            }
            if !explained {
                let ent = format!("sluice:resource/{}@initial", a.resource);
                entity.entry(ent.clone()).or_insert_with(|| {
                    json!({"prov:type": "sluice:resource-version",
                    "sluice:resource": a.resource})
                });
                used.insert(rel("use"), json!({"prov:activity": id, "prov:entity": ent}));
            }
        }
    }
    json!({
        "prefix": {"sluice": "https://sluice.invalid/ns#"},
        "activity": activity,
        "entity": entity,
        "agent": agent,
        "used": used,
        "wasGeneratedBy": generated,
        "wasInformedBy": informed,
        "wasAssociatedWith": associated,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn iso_times() {
        assert_eq!(super::iso(0.0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::iso(1_764_676_800_123.0), "2025-12-02T12:00:00.123Z");
    }
}
