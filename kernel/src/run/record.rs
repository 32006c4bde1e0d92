//! Stage 6, **record**: what ran, who allowed it and the edges that ordered it, to the
//! provenance sink; then the call's result.

use std::time::Instant;

use super::job::{CallJob, Outcome};
use super::result::CallResult;
use crate::model::CallError;
use crate::provenance::{self, AccessRecord, CallRecord, EdgeRecord, Record};

/// Stage 6, **record**: the call's records (its edges first, then the call) go to the provenance
/// sink, and its result is made for the batch to deliver.
pub(crate) async fn finish(job: CallJob, outcome: Outcome, edges: Vec<EdgeRecord>) -> CallResult {
    let approver = job.approver.clone();
    let secrets = &job.secrets;
    let error = outcome.error.map(|e| CallError {
        code: e.code,
        message: provenance::redact(&e.message, secrets),
    });
    tracing::Span::current().record("status", outcome.status.as_str());
    let batch = &job.batch;
    let rel = |t: Option<Instant>| t.map(|t| t.saturating_duration_since(batch.started));
    let (started, ended) = match job.started {
        Some(_) => (rel(job.started), rel(job.ended)),
        None => (None, None),
    };
    let sink = job.kernel().sink.clone();
    if sink.enabled() {
        let record = CallRecord {
            batch: batch.id.to_string(),
            tenant: batch.tenant.to_string(),
            call: job.prepared.call.id.clone(),
            tool: job.prepared.call.tool.clone(),
            tool_version: job
                .prepared
                .tool
                .as_ref()
                .map(|t| t.manifest().version.to_string()),
            input_sha256: job
                .input_sha256
                .clone()
                .unwrap_or_else(|| provenance::sha256_json(&job.prepared.call.input)),
            output_sha256: outcome.output.as_ref().map(provenance::sha256_json),
            accesses: job
                .prepared
                .accesses
                .iter()
                .map(|a| AccessRecord {
                    kind: a.kind.as_str().to_owned(),
                    resource: a.resource.to_text(),
                    mode: a.mode().as_str().to_owned(),
                })
                .collect(),
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
        for e in edges {
            if let Err(why) = sink.record(Record::Edge(e)).await {
                tracing::error!(error = %why, "the provenance sink refused an edge record");
            }
        }
        if let Err(why) = sink.record(Record::Call(record)).await {
            tracing::error!(error = %why, "the provenance sink refused a call record");
        }
    }
    CallResult {
        id: job.prepared.call.id,
        tool: job.prepared.call.tool,
        status: outcome.status,
        output: outcome.output,
        error,
        started,
        ended,
        authorization: job.authorization.clone(),
        approver,
    }
}
