//! Planning: from a batch to its prepared calls and conflict graph, before anything runs.
//!
//! Takes in: a [`Batch`], the [`ToolRegistry`] and the [`Normalizers`]. Hands on: a [`Plan`] —
//! each call resolved to its tool, its input checked against the tool's input schema, its
//! accesses computed — and the batch's [`ConflictGraph`]. A call whose tool is unknown or whose
//! input fails the schema is *rejected* (it will never run and has no access); the other calls are
//! planned as usual. `sluice plan` refuses a batch with a rejected call; `sluice run` answers the
//! rejected call alone.

use std::sync::Arc;

use super::graph::ConflictGraph;
use crate::access::{Access, Normalizers};
use crate::error::{Diagnostic, ErrorCode};
use crate::model::{Batch, Call};
use crate::transport::{Tool, ToolRegistry};

/// Why a call cannot be run at all, found before it is scheduled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// No tool with the call's tool id is registered.
    UnknownTool,
    /// The input fails the tool's input schema at this pointer.
    InvalidInput(Diagnostic),
    /// The model's output for this call was malformed (see [`Call::defect`]).
    Malformed(String),
    /// Preparing the call panicked (a resource normalizer or the schema check): a defect of the
    /// embedder's code or of Sluice, not of the call. The message says where.
    Internal(String),
}

impl Rejection {
    /// The error code the call's result carries (`unknown-tool`, `invalid-input` or
    /// `internal`).
    pub fn code(&self) -> ErrorCode {
        match self {
            Rejection::UnknownTool => ErrorCode::UnknownTool,
            Rejection::InvalidInput(_) | Rejection::Malformed(_) => ErrorCode::InvalidInput,
            Rejection::Internal(_) => ErrorCode::Internal,
        }
    }

    /// Where in the call's input the fault is, for invalid input (a JSON pointer).
    pub fn pointer(&self) -> Option<&str> {
        match self {
            Rejection::InvalidInput(d) => Some(&d.pointer),
            _ => None,
        }
    }

    /// A message naming the call, the tool and (for invalid input) the JSON pointer.
    pub fn message(&self, call: &Call) -> String {
        match self {
            Rejection::UnknownTool => {
                format!("call `{}`: no tool `{}` is registered", call.id, call.tool)
            }
            Rejection::InvalidInput(d) => format!(
                "call `{}`: the input of `{}` fails its schema at `{}`: {}",
                call.id, call.tool, d.pointer, d.message
            ),
            Rejection::Malformed(why) => format!("call `{}` ({}): {why}", call.id, call.tool),
            Rejection::Internal(why) => format!("call `{}` ({}): {why}", call.id, call.tool),
        }
    }
}

/// A call resolved, checked and with its accesses computed.
#[derive(Debug, Clone)]
pub struct PreparedCall {
    /// The call as submitted, its `tool` the registered id when `id@version` named it, and its
    /// input in its tool's canonical form when the tool has one
    /// ([`crate::transport::Tool::with_canonical_input`]).
    pub call: Call,
    /// Its tool, when registered.
    pub tool: Option<Arc<Tool>>,
    /// Its accesses (empty for a rejected call).
    pub accesses: Vec<Access>,
    /// Why it cannot run, if it cannot.
    pub rejection: Option<Rejection>,
}

impl PreparedCall {
    /// Resolves, validates and computes the accesses of one call, for no tenant in particular
    /// (see [`PreparedCall::for_tenant`]).
    pub fn new(registry: &ToolRegistry, normalizers: &Normalizers, call: Call) -> Self {
        Self::for_tenant(registry, normalizers, "", call)
    }

    /// Resolves, validates and computes the accesses of one call of `tenant` (a tool whose
    /// resources are the tenant's own, such as the fs tools with a root per tenant, names them
    /// from the tenant).
    pub fn for_tenant(
        registry: &ToolRegistry,
        normalizers: &Normalizers,
        tenant: &str,
        call: Call,
    ) -> Self {
        let Some(tool) = registry.get(&call.tool).cloned() else {
            // A malformed call says so even when its tool is unknown too.
            let rejection = match call.defect.clone() {
                Some(why) => Rejection::Malformed(why),
                None => Rejection::UnknownTool,
            };
            return PreparedCall {
                call,
                tool: None,
                accesses: Vec::new(),
                rejection: Some(rejection),
            };
        };
        Self::of_tool(tool, normalizers, tenant, call)
    }

    /// [`PreparedCall::for_tenant`] for a call of `tool`, already found in the registry (its
    /// `tool` names it).
    pub(crate) fn of_tool(
        tool: Arc<Tool>,
        normalizers: &Normalizers,
        tenant: &str,
        call: Call,
    ) -> Self {
        if let Some(why) = call.defect.clone() {
            return PreparedCall {
                tool: Some(tool),
                call,
                accesses: Vec::new(),
                rejection: Some(Rejection::Malformed(why)),
            };
        }
        // `id@version` names the tool by its id from here on (policy, approvals, caps and
        // provenance see the id; the version travels with the tool).
        let mut call = call;
        if call.tool != tool.id() {
            call.tool = tool.id().to_owned();
        }
        // A panic here (a normalizer is the embedder's code) refuses this call alone; the
        // submitter, and every call already accepted, carry on.
        // A tool with a canonical input (the fs tools: the path the OS will touch) has it
        // computed here, once: the accesses, the policy, provenance and the handler all see it.
        let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            tool.check_input(&call.input).map(|()| {
                let canonical = tool.canonical_input(tenant, &call.input);
                let input = canonical.as_ref().unwrap_or(&call.input);
                (tool.plan_accesses(tenant, input, normalizers), canonical)
            })
        }));
        let (accesses, rejection) = match checked {
            Ok(Ok((accesses, canonical))) => {
                if let Some(input) = canonical {
                    call.input = input;
                }
                (accesses, None)
            }
            Ok(Err(d)) => (Vec::new(), Some(Rejection::InvalidInput(d))),
            Err(payload) => (
                Vec::new(),
                Some(Rejection::Internal(format!(
                    "computing its accesses panicked (a resource normalizer?): {}",
                    crate::error::panic_message(payload.as_ref())
                ))),
            ),
        };
        PreparedCall {
            call,
            tool: Some(tool),
            accesses,
            rejection,
        }
    }

    /// Whether the tool is read-only (false for an unknown tool).
    pub fn is_read_only(&self) -> bool {
        self.tool
            .as_ref()
            .is_some_and(|t| t.access_plan().is_read_only())
    }
}

/// A planned batch.
#[derive(Debug)]
pub struct Plan {
    /// The tenant.
    pub tenant: String,
    /// The calls, in submission order.
    pub calls: Vec<PreparedCall>,
    /// Their conflict graph (node `i` is `calls[i]`).
    pub graph: ConflictGraph,
}

impl Plan {
    /// The id of the call at position `i` (the graph's node `i`); empty past the end, which the
    /// graph never names.
    pub fn call_id(&self, i: usize) -> &str {
        self.calls.get(i).map_or("", |c| c.call.id.as_str())
    }

    /// The ids along the critical path ([`ConflictGraph::critical_path`]), first to last.
    pub fn critical_path_ids(&self) -> Vec<&str> {
        let path = self.graph.critical_path();
        path.into_iter().map(|i| self.call_id(i)).collect()
    }

    /// Plans a batch.
    ///
    /// ```
    /// use sluice_kernel::{access::Normalizers, builtin, order::Plan, Batch};
    /// let registry = builtin::registry(builtin::BuiltinConfig::default()).unwrap();
    /// let batch = Batch::from_value(&serde_json::json!({"tenant": "t", "calls": [
    ///     {"id": "a", "tool": "sluice.kv.put", "input": {"key": "k", "value": 1}},
    ///     {"id": "b", "tool": "sluice.kv.get", "input": {"key": "k"}}
    /// ]})).unwrap();
    /// let plan = Plan::new(&registry, &Normalizers::default(), batch);
    /// assert_eq!(plan.graph.predecessors(1), vec![0]);
    /// ```
    pub fn new(registry: &ToolRegistry, normalizers: &Normalizers, batch: Batch) -> Self {
        let mut graph = ConflictGraph::with_capacity(batch.calls.len());
        let calls: Vec<PreparedCall> = batch
            .calls
            .into_iter()
            .map(|c| {
                let p = PreparedCall::for_tenant(registry, normalizers, &batch.tenant, c);
                graph.add_call(&p.accesses);
                p
            })
            .collect();
        Plan {
            tenant: batch.tenant,
            calls,
            graph,
        }
    }

    /// The first rejected call, if any.
    pub fn first_rejection(&self) -> Option<(&PreparedCall, &Rejection)> {
        self.calls
            .iter()
            .find_map(|c| c.rejection.as_ref().map(|r| (c, r)))
    }
}
