//! Stage 4's other half: asking a person. The ask starts at once (a call waiting for approval
//! blocks only its dependents); concurrent first uses of one tool by one tenant share one ask;
//! only an explicit approval runs the call.

use std::sync::Arc;

use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use super::job::{CallJob, Outcome};
use super::shared::KernelInner;
use crate::authorize::{ApprovalOutcome, ApprovalRequest, Decision};
use crate::error::{panic_message, ErrorCode};
use crate::model::Status;

/// The approver recorded when the approver failed.
const APPROVER_ERROR: &str = "approver-error";
/// The approver recorded when no answer came in time.
const APPROVAL_TIMEOUT: &str = "approval-timeout";
/// The approver recorded when the approver panicked.
const APPROVER_PANIC: &str = "approver-panic";

/// How an ask ended.
pub(crate) enum Asked {
    /// The approver answered (or failed, or timed out: both are rejections).
    Answer(ApprovalOutcome),
    /// The approver (or the authorizer remembering its approval) panicked.
    Panicked(String),
}

/// The ask in flight. Dropping it — the call was cancelled while it waited — aborts the ask:
/// the approver's future is dropped and nothing of the ask is remembered.
pub(crate) type Ask = std::pin::Pin<Box<dyn std::future::Future<Output = Asked> + Send>>;

/// Aborts a task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Takes a first-use ask out of the kernel's table when the ask that made it ends, however it
/// ends (answered, panicked, aborted), so that an idle tenant leaves nothing behind.
struct FirstUseEntry {
    kernel: Arc<KernelInner>,
    key: (String, String),
    cell: Arc<OnceCell<ApprovalOutcome>>,
}

impl Drop for FirstUseEntry {
    fn drop(&mut self) {
        let cell = &self.cell;
        self.kernel
            .first_use
            .remove_if(&self.key, |_, c| Arc::ptr_eq(c, cell));
    }
}

/// Starts asking at once (a call waiting for approval blocks only its dependents); concurrent
/// first uses of one tool by one tenant share one ask.
pub(crate) fn start(job: &CallJob) -> Option<Ask> {
    let auth = job.authorization.clone()?;
    if auth.decision != Decision::Ask {
        return None;
    }
    let kernel = job.kernel().clone();
    let approver = job
        .batch
        .approver
        .clone()
        .unwrap_or_else(|| kernel.approver.clone());
    let request = ApprovalRequest {
        tenant: job.batch.tenant.to_string(),
        call_id: job.prepared.call.id.clone(),
        tool: job.prepared.call.tool.clone(),
        input: job.prepared.call.input.clone(),
        accesses: job.prepared.accesses.clone(),
        authorization: auth.clone(),
    };
    let ask = {
        let kernel = kernel.clone();
        move |request: ApprovalRequest| async move {
            let timeout = kernel.options.approval_timeout;
            match tokio::time::timeout(timeout, approver.approve(request)).await {
                Ok(Ok(o)) => o,
                Ok(Err(e)) => ApprovalOutcome::Rejected {
                    by: APPROVER_ERROR.into(),
                    reason: format!("the approver failed: {e}"),
                },
                Err(_) => ApprovalOutcome::Rejected {
                    by: APPROVAL_TIMEOUT.into(),
                    reason: format!("no answer within {} ms", timeout.as_millis()),
                },
            }
        }
    };
    let task = tokio::spawn(async move {
        if !auth.first_use {
            return ask(request).await;
        }
        let key = (request.tenant.clone(), request.tool.clone());
        let cell: Arc<OnceCell<ApprovalOutcome>> = kernel
            .first_use
            .entry(key.clone())
            .or_insert_with(|| Arc::new(OnceCell::new()))
            .clone();
        // The next first use after a rejection asks again; after an approval the authorizer
        // remembers it.
        let entry = FirstUseEntry {
            kernel: kernel.clone(),
            key,
            cell,
        };
        let (tenant, tool) = &entry.key;
        entry
            .cell
            .get_or_init(|| async {
                let o = ask(request).await;
                if matches!(o, ApprovalOutcome::Approved { .. }) {
                    kernel.authorizer.remember_approval(tenant, tool);
                }
                o
            })
            .await
            .clone()
    });
    Some(Box::pin(async move {
        let mut task = AbortOnDrop(task);
        match (&mut task.0).await {
            Ok(o) => Asked::Answer(o),
            Err(e) if e.is_panic() => Asked::Panicked(panic_message(&*e.into_panic())),
            Err(_) => Asked::Panicked("the approval task was stopped".into()),
        }
    }))
}

/// Waits for the answer to a call's ask (stage 4, with the predecessors already done): `None`
/// when the call may run (approved, or nothing was asked), else how it ends — `rejected` for a
/// rejection, a timeout or an approver error, `rejected` with code `internal` for a panicking
/// approver (fail closed), `cancelled` when the batch is cancelled meanwhile (a cancelled batch
/// does not wait for a person to answer).
pub(crate) async fn answer(
    job: &mut CallJob,
    approval: Option<Ask>,
    cancel: &CancellationToken,
) -> Option<Outcome> {
    let fut = approval?;
    let asked = tokio::select! {
        biased;
        _ = cancel.cancelled() => None,
        o = fut => Some(o),
    };
    let call = &job.prepared.call;
    match asked {
        None => Some(Outcome::fail(
            Status::Cancelled,
            ErrorCode::Cancelled,
            "the batch was cancelled while the call waited for approval",
        )),
        Some(Asked::Answer(ApprovalOutcome::Approved { by })) => {
            job.approver = Some(by);
            None
        }
        Some(Asked::Answer(ApprovalOutcome::Rejected { by, reason })) => {
            let asked = job
                .authorization
                .as_ref()
                .map(|a| a.by.describe())
                .unwrap_or_default();
            let msg = format!(
                "call `{}` ({}) asked for approval because of {asked} and was rejected by \
                 `{by}`: {reason}",
                call.id, call.tool
            );
            job.approver = Some(by);
            Some(Outcome::fail(Status::Rejected, ErrorCode::Rejected, msg))
        }
        // Fail closed: an approver that panics is an approver that did not approve.
        Some(Asked::Panicked(what)) => {
            let msg = format!(
                "call `{}` ({}) asked for approval and the approver panicked, so it is \
                 rejected: {what}",
                call.id, call.tool
            );
            job.approver = Some(APPROVER_PANIC.into());
            Some(Outcome::fail(Status::Rejected, ErrorCode::Internal, msg))
        }
    }
}
