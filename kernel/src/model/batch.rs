//! Batches and calls: what goes in, and how a call can end ([`Status`], [`CallError`]); the
//! results themselves are [`crate::run::CallResult`] and [`crate::run::BatchResult`].
//!
//! Takes in: a batch document (`{"tenant": "acme", "calls": [{"id", "tool", "input"}, ...]}`) or
//! calls built in code. Hands on: a [`Batch`] whose call ids are unique, in submission order.
//! Malformed documents are refused whole with the JSON pointer of the problem.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};

/// One tool call, as the model emitted it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Call {
    /// The call id (unique within its batch).
    pub id: String,
    /// The tool id.
    pub tool: String,
    /// The input (a JSON object for every well-formed call).
    pub input: Value,
    /// Why the call cannot run as the model sent it, found while reading the model's output
    /// (arguments that are not JSON, a missing id). Such a call ends with `invalid-input`, alone.
    #[serde(skip)]
    pub defect: Option<String>,
}

impl Call {
    /// Builds a call.
    pub fn new(id: impl Into<String>, tool: impl Into<String>, input: Value) -> Self {
        Call {
            id: id.into(),
            tool: tool.into(),
            input,
            defect: None,
        }
    }

    /// A call that cannot run as sent, with the reason (it ends with `invalid-input`).
    pub fn defective(
        id: impl Into<String>,
        tool: impl Into<String>,
        why: impl Into<String>,
    ) -> Self {
        Call {
            id: id.into(),
            tool: tool.into(),
            input: Value::Null,
            defect: Some(why.into()),
        }
    }
}

/// The tenant a batch runs for when the document names none.
pub const DEFAULT_TENANT: &str = "default";

/// A batch: one tenant, calls in submission order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    /// The tenant the calls run for.
    pub tenant: String,
    /// The calls, in the order the model emitted them.
    pub calls: Vec<Call>,
}

impl Batch {
    /// Builds a batch, refusing duplicate call ids.
    pub fn new(tenant: impl Into<String>, calls: Vec<Call>) -> Result<Self> {
        let batch = Batch {
            tenant: tenant.into(),
            calls,
        };
        batch.check_ids()?;
        Ok(batch)
    }

    /// Parses a batch document. `tenant` defaults to [`DEFAULT_TENANT`]; a call without `input`
    /// gets `{}`. Unknown keys, wrong types, empty ids and duplicate ids are errors naming their
    /// JSON pointer.
    ///
    /// ```
    /// use sluice_kernel::Batch;
    /// let b = Batch::from_value(&serde_json::json!({
    ///     "tenant": "acme", "calls": [{"id": "c1", "tool": "sluice.echo", "input": {}}]
    /// })).unwrap();
    /// assert_eq!(b.calls[0].id, "c1");
    /// let err = Batch::from_value(&serde_json::json!({"calls": [{"id": "c1"}]})).unwrap_err();
    /// assert!(err.to_string().contains("/calls/0/tool"));
    /// ```
    pub fn from_value(doc: &Value) -> Result<Self> {
        let malformed = |pointer: &str, message: &str| Error::MalformedBatch {
            pointer: pointer.to_owned(),
            message: message.to_owned(),
        };
        let Value::Object(top) = doc else {
            return Err(malformed(
                "",
                "a batch is a JSON object with `tenant` and `calls`",
            ));
        };
        for key in top.keys() {
            if key != "tenant" && key != "calls" {
                return Err(malformed(
                    &format!("/{}", crate::error::escape_pointer(key)),
                    &format!("unknown field `{key}` (a batch has `tenant` and `calls`)"),
                ));
            }
        }
        let tenant = match top.get("tenant") {
            None => DEFAULT_TENANT.to_owned(),
            Some(Value::String(t)) if !t.is_empty() => t.clone(),
            Some(_) => {
                return Err(malformed(
                    "/tenant",
                    "the tenant must be a non-empty string",
                ))
            }
        };
        let Some(Value::Array(items)) = top.get("calls") else {
            return Err(malformed("/calls", "`calls` must be an array of calls"));
        };
        let mut calls = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let at = format!("/calls/{i}");
            let Value::Object(obj) = item else {
                return Err(malformed(
                    &at,
                    "a call is an object with `id`, `tool` and `input`",
                ));
            };
            for key in obj.keys() {
                if !matches!(key.as_str(), "id" | "tool" | "input") {
                    return Err(malformed(
                        &format!("{at}/{}", crate::error::escape_pointer(key)),
                        &format!("unknown field `{key}` (a call has `id`, `tool` and `input`)"),
                    ));
                }
            }
            let string = |field: &str| match obj.get(field) {
                Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
                _ => Err(malformed(
                    &format!("{at}/{field}"),
                    &format!("the call's `{field}` must be a non-empty string"),
                )),
            };
            let id = string("id")?;
            let tool = string("tool")?;
            let input = obj
                .get("input")
                .cloned()
                .unwrap_or_else(|| Value::Object(Default::default()));
            calls.push(Call::new(id, tool, input));
        }
        Batch::new(tenant, calls)
    }

    fn check_ids(&self) -> Result<()> {
        let mut seen = std::collections::HashMap::with_capacity(self.calls.len());
        for (i, c) in self.calls.iter().enumerate() {
            if let Some(first) = seen.insert(c.id.as_str(), i) {
                return Err(Error::DuplicateCallId {
                    id: c.id.clone(),
                    first,
                    second: i,
                });
            }
        }
        Ok(())
    }
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The handler returned an output that fits the output schema.
    Ok,
    /// The call failed: unknown tool, invalid input or output, a handler error or panic.
    Error,
    /// The call's deadline passed.
    Timeout,
    /// The policy denied an access.
    Denied,
    /// An ask was not approved (rejected, timed out, or the approver failed).
    Rejected,
    /// A call it depends on failed, and the batch runs with `skip-dependents`.
    Skipped,
    /// The batch was cancelled before the call ended.
    Cancelled,
}

impl Status {
    /// The status as cli.md spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::Timeout => "timeout",
            Status::Denied => "denied",
            Status::Rejected => "rejected",
            Status::Skipped => "skipped",
            Status::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a call did not end `ok`: a short code and a message for the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallError {
    /// `unknown-tool`, `invalid-input`, `invalid-output`, `denied`, `rejected`, `skipped`,
    /// `timeout`, `cancelled`, `panic`, `missing-need`, `secret-unavailable`, `no-handler`, or a
    /// handler's own code (an HTTP tool's: `egress-denied`, `http-status`, `http-failed`,
    /// `invalid-response`).
    pub code: String,
    /// What happened, plainly (naming the rule, approver or failed call where there is one).
    pub message: String,
    /// Where the fault is (a JSON pointer): in the call's input for `invalid-input`, in the
    /// handler's output for `invalid-output` (`""` for the whole document, `/key` for one
    /// member). `None` when the error is not about a place in a document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
}

impl CallError {
    /// Builds a call error.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        CallError {
            code: code.into(),
            message: message.into(),
            pointer: None,
        }
    }

    /// The same error, placed at `pointer` in the call's input.
    pub fn at(mut self, pointer: impl Into<String>) -> Self {
        self.pointer = Some(pointer.into());
        self
    }
}
