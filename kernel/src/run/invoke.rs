//! Stage 5, **invoke**: the handler in its own task, under its deadline, watching the batch's
//! cancellation; then the output check.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::job::{CallJob, Outcome};
use super::observe::quietly;
use crate::error::{panic_message, ErrorCode};
use crate::model::Status;
use crate::provenance::{self, EdgeRecord};
use crate::transport::resolve::unrunnable_reason;
use crate::transport::{ContextError, Handler, Tool, ToolContext, ToolError};

/// Runs a call whose predecessors are done and whose ask (if any) was approved: a permit under
/// the caps, the required needs, then the handler.
pub(crate) async fn invoke(
    job: &mut CallJob,
    batch_cancel: &CancellationToken,
    edges: &[EdgeRecord],
) -> Outcome {
    let Some(tool) = job.prepared.tool.clone() else {
        return Outcome::fail(Status::Error, ErrorCode::UnknownTool, "no such tool");
    };
    let _permit = tokio::select! {
        biased;
        _ = batch_cancel.cancelled() => return Outcome::cancelled_before_start(),
        p = job.kernel().ready.acquire(job.priority, job.seq, tool.id()) => p,
    };
    let Some(handler) = tool.handler().cloned() else {
        let why = unrunnable_reason(tool.manifest());
        let message = format!("the tool `{}` cannot run: {why}", tool.id());
        return Outcome::fail(Status::Error, ErrorCode::NoHandler, message);
    };
    let call_cancel = batch_cancel.child_token();
    let ctx = ToolContext::new(
        job.batch.tenant.clone(),
        job.batch.id.clone(),
        &job.prepared.call.id,
        tool.manifest().clone(),
        call_cancel.clone(),
        job.kernel().provisions.clone(),
    )
    .with_fencing_token(job.fencing);
    if let Err(e) = ctx.check_required() {
        job.secrets = ctx.handed_out();
        let code = match &e {
            ContextError::Unavailable { what: "secret", .. } => ErrorCode::SecretUnavailable,
            _ => ErrorCode::MissingNeed,
        };
        let message = format!("call `{}` cannot run: {e}", job.prepared.call.id);
        return Outcome::fail(Status::Error, code, message);
    }
    // Durable first: the intent is kept before the handler starts, or the call does not start.
    if let Err(why) = super::record::intent(job, edges).await {
        job.secrets = ctx.handed_out();
        let message = format!(
            "call `{}` did not start: the provenance log could not keep its intent: {why}",
            job.prepared.call.id
        );
        return Outcome::fail(Status::Error, ErrorCode::ProvenanceUnavailable, message);
    }
    // Fencing, in the one place every call passes on its way to its handler, after every wait
    // (the intent's sync included): a shared domain whose lease lapsed meanwhile may have let
    // another process run a conflicting call, so this one must not start.
    if let (Some(shared), Some(ticket)) = (&job.kernel().shared, job.fencing) {
        if let Err(why) = shared.fence(&job.batch.tenant, ticket) {
            let message = format!("call `{}` was not started: {why}", job.prepared.call.id);
            return Outcome::fail(Status::Error, ErrorCode::DomainUnavailable, message);
        }
    }
    run_handler(job, &tool, handler, ctx, call_cancel, batch_cancel).await
}

/// The handler inside this call's own task: dropping its future (deadline, cancellation) stops
/// it, and a panic is caught and becomes this call's error.
async fn run_handler(
    job: &mut CallJob,
    tool: &Tool,
    handler: Arc<dyn Handler>,
    ctx: ToolContext,
    call_cancel: CancellationToken,
    batch_cancel: &CancellationToken,
) -> Outcome {
    let deadline = tool
        .manifest()
        .limits
        .map(|l| Duration::from_millis(l.cpu_ms.get()))
        .or(job.kernel().options.default_timeout);
    let mut traceparent = None;
    if let Some(observer) = &job.batch.observer {
        traceparent = quietly("traceparent", || observer.traceparent(&job.prepared.call));
        quietly("started", || {
            observer.started(&job.prepared.call);
            Some(())
        });
    }
    let deadline_at = deadline.map(|d| tokio::time::Instant::now() + d);
    let ctx = ctx.with_run(deadline_at, traceparent, job.batch.trace.clone());
    job.started = Some(Instant::now());
    // The input's digest is taken before the handler runs when a record needs it; otherwise the
    // input moves into the handler instead of being copied.
    if job.kernel().sink.enabled() && job.input_sha256.is_none() {
        job.input_sha256 = Some(provenance::sha256_json(&job.prepared.call.input));
    }
    let input = std::mem::take(&mut job.prepared.call.input);
    let run = std::panic::AssertUnwindSafe(handler.call(ctx.clone(), input)).catch_unwind();
    let sleep = async {
        match deadline_at {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    // Biased, so that a schedule replays: at one instant, an output that is ready wins over the
    // deadline and the cancellation.
    let joined = tokio::select! {
        biased;
        r = run => Some(r),
        _ = sleep => None,
        _ = batch_cancel.cancelled() => {
            call_cancel.cancel();
            job.ended = Some(Instant::now());
            job.secrets = ctx.handed_out();
            return Outcome::fail(
                Status::Cancelled,
                ErrorCode::Cancelled,
                "the batch was cancelled while the call ran",
            );
        }
    };
    job.secrets = ctx.handed_out();
    job.ended = Some(Instant::now());
    let Some(joined) = joined else {
        call_cancel.cancel();
        let ms = deadline.map(|d| d.as_millis()).unwrap_or(0);
        let message = format!("call `{}` timed out after {ms} ms", job.prepared.call.id);
        return Outcome::fail(Status::Timeout, ErrorCode::Timeout, message);
    };
    judge(tool, joined)
}

/// How a handler's answer ends the call: its output checked against the output schema, its
/// error passed on (a handler that gave up waiting reports `timeout`, one that saw its
/// cancellation `cancelled`), its panic caught.
fn judge(tool: &Tool, joined: std::thread::Result<Result<Value, ToolError>>) -> Outcome {
    match joined {
        Ok(Ok(output)) => match tool.check_output(&output) {
            Ok(()) => Outcome::ok(output),
            Err(d) => {
                let mut outcome = Outcome::fail(
                    Status::Error,
                    ErrorCode::InvalidOutput,
                    format!(
                        "the output of `{}` fails its schema at `{}`: {}",
                        tool.id(),
                        d.pointer,
                        d.message
                    ),
                );
                if let Some(e) = outcome.error.as_mut() {
                    e.pointer = Some(d.pointer);
                }
                outcome
            }
        },
        // A handler that gave up waiting (an HTTP tool's own timeoutMs) reports `timeout`.
        Ok(Err(e)) if e.code == ErrorCode::Timeout => Outcome::tool_error(Status::Timeout, e),
        // A handler that saw its cancellation first (it answers at once) ends `cancelled`, as
        // one whose future was dropped does.
        Ok(Err(e)) if e.code == ErrorCode::Cancelled => Outcome::tool_error(Status::Cancelled, e),
        Ok(Err(e)) => Outcome::tool_error(Status::Error, e),
        Err(payload) => Outcome::fail(
            Status::Error,
            ErrorCode::Panic,
            format!(
                "the handler of `{}` panicked: {}",
                tool.id(),
                panic_message(payload.as_ref())
            ),
        ),
    }
}
