//! What a batch hands back: each call's result, and the batch's.

use serde_json::Value;

use crate::authorize::Authorization;
use crate::model::{CallError, Status};

/// One call's result.
#[derive(Debug, Clone, PartialEq)]
pub struct CallResult {
    /// The call id.
    pub id: String,
    /// The tool id.
    pub tool: String,
    /// The version of the tool that was called (`None` when no registered tool matched).
    pub version: Option<String>,
    /// How it ended.
    pub status: Status,
    /// The output, for `ok`.
    pub output: Option<Value>,
    /// Why it did not end `ok`.
    pub error: Option<CallError>,
    /// When the handler started, from the batch's start (`None` if it never started).
    pub started: Option<std::time::Duration>,
    /// When it ended, from the batch's start (`None` if it never started).
    pub ended: Option<std::time::Duration>,
    /// The authorization (`None` for a call refused before authorization).
    pub authorization: Option<Authorization>,
    /// Who approved (or rejected) an ask.
    pub approver: Option<String>,
    /// Whether the provenance sink kept the call's records: `None` without a sink, `Some(true)`
    /// when kept (on disk, for a durable log), `Some(false)` when the sink refused them (disk
    /// full, I/O error). The outcome above is the call's own either way.
    pub recorded: Option<bool>,
}

/// A batch's results, in submission order.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchResult {
    /// The batch id the kernel gave it.
    pub batch_id: String,
    /// The tenant.
    pub tenant: String,
    /// One result per call, in submission order.
    pub results: Vec<CallResult>,
    /// From the batch's start to its last call's end.
    pub makespan: std::time::Duration,
}

impl BatchResult {
    /// The result of the call with this id.
    pub fn get(&self, id: &str) -> Option<&CallResult> {
        self.results.iter().find(|r| r.id == id)
    }
}
