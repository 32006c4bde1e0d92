//! One call on its way through the stages: what they share ([`CallJob`]) and how it ended
//! ([`Outcome`]).

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::shared::{BatchInfo, KernelInner};
use crate::authorize::Authorization;
use crate::error::ErrorCode;
use crate::model::{CallError, Status};
use crate::order::PreparedCall;
use crate::transport::ToolError;

/// Everything one call's stages share.
pub(crate) struct CallJob {
    /// The batch, and through it the kernel.
    pub(crate) batch: Arc<BatchInfo>,
    /// Kernel-wide submission sequence (for the ready queue's order).
    pub(crate) seq: u64,
    pub(crate) priority: i32,
    pub(crate) prepared: PreparedCall,
    pub(crate) authorization: Option<Authorization>,
    pub(crate) approver: Option<String>,
    pub(crate) started: Option<Instant>,
    pub(crate) ended: Option<Instant>,
    /// Secret values handed out to the handler, for redaction.
    pub(crate) secrets: Vec<String>,
    /// The input's digest, taken before the input moved into the handler.
    pub(crate) input_sha256: Option<String>,
    /// Its admission number in the shared conflict domain, when there is one.
    pub(crate) fencing: Option<u64>,
}

impl CallJob {
    /// The kernel the call runs on.
    pub(crate) fn kernel(&self) -> &Arc<KernelInner> {
        &self.batch.kernel
    }
}

/// How a call ended, before it becomes a [`super::result::CallResult`].
pub(crate) struct Outcome {
    pub(crate) status: Status,
    pub(crate) output: Option<Value>,
    pub(crate) error: Option<CallError>,
}

impl Outcome {
    pub(crate) fn ok(output: Value) -> Self {
        Outcome {
            status: Status::Ok,
            output: Some(output),
            error: None,
        }
    }

    pub(crate) fn fail(status: Status, code: ErrorCode, message: impl Into<String>) -> Self {
        Outcome {
            status,
            output: None,
            error: Some(CallError::new(code, message)),
        }
    }

    /// A call the batch's cancellation stopped before it started.
    pub(crate) fn cancelled_before_start() -> Self {
        Outcome::fail(
            Status::Cancelled,
            ErrorCode::Cancelled,
            "the batch was cancelled before the call started",
        )
    }

    /// A handler's own error, its code kept as the handler wrote it.
    pub(crate) fn tool_error(status: Status, e: ToolError) -> Self {
        Outcome {
            status,
            output: None,
            error: Some(CallError::new(e.code, e.message)),
        }
    }

    /// Whether dependents should count this call as failed (for `skip-dependents`). A denied or
    /// rejected call changed nothing, so its dependents run.
    pub(crate) fn counts_as_failure(&self) -> bool {
        !matches!(self.status, Status::Ok | Status::Denied | Status::Rejected)
    }
}
