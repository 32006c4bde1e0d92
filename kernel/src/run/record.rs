//! Stage 6, **record**: what ran, who allowed it and the edges that ordered it, to the
//! provenance sink; then the call's result.
//!
//! In two steps around the release of the successors: [`begin`] hands the call's group (its edges,
//! then the call) to the sink, which fixes its place in the log there and then; the caller then
//! releases the successors (whose records therefore come later: the log is in causal order); and
//! [`Recording::finish`] waits for the sink's answer before the result is handed back (a durable
//! log answers once the group is on disk).

use std::time::Instant;

use super::job::{CallJob, Outcome};
use super::result::CallResult;
use futures::FutureExt;

use crate::error::{panic_message, Error};
use crate::model::CallError;
use crate::provenance::{
    self, AccessRecord, CallRecord, EdgeRecord, IntentRecord, Record, RecordFuture,
};

/// The sink panicked while taking or answering for a group: the group counts as refused.
fn sink_panicked(payload: &(dyn std::any::Any + Send)) -> Error {
    Error::ProvenanceRefused {
        why: format!("the provenance sink panicked: {}", panic_message(payload)),
    }
}

/// A call's result, waiting for the sink to answer for its records.
pub(crate) struct Recording {
    result: CallResult,
    pending: Option<RecordFuture>,
}

impl Recording {
    /// Waits for the sink, then hands the result back (with `recorded` set).
    pub(crate) async fn finish(self) -> CallResult {
        let mut result = self.result;
        if let Some(pending) = self.pending {
            // The sink is the embedder's code: a panic while it answers refuses the records.
            let kept = match std::panic::AssertUnwindSafe(pending).catch_unwind().await {
                Ok(kept) => kept,
                Err(payload) => Err(sink_panicked(payload.as_ref())),
            };
            if let Err(why) = &kept {
                tracing::error!(error = %why, call = %result.id,
                    "the provenance sink refused a call's records");
            }
            result.recorded = Some(kept.is_ok());
        }
        result
    }
}

/// The version of the call's tool (`None` for an unknown tool).
fn tool_version(job: &CallJob) -> Option<String> {
    job.prepared
        .tool
        .as_ref()
        .map(|t| t.manifest().version.to_string())
}

/// The call's accesses as records.
fn access_records(job: &CallJob) -> Vec<AccessRecord> {
    job.prepared
        .accesses
        .iter()
        .map(|a| AccessRecord {
            kind: a.kind.as_str().to_owned(),
            resource: a.resource.to_text(),
            mode: a.mode().as_str().to_owned(),
        })
        .collect()
}

/// Durable first: the call's intent goes to a sink that keeps intents
/// ([`ProvenanceSink::durable_first`](crate::provenance::ProvenanceSink::durable_first)), and
/// this answers once it is kept (on disk, for a durable log) — or why it was not, and then the
/// call must not start. A sink that keeps no intents answers at once.
pub(crate) async fn intent(job: &mut CallJob, edges: &[EdgeRecord]) -> Result<(), Error> {
    if !job.kernel().sink.enabled() || !job.kernel().sink.durable_first() {
        return Ok(());
    }
    let sink = job.kernel().sink.clone();
    let input_sha256 = provenance::sha256_json(&job.prepared.call.input);
    job.input_sha256 = Some(input_sha256.clone());
    let batch = &job.batch;
    let record = IntentRecord {
        accesses: access_records(job),
        approver: job.approver.clone(),
        batch: batch.id.to_string(),
        call: job.prepared.call.id.clone(),
        decided_by: job.authorization.as_ref().map(|a| a.by.to_string()),
        decision: job
            .authorization
            .as_ref()
            .map(|a| a.decision.as_str().to_owned()),
        idempotency_key: provenance::idempotency_key(
            &batch.tenant,
            &batch.id,
            &job.prepared.call.id,
        ),
        input_sha256,
        predecessors: edges
            .iter()
            .map(|e| format!("{}/{}", e.from_batch, e.from))
            .collect(),
        started_at_ms: batch.unix_ms(Instant::now().saturating_duration_since(batch.started)),
        tenant: batch.tenant.to_string(),
        tool: job.prepared.call.tool.clone(),
        tool_version: tool_version(job),
    };
    // The sink is the embedder's code: a panic refuses the intent (the call does not start).
    let handed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        sink.record(vec![Record::Intent(record)])
    }));
    let kept = match handed {
        Ok(pending) => std::panic::AssertUnwindSafe(pending).catch_unwind().await,
        Err(payload) => Err(payload),
    };
    kept.unwrap_or_else(|payload| Err(sink_panicked(payload.as_ref())))
}

/// Both steps at once, for a call with no successors to release.
pub(crate) async fn finish(job: CallJob, outcome: Outcome, edges: Vec<EdgeRecord>) -> CallResult {
    begin(job, outcome, edges).finish().await
}

/// Stage 6, **record**: the call's records (its edges first, then the call) go to the provenance
/// sink as one group, and its result is made for the batch to deliver.
pub(crate) fn begin(job: CallJob, outcome: Outcome, edges: Vec<EdgeRecord>) -> Recording {
    let approver = job.approver.clone();
    let secrets = &job.secrets;
    let error = outcome.error.map(|e| CallError {
        message: provenance::redact(&e.message, secrets),
        ..e
    });
    tracing::Span::current().record("status", outcome.status.as_str());
    let batch = &job.batch;
    let rel = |t: Option<Instant>| t.map(|t| t.saturating_duration_since(batch.started));
    let (started, ended) = match job.started {
        Some(_) => (rel(job.started), rel(job.ended)),
        None => (None, None),
    };
    let sink = &job.kernel().sink;
    let mut pending = None;
    if sink.enabled() {
        let record = CallRecord {
            batch: batch.id.to_string(),
            tenant: batch.tenant.to_string(),
            call: job.prepared.call.id.clone(),
            tool: job.prepared.call.tool.clone(),
            tool_version: tool_version(&job),
            input_sha256: job
                .input_sha256
                .clone()
                .unwrap_or_else(|| provenance::sha256_json(&job.prepared.call.input)),
            output_sha256: outcome.output.as_ref().map(provenance::sha256_json),
            accesses: access_records(&job),
            decision: job
                .authorization
                .as_ref()
                .map(|a| a.decision.as_str().to_owned()),
            decided_by: job.authorization.as_ref().map(|a| a.by.to_string()),
            approver: approver.clone(),
            started_at_ms: started.map(|d| batch.unix_ms(d)),
            ended_at_ms: ended.map(|d| batch.unix_ms(d)),
            outcome: outcome.status,
            error_code: error.as_ref().map(|e| e.code.clone()),
            error_message: error.as_ref().map(|e| e.message.clone()),
        };
        let mut group: Vec<Record> = edges.into_iter().map(Record::Edge).collect();
        group.push(Record::Call(record));
        // The sink is the embedder's code, called before the successors are released: a panic
        // here must not keep them waiting, so it refuses the records instead.
        let handed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink.record(group)));
        pending = Some(handed.unwrap_or_else(|payload| {
            let why = sink_panicked(payload.as_ref());
            Box::pin(async move { Err(why) })
        }));
    }
    let version = tool_version(&job);
    Recording {
        result: CallResult {
            id: job.prepared.call.id,
            tool: job.prepared.call.tool,
            version,
            status: outcome.status,
            output: outcome.output,
            error,
            started,
            ended,
            authorization: job.authorization.clone(),
            approver,
            recorded: None,
        },
        pending,
    }
}
