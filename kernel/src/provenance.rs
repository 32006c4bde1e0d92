//! Provenance: the records the kernel emits, and the sink that keeps them.
//!
//! Takes in: what happened — a batch, each call with its decision and outcome, each conflict
//! edge. Hands on: [`Record`]s to a [`ProvenanceSink`]. The kernel waits for the future
//! [`ProvenanceSink::record`] returns before it hands a call's result back, so a durable sink can
//! promise that a reported result is on disk. `sluice-provenance` implements the sink as a
//! hash-chained JSON Lines log; the default, [`NoProvenance`], keeps nothing.
//!
//! No secret value reaches a record: inputs and outputs are kept as sha256 digests of their
//! canonical JSON, and error messages are redacted of every value the secret resolver handed out.

use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::Error;
use crate::model::Status;

/// One access as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessRecord {
    /// Effect kind.
    pub kind: String,
    /// `read` or `write`.
    pub mode: String,
    /// Resource pattern (after templating and normalization).
    pub resource: String,
}

/// A call's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// The accesses after templating.
    pub accesses: Vec<AccessRecord>,
    /// Who approved an ask (or rejected it).
    pub approver: Option<String>,
    /// The batch.
    pub batch: String,
    /// The call id.
    pub call: String,
    /// The rule, default or mode behind the decision.
    pub decided_by: Option<String>,
    /// `allow`, `ask` or `deny` (null when the call was refused before authorization).
    pub decision: Option<String>,
    /// End, unix time in milliseconds (null when the call never started).
    pub ended_at_ms: Option<f64>,
    /// The error code, for every outcome but `ok`.
    pub error_code: Option<String>,
    /// The error message (secrets redacted).
    pub error_message: Option<String>,
    /// sha256 (hex) of the canonical JSON of the input.
    pub input_sha256: String,
    /// The outcome.
    pub outcome: Status,
    /// sha256 (hex) of the canonical JSON of the output, when there is one.
    pub output_sha256: Option<String>,
    /// Start, unix time in milliseconds (null when the call never started).
    pub started_at_ms: Option<f64>,
    /// The tenant.
    pub tenant: String,
    /// The tool id.
    pub tool: String,
    /// The tool's version (null for an unknown tool).
    pub tool_version: Option<String>,
}

/// A call's intent: written, under a durable log, before its handler starts (durable first).
///
/// A call whose intent is in the log and whose [`CallRecord`] is not started and never finished
/// as far as the log knows: after a crash, its effect is *in doubt* (it may or may not have
/// happened). Its [`idempotency_key`](Self::idempotency_key) is the one its handler was given, so
/// the system it wrote to can tell whether it did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntentRecord {
    /// The accesses after templating.
    pub accesses: Vec<AccessRecord>,
    /// Who approved an ask.
    pub approver: Option<String>,
    /// The batch.
    pub batch: String,
    /// The call id.
    pub call: String,
    /// The rule, default or mode behind the decision.
    pub decided_by: Option<String>,
    /// `allow` or `ask` (a call that starts was allowed, or asked and approved).
    pub decision: Option<String>,
    /// The key the handler receives ([`idempotency_key`]).
    pub idempotency_key: String,
    /// sha256 (hex) of the canonical JSON of the input.
    pub input_sha256: String,
    /// The calls it was ordered after (`batch/call`), by the edges recorded before it.
    pub predecessors: Vec<String>,
    /// When its handler was about to start, unix time in milliseconds.
    pub started_at_ms: f64,
    /// The tenant.
    pub tenant: String,
    /// The tool id.
    pub tool: String,
    /// The tool's version.
    pub tool_version: Option<String>,
}

/// The idempotency key of a call: 32 hex digits of SHA-256 over tenant, batch and call id. The
/// same for every attempt Sluice makes of the call (and in its intent and provenance), and
/// different for any two calls — so a system that deduplicates by it never drops a call that
/// is not a repeat (two turns' `incr` with the same call id are two keys: their batches differ).
pub fn idempotency_key(tenant: &str, batch: &str, call: &str) -> String {
    let mut h = Sha256::new();
    for part in ["sluice-idempotency-1", tenant, batch, call] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    let digest = h.finalize();
    hex::encode(digest.get(..16).unwrap_or(&digest))
}

/// A conflict edge's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeRecord {
    /// Whether the later call may have seen what the earlier one wrote (read-after-write).
    pub causal: bool,
    /// The earlier call.
    pub from: String,
    /// The earlier call's batch.
    pub from_batch: String,
    /// `read-after-write`, `write-after-read` or `write-after-write`.
    pub kind: String,
    /// One overlapping pattern that causes the edge.
    pub resource: String,
    /// The tenant.
    pub tenant: String,
    /// The later call.
    pub to: String,
    /// The later call's batch.
    pub to_batch: String,
}

/// A batch's record, written when its last call has finished.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchRecord {
    /// The batch id.
    pub batch: String,
    /// The call ids, in submission order.
    pub calls: Vec<String>,
    /// End, unix time in milliseconds (a non-finite time is written as null and read back as
    /// NaN, so the log never holds what its reader refuses).
    #[serde(deserialize_with = "f64_or_null")]
    pub ended_at_ms: f64,
    /// Where the batch came from, when a front end says so (the gateway: its transport, MCP
    /// session and client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<BatchOrigin>,
    /// Start, unix time in milliseconds (as `ended_at_ms`).
    #[serde(deserialize_with = "f64_or_null")]
    pub started_at_ms: f64,
    /// The tenant.
    pub tenant: String,
}

/// Where a batch came from (fields in sorted order: records serialize straight to canonical
/// JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchOrigin {
    /// The client's name as it declared itself (MCP `clientInfo.name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The client's version as it declared it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_version: Option<String>,
    /// The connection the batch came on, unique among a gateway's connections and across its
    /// restarts (`<gateway instance>/<connection number>`): two sessionless clients are told
    /// apart by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection: Option<String>,
    /// The client's address (`IP:port`) as the gateway saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// The request on that connection: its number there, and for MCP its JSON-RPC id
    /// (`3 id=5`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// The MCP session id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// `mcp` or `http` (the batch API); free text for other front ends.
    pub transport: String,
}

/// A time that JSON wrote as null (it was not finite) reads back as NaN.
fn f64_or_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// What the kernel records.
///
/// The fields of every record struct are declared in the byte order of their names (and `type`,
/// the tag, sorts after all of them), so a record serializes straight to its canonical JSON; the
/// provenance log relies on it and its tests check it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Record {
    /// A call finished (whatever its outcome).
    Call(CallRecord),
    /// A conflict edge was found.
    Edge(EdgeRecord),
    /// A batch finished.
    Batch(BatchRecord),
    /// A call is about to start (durable first: [`ProvenanceSink::durable_first`]).
    Intent(IntentRecord),
}

impl Record {
    /// The tenant the record belongs to.
    pub fn tenant(&self) -> &str {
        match self {
            Record::Call(c) => &c.tenant,
            Record::Edge(e) => &e.tenant,
            Record::Batch(b) => &b.tenant,
            Record::Intent(i) => &i.tenant,
        }
    }
}

/// The future a sink returns: resolved when the records are as safe as the sink promises, or
/// with [`Error::ProvenanceRefused`] saying why the sink could not keep them.
pub type RecordFuture = Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'static>>;

/// Keeps provenance records.
///
/// The kernel hands a sink *groups*: a call's edge records followed by its call record, or a
/// batch's record. Two promises make a log built on it true:
///
/// - **Place at the call.** A group's place in the sink's order is fixed when
///   [`record`](Self::record) is called, not when the future is polled. The kernel calls it before
///   it releases the call's successors, so a call's records always come after its predecessors'
///   (the log is in causal order).
/// - **All or nothing, then the answer.** A group is kept whole or not at all (one commit); the
///   kernel reports the call's result only once the future has resolved, and a result whose group
///   was refused carries [`recorded`](crate::run::CallResult::recorded) `Some(false)`.
///
/// A refused group never fails the call itself: its outcome is reported as it was.
pub trait ProvenanceSink: Send + Sync + 'static {
    /// Keeps one group of records, in the order given.
    fn record(&self, group: Vec<Record>) -> RecordFuture;

    /// Whether the sink keeps anything at all; when `false` the kernel does not build records
    /// (no digests are computed) and results carry `recorded: None`. Default `true`.
    fn enabled(&self) -> bool {
        true
    }

    /// Whether the sink keeps a call's intent before the call starts (a durable log does): the
    /// kernel then hands it a group of one [`Record::Intent`] just before the handler starts,
    /// after every wait, and starts the handler only once that group is kept — a call whose
    /// intent cannot be kept does not start (`provenance-unavailable`). So no effect happens
    /// without its record: after a crash, the log names every call that started and never
    /// finished. Default `false`.
    fn durable_first(&self) -> bool {
        false
    }

    /// Whether the sink can keep `tenant`'s records now, for a sink that must keep every call's
    /// (durable): while it says no, the kernel starts none of the tenant's calls (they end
    /// `provenance-unavailable`: no tool runs unrecorded), with
    /// [`Error::ProvenanceUnavailable`] saying why. Default: always yes.
    fn available(&self, _tenant: &str) -> Result<(), Error> {
        Ok(())
    }

    /// Resolves once every group handed over before it is as safe as the sink promises; an
    /// error when any could not be kept. [`crate::Kernel::shutdown`] calls it once no call is
    /// left. Default: nothing to wait for.
    fn flush(&self) -> RecordFuture {
        Box::pin(async { Ok(()) })
    }

    /// Keeps what is queued, writes what closes the log (a last signed checkpoint), and takes
    /// nothing more: later groups are refused. [`crate::Kernel::shutdown`] calls it last, after
    /// [`ProvenanceSink::flush`]. Default: nothing to close.
    fn close(&self) -> RecordFuture {
        Box::pin(async { Ok(()) })
    }
}

/// The default sink: keeps nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProvenance;

impl ProvenanceSink for NoProvenance {
    fn record(&self, _group: Vec<Record>) -> RecordFuture {
        Box::pin(async { Ok(()) })
    }

    fn enabled(&self) -> bool {
        false
    }
}

/// A closure is a sink that sees each record of a group in turn and keeps them all.
impl<F> ProvenanceSink for F
where
    F: Fn(Record) + Send + Sync + 'static,
{
    fn record(&self, group: Vec<Record>) -> RecordFuture {
        group.into_iter().for_each(self);
        Box::pin(async { Ok(()) })
    }
}

/// Whether serde_json's maps keep keys sorted in this build (they do unless some crate turned on
/// its `preserve_order` feature), checked once.
fn maps_are_sorted() -> bool {
    static SORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SORTED.get_or_init(|| {
        let mut m = serde_json::Map::new();
        m.insert("b".into(), Value::Null);
        m.insert("a".into(), Value::Null);
        m.keys().next().map(String::as_str) == Some("a")
    })
}

/// The canonical JSON of a value: object keys sorted, no insignificant white space.
pub fn canonical_json(value: &Value) -> String {
    if maps_are_sorted() {
        return value.to_string();
    }
    // Some crate turned on `preserve_order`: sort explicitly so digests never depend on it.
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                let mut out = serde_json::Map::new();
                for k in keys {
                    out.insert(k.clone(), sorted(&m[k]));
                }
                Value::Object(out)
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            v => v.clone(),
        }
    }
    sorted(value).to_string()
}

/// sha256 (hex) of the canonical JSON of a value.
pub fn sha256_json(value: &Value) -> String {
    hex::encode(Sha256::digest(canonical_json(value).as_bytes()))
}

/// Replaces every occurrence of each secret in `text` with `[redacted]`.
pub fn redact(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_owned();
    for s in secrets.iter().filter(|s| !s.is_empty()) {
        out = out.replace(s.as_str(), "[redacted]");
    }
    out
}
