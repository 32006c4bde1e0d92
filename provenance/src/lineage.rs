//! Lineage across batches and processes: who last wrote each resource, per tenant.
//!
//! Takes in: call records in log order (on open, streaming; then each call as it is appended).
//! Hands on: for a call that reads, the `read-after-write` edges from the latest earlier writer of
//! each resource its reads overlap — writers of other batches, which the kernel's conflict domain
//! may have forgotten long ago or never known (another process wrote them).
//!
//! The state is one entry per distinct written resource (exact resources in a hash map, wildcard
//! patterns in a list), never one per record: a write replaces the entry of the same resource and
//! removes every entry its pattern contains (a later write that contains an earlier one
//! supersedes it). A call that did not run (no start time) wrote nothing and changes nothing.

use std::collections::HashMap;
use std::sync::Arc;

use sluice_kernel::access::Pattern;
use sluice_kernel::provenance::{CallRecord, EdgeRecord, Record};

/// The resource itself when its pattern text has no wildcard or escape (most do not): it then
/// matches exactly that text, and parsing it would only cost time.
fn exact_key(text: &str) -> Option<&str> {
    (!text.contains(['*', '?', '\\'])).then_some(text)
}

/// A writer: the batch and call.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Writer {
    batch: Arc<str>,
    call: Arc<str>,
}

/// One tenant's last writers.
#[derive(Debug, Default)]
struct Tenant {
    /// Exact resources, by their text.
    exact: HashMap<Box<str>, Writer>,
    /// Wildcard patterns, with their text.
    wild: Vec<(Pattern, Box<str>, Writer)>,
}

/// Every tenant's last writers.
#[derive(Debug, Default)]
pub struct LastWriters {
    tenants: HashMap<Box<str>, Tenant>,
}

impl LastWriters {
    /// Nobody wrote anything yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Distinct (tenant, resource) entries held.
    pub fn len(&self) -> usize {
        self.tenants
            .values()
            .map(|t| t.exact.len() + t.wild.len())
            .sum()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The lineage edges a call gets from writers of *other* batches: for each of its read
    /// accesses, one `read-after-write` edge from each latest writer of an overlapping resource,
    /// unless `known` (the kernel's own edges for the call) already links that writer to it.
    pub fn edges_for<'a>(
        &self,
        call: &CallRecord,
        known: impl Iterator<Item = &'a EdgeRecord> + Clone,
    ) -> Vec<EdgeRecord> {
        if !call.accesses.iter().any(|a| a.mode == "read") {
            return Vec::new();
        }
        let Some(t) = self.tenants.get(call.tenant.as_str()) else {
            return Vec::new();
        };
        let mut out: Vec<EdgeRecord> = Vec::new();
        let mut link = |w: &Writer, resource: &str| {
            if *w.batch == *call.batch {
                return; // the kernel ordered (and recorded) its own batch
            }
            let same = |e: &EdgeRecord| e.causal && e.from_batch == *w.batch && e.from == *w.call;
            let already = known.clone().any(same) || out.iter().any(same);
            if !already {
                out.push(EdgeRecord {
                    tenant: call.tenant.clone(),
                    from_batch: w.batch.to_string(),
                    from: w.call.to_string(),
                    to_batch: call.batch.clone(),
                    to: call.call.clone(),
                    resource: resource.to_owned(),
                    kind: "read-after-write".into(),
                    causal: true,
                });
            }
        };
        for a in call.accesses.iter().filter(|a| a.mode == "read") {
            match exact_key(&a.resource) {
                Some(key) => {
                    if let Some(w) = t.exact.get(key) {
                        link(w, &a.resource);
                    }
                    if !t.wild.is_empty() {
                        let read = Pattern::literal(key);
                        for (p, _, w) in &t.wild {
                            if p.overlaps(&read) {
                                link(w, &a.resource);
                            }
                        }
                    }
                }
                None => {
                    let Ok(read) = Pattern::parse(&a.resource) else {
                        continue;
                    };
                    for (key, w) in &t.exact {
                        if read.matches(key) {
                            link(w, &a.resource);
                        }
                    }
                    for (p, _, w) in &t.wild {
                        if p.overlaps(&read) {
                            link(w, &a.resource);
                        }
                    }
                }
            }
        }
        out
    }

    /// A group of records as a log keeps it: hands each record to `add` in order, each call
    /// preceded by the lineage edges it gets from other batches' writers (those the kernel did not
    /// already put before it in the group), and takes each call's writes in after it.
    pub fn add_group(&mut self, group: &[Record], mut add: impl FnMut(&Record)) {
        let mut start = 0;
        for (i, record) in group.iter().enumerate() {
            if let Record::Call(call) = record {
                // The kernel's own edges for this call: the records of its group before it.
                let known = group.iter().take(i).skip(start).filter_map(|r| match r {
                    Record::Edge(e) => Some(e),
                    _ => None,
                });
                for e in self.edges_for(call, known) {
                    add(&Record::Edge(e));
                }
                start = i + 1;
            }
            add(record);
            if let Record::Call(call) = record {
                self.apply(call);
            }
        }
    }

    /// One tenant's entries, as (resource, batch, call): what a store keeps so that a process
    /// can pick lineage up without reading the tenant's whole log ([`LastWriters::restore`]).
    pub fn entries(&self, tenant: &str) -> Vec<(String, String, String)> {
        let Some(t) = self.tenants.get(tenant) else {
            return Vec::new();
        };
        let row = |r: &str, w: &Writer| (r.to_owned(), w.batch.to_string(), w.call.to_string());
        t.exact
            .iter()
            .map(|(r, w)| row(r, w))
            .chain(t.wild.iter().map(|(_, r, w)| row(r, w)))
            .collect()
    }

    /// The last writer (batch, call) of exactly `resource`, as written (its text).
    pub fn writer_of(&self, tenant: &str, resource: &str) -> Option<(String, String)> {
        let t = self.tenants.get(tenant)?;
        t.exact
            .get(resource)
            .or_else(|| {
                t.wild
                    .iter()
                    .find(|(_, text, _)| &**text == resource)
                    .map(|(_, _, w)| w)
            })
            .map(|w| (w.batch.to_string(), w.call.to_string()))
    }

    /// Forgets one tenant's entries (before [`LastWriters::restore`]-ing them from a store).
    pub fn forget(&mut self, tenant: &str) {
        self.tenants.remove(tenant);
    }

    /// Puts back one entry that [`LastWriters::entries`] gave; a resource that is not a pattern
    /// is skipped.
    pub fn restore(&mut self, tenant: &str, resource: &str, batch: &str, call: &str) {
        let writer = Writer {
            batch: Arc::from(batch),
            call: Arc::from(call),
        };
        let t = self.tenants.entry(Box::from(tenant)).or_default();
        if let Some(key) = exact_key(resource) {
            t.exact.insert(Box::from(key), writer);
            return;
        }
        let Ok(p) = Pattern::parse(resource) else {
            return;
        };
        match p.as_exact() {
            Some(key) => {
                t.exact.insert(Box::from(key), writer);
            }
            None => t.wild.push((p, Box::from(resource), writer)),
        }
    }

    /// Takes a call's writes in: it becomes the last writer of each resource it wrote, and the
    /// entries its writes contain are superseded.
    pub fn apply(&mut self, call: &CallRecord) {
        if call.started_at_ms.is_none() {
            return; // did not run: wrote nothing
        }
        let mut writes = call
            .accesses
            .iter()
            .filter(|a| a.mode == "write")
            .peekable();
        if writes.peek().is_none() {
            return;
        }
        let writer = Writer {
            batch: Arc::from(call.batch.as_str()),
            call: Arc::from(call.call.as_str()),
        };
        let t = self
            .tenants
            .entry(Box::from(call.tenant.as_str()))
            .or_default();
        for a in writes {
            if let Some(key) = exact_key(&a.resource) {
                match t.exact.get_mut(key) {
                    Some(w) => *w = writer.clone(),
                    None => {
                        t.exact.insert(Box::from(key), writer.clone());
                    }
                }
                continue;
            }
            let Ok(p) = Pattern::parse(&a.resource) else {
                continue;
            };
            match p.as_exact() {
                Some(key) => {
                    t.exact.insert(Box::from(key), writer.clone());
                }
                None => {
                    t.exact.retain(|key, _| !p.matches(key));
                    t.wild.retain(|(q, _, _)| !p.contains(q));
                    t.wild
                        .push((p, Box::from(a.resource.as_str()), writer.clone()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_restored_give_the_same_edges() {
        let mut lw = LastWriters::new();
        lw.apply(&call("b1", "w1", &[("write", "fs:/a/x")]));
        lw.apply(&call("b1", "w2", &[("write", "fs:/b/*")]));
        let mut back = LastWriters::new();
        for (r, b, c) in lw.entries("t") {
            back.restore("t", &r, &b, &c);
        }
        let reader = call("b9", "r", &[("read", "fs:/a/x"), ("read", "fs:/b/y")]);
        assert_eq!(
            back.edges_for(&reader, std::iter::empty()),
            lw.edges_for(&reader, std::iter::empty())
        );
        assert_eq!(back.edges_for(&reader, std::iter::empty()).len(), 2);
        assert_eq!(
            back.writer_of("t", "fs:/b/*"),
            Some(("b1".to_owned(), "w2".to_owned()))
        );
        back.forget("t");
        assert!(back.is_empty());
    }
    use sluice_kernel::provenance::AccessRecord;
    use sluice_kernel::Status;

    fn call(batch: &str, id: &str, accesses: &[(&str, &str)]) -> CallRecord {
        CallRecord {
            batch: batch.into(),
            tenant: "t".into(),
            call: id.into(),
            tool: "x".into(),
            tool_version: None,
            input_sha256: String::new(),
            output_sha256: None,
            accesses: accesses
                .iter()
                .map(|(mode, r)| AccessRecord {
                    kind: if *mode == "read" { "reads" } else { "writes" }.into(),
                    resource: (*r).into(),
                    mode: (*mode).into(),
                })
                .collect(),
            decision: None,
            decided_by: None,
            approver: None,
            started_at_ms: Some(1.0),
            ended_at_ms: Some(2.0),
            outcome: Status::Ok,
            error_code: None,
            error_message: None,
        }
    }

    fn froms(edges: &[EdgeRecord]) -> Vec<String> {
        let mut v: Vec<String> = edges
            .iter()
            .map(|e| format!("{}/{}", e.from_batch, e.from))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn only_the_latest_earlier_write_counts_and_globs_take_part() {
        let mut lw = LastWriters::new();
        lw.apply(&call("b1", "w1", &[("write", "fs:/a/x")]));
        lw.apply(&call("b2", "w2", &[("write", "fs:/a/x")]));
        lw.apply(&call("b2", "w3", &[("write", "fs:/a/y")]));
        let r = call("b3", "r", &[("read", "fs:/a/x")]);
        assert_eq!(froms(&lw.edges_for(&r, [].iter())), ["b2/w2"]);
        let glob = call("b3", "g", &[("read", "fs:/a/*")]);
        assert_eq!(froms(&lw.edges_for(&glob, [].iter())), ["b2/w2", "b2/w3"]);
        // A wildcard write supersedes what it contains.
        lw.apply(&call("b4", "wall", &[("write", "fs:/a/*")]));
        assert_eq!(lw.len(), 1);
        assert_eq!(froms(&lw.edges_for(&r, [].iter())), ["b4/wall"]);
        // A later exact write does not contain the wildcard: both count.
        lw.apply(&call("b5", "wx", &[("write", "fs:/a/x")]));
        assert_eq!(froms(&lw.edges_for(&r, [].iter())), ["b4/wall", "b5/wx"]);
    }

    #[test]
    fn own_batch_known_edges_and_calls_that_never_ran_add_nothing() {
        let mut lw = LastWriters::new();
        let mut never = call("b0", "never", &[("write", "kv:k")]);
        never.started_at_ms = None;
        lw.apply(&never);
        assert!(lw.is_empty());
        lw.apply(&call("b1", "w", &[("write", "kv:k")]));
        assert!(lw
            .edges_for(&call("b1", "r", &[("read", "kv:k")]), [].iter())
            .is_empty());
        let r = call("b2", "r", &[("read", "kv:k"), ("read", "kv:*")]);
        let edges = lw.edges_for(&r, [].iter());
        assert_eq!(edges.len(), 1, "one edge per writer");
        assert!(
            lw.edges_for(&r, edges.iter()).is_empty(),
            "the kernel's edge is not repeated"
        );
        let mut other = r.clone();
        other.tenant = "u".into();
        assert!(
            lw.edges_for(&other, [].iter()).is_empty(),
            "tenants never mix"
        );
    }
}
