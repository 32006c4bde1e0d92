//! The gateway's state: one kernel behind every connection and session, the drain, and the
//! way a call or a batch from a client runs.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;
use sluice_kernel::adapters::ToolNames;
use sluice_kernel::model::{Call, CallError, Status};
use sluice_kernel::provenance::BatchOrigin;
use sluice_kernel::run::{BatchHandle, BatchOptions, Kernel};
use sluice_kernel::{Batch, BatchResult, CallResult};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::elicit;
use crate::error::ServeError;
use crate::metrics::{self, Metrics};
use crate::options::{token_hash, GatewayOptions};
use crate::requests::InFlightIds;
use crate::sessions::Sessions;
use crate::trace;
use crate::watch::{self, Progress};

/// The gateway's state, shared by every connection and session.
#[derive(Debug)]
pub struct Gateway {
    kernel: Kernel,
    names: ToolNames,
    options: GatewayOptions,
    metrics: Arc<Metrics>,
    draining: AtomicBool,
    in_flight: AtomicUsize,
    /// The open MCP sessions, each with its tenant (found by `Mcp-Session-Id`: every request
    /// naming a session is refused unless it comes from the session's tenant).
    pub(crate) sessions: Arc<Sessions>,
    idle: Notify,
    /// Cancelled when a drain gives up waiting: every call still running is cancelled.
    abort: CancellationToken,
    /// Calls that answered `input_required` (`--approve elicit`, MCP 2026-07-28) and wait for
    /// their client's retry.
    pub(crate) asks: elicit::PendingAsks,
    /// The JSON-RPC request ids in flight in each MCP session (streamable HTTP).
    pub(crate) request_ids: Arc<InFlightIds>,
    /// This gateway's instance: random, so that connection ids in provenance stay unique
    /// across restarts.
    instance: String,
}

impl Gateway {
    /// A gateway in front of `kernel`.
    pub fn new(kernel: Kernel, options: GatewayOptions) -> Result<Self, ServeError> {
        let names = ToolNames::new(kernel.tools())?;
        Ok(Gateway {
            kernel,
            names,
            options,
            metrics: Arc::new(Metrics::new()),
            draining: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            sessions: Arc::default(),
            idle: Notify::new(),
            abort: CancellationToken::new(),
            asks: elicit::PendingAsks::default(),
            request_ids: Arc::default(),
            instance: instance_id(),
        })
    }

    /// This gateway's instance id (random, 8 hex digits): the first part of every connection
    /// id it records.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The kernel.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// The options.
    pub fn options(&self) -> &GatewayOptions {
        &self.options
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The tenant of a bearer token (`None`: no such token, or an operator's). Without tokens,
    /// every request is the default tenant.
    pub fn tenant_of(&self, authorization: Option<&str>) -> Option<String> {
        match self.principal_of(authorization)? {
            Principal::Tenant(t) => Some(t),
            Principal::Operator => None,
        }
    }

    /// Who a request's `Authorization` header names (`None`: nobody the gateway knows). Without
    /// tokens, every request is the default tenant.
    pub fn principal_of(&self, authorization: Option<&str>) -> Option<Principal> {
        if !self.options.requires_tokens() {
            return Some(Principal::Tenant(self.options.default_tenant.clone()));
        }
        let token = authorization?.strip_prefix("Bearer ")?.trim();
        let hash = token_hash(token);
        if self.options.operators.contains(&hash) {
            return Some(Principal::Operator);
        }
        self.options
            .tokens
            .get(&hash)
            .cloned()
            .map(Principal::Tenant)
    }

    /// The tenant of an MCP session (`None`: the gateway opened no session of that id, or it
    /// has ended).
    pub fn session_tenant(&self, session: &str) -> Option<String> {
        self.sessions.tenant_of(session)
    }

    /// How many MCP sessions are open.
    pub fn sessions(&self) -> usize {
        self.sessions.open()
    }

    /// The first dependency that cannot serve now, named, with why (see
    /// [`GatewayOptions::health`]).
    pub fn unhealthy(&self) -> Option<(String, String)> {
        self.options
            .health
            .iter()
            .find_map(|(name, check)| check().err().map(|why| (name.clone(), why.to_string())))
    }

    /// Whether a drain has begun (new work is refused).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Stops taking new work, waits up to the drain timeout for the calls in flight, then
    /// cancels the rest and waits for them to end; then sends the last spans.
    pub async fn drain(&self) {
        self.wait_for_calls().await;
        if let Some(t) = &self.options.telemetry {
            t.shutdown().await;
        }
    }

    async fn wait_for_calls(&self) {
        self.draining.store(true, Ordering::SeqCst);
        let quiet = async {
            loop {
                let notified = self.idle.notified();
                if self.in_flight.load(Ordering::SeqCst) == 0 {
                    return;
                }
                notified.await;
            }
        };
        if tokio::time::timeout(self.options.drain_timeout, quiet)
            .await
            .is_err()
        {
            tracing::warn!("drain timeout: cancelling the calls still in flight");
            self.abort.cancel();
            loop {
                let notified = self.idle.notified();
                if self.in_flight.load(Ordering::SeqCst) == 0 {
                    break;
                }
                notified.await;
            }
        }
    }

    /// Runs one MCP `tools/call` as its own batch in the tenant's conflict domain. `name` is the
    /// MCP tool name; `None` when no tool has it (the caller answers -32602). A submission the
    /// kernel refuses is an `internal` result.
    pub async fn call(
        self: &Arc<Self>,
        caller: Caller,
        call_id: &str,
        name: &str,
        arguments: Value,
    ) -> Option<CallResult> {
        // The one lookup of the tool: the kernel takes it as found.
        let key = self.names.id(name);
        let tool = self.kernel.resolve(&key)?;
        let call = Call::new(call_id, key, arguments);
        let tenant = caller.tenant.clone();
        let submit = |handle: &mut BatchHandle| handle.submit_resolved(&tool, call);
        match self.run_submitted(&tenant, 1, submit, caller).await {
            Ok(mut result) => result.results.pop(),
            Err(e) => Some(internal(call_id, tool.tool().id(), e.to_string())),
        }
    }

    /// Runs a batch in its tenant's conflict domain (the caller's tenant must be the batch's),
    /// counted in flight and in the metrics, its provenance batch record naming the caller's
    /// origin; the caller's cancellation or a drain that gives up cancels it.
    ///
    /// The batch is carried by a task of its own, so that a caller who goes away (an HTTP client
    /// that hangs up: its request's future is dropped) cancels it, and its calls still end, are
    /// counted and leave the in-flight gauge right; the task ends with the batch.
    pub async fn run_batch(
        self: &Arc<Self>,
        batch: Batch,
        caller: Caller,
    ) -> sluice_kernel::Result<BatchResult> {
        let Batch { tenant, calls } = batch;
        let count = calls.len();
        let submit =
            |handle: &mut BatchHandle| calls.into_iter().try_for_each(|c| handle.submit(c));
        self.run_submitted(&tenant, count, submit, caller).await
    }

    /// [`Gateway::run_batch`] of the `count` calls `submit` submits to the batch.
    async fn run_submitted(
        self: &Arc<Self>,
        tenant: &str,
        count: usize,
        submit: impl FnOnce(&mut BatchHandle) -> sluice_kernel::Result<()>,
        caller: Caller,
    ) -> sluice_kernel::Result<BatchResult> {
        let began = SystemTime::now();
        let mut options = BatchOptions::default().with_origin(caller.origin);
        if let Some(a) = caller.approver {
            options = options.with_approver(a);
        }
        // The client's trace travels on with the calls (a pack's `traceparent`).
        if let Some(tp) = &caller.traceparent {
            options = options.with_traceparent(tp);
        }
        let watch = watch::Watch::new(caller.progress, self.options.telemetry.clone());
        options = options.with_observer(watch.clone());
        let mut handle = self.kernel.open_with(tenant, options)?;
        if self.options.telemetry.is_some() {
            let mut scope = trace::SpanScope::new(tenant, caller.traceparent.as_deref());
            scope.batch = handle.id().to_owned();
            watch.set_scope(scope);
        }
        let flight = OwnedFlight::enter(self.clone());
        let mut gauge = metrics::InFlightCalls::started(self.metrics.clone(), tenant, count);
        submit(&mut handle)?;
        handle.close();
        let batch_cancel = handle.cancellation_token();
        let abort = self.abort.clone();
        let cancel = caller.cancel;
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let traced = self.options.telemetry.is_some();
        tokio::spawn(async move {
            let collect = async move {
                // Spans end as their calls do, not when the batch does.
                if traced {
                    while let Some(r) = handle.next_completion().await {
                        watch.finish(&r, began);
                    }
                }
                handle.finish().await
            };
            tokio::pin!(collect);
            let mut tx = tx;
            let result = tokio::select! {
                r = &mut collect => r,
                _ = async {
                    tokio::select! {
                        _ = cancel.cancelled() => {}
                        _ = abort.cancelled() => {}
                        _ = tx.closed() => {}
                    }
                } => {
                    batch_cancel.cancel();
                    collect.await
                }
            };
            for r in &result.results {
                // A metrics label: the tools a client names never add series (a result has a
                // version only when a registered tool matched).
                let tool = if r.version.is_some() {
                    &r.tool
                } else {
                    "unknown"
                };
                gauge.ended(tool, r);
            }
            drop(gauge);
            // The answer is handed over before the batch stops counting as in flight, so a
            // drain that sees none in flight finds every answer already with its connection.
            let _ = tx.send(result);
            drop(flight);
        });
        match (&mut rx).await {
            Ok(result) => Ok(result),
            // The task panicked (a defect): its calls were cancelled with it.
            Err(_) => Err(sluice_kernel::Error::Poisoned {
                what: "the gateway's batch task",
            }),
        }
    }

    /// The names table of the registered tools.
    pub fn names(&self) -> &ToolNames {
        &self.names
    }
}

/// A random instance id; the process id and the clock when the OS gives no random bytes.
fn instance_id() -> String {
    let mut bytes = [0u8; 4];
    if getrandom::fill(&mut bytes).is_err() {
        let t = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        bytes = (t ^ std::process::id()).to_be_bytes();
    }
    hex::encode(bytes)
}

/// Who sent a call or a batch, and how to reach them while it runs.
#[derive(Clone)]
#[non_exhaustive]
pub struct Caller {
    /// The tenant.
    pub tenant: String,
    /// Where the work came from (for the provenance batch record).
    pub origin: BatchOrigin,
    /// Cancelled when the client cancels (or its session ends).
    pub cancel: CancellationToken,
    /// Where progress goes, when the client asked for it.
    pub progress: Option<Progress>,
    /// Who answers the asks instead of the kernel's approver (the client, by elicitation).
    pub approver: Option<Arc<dyn sluice_kernel::authorize::Approver>>,
    /// The client's W3C `traceparent`, when it sent one: the calls' spans are its children.
    pub traceparent: Option<String>,
}

impl Caller {
    /// A caller of `tenant` from `origin`, cancelled by `cancel`.
    pub fn new(tenant: &str, origin: BatchOrigin, cancel: CancellationToken) -> Self {
        Caller {
            tenant: tenant.to_owned(),
            origin,
            cancel,
            progress: None,
            approver: None,
            traceparent: None,
        }
    }
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("tenant", &self.tenant)
            .field("origin", &self.origin)
            .field("progress", &self.progress.is_some())
            .field("approver", &self.approver.is_some())
            .field("traceparent", &self.traceparent)
            .finish_non_exhaustive()
    }
}

/// Who a request is, by its token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// A tenant: its calls, its sessions, its series.
    Tenant(String),
    /// An operator: every tenant's series on `/metrics`, and nothing else.
    Operator,
}

/// A batch in flight, counted until the guard drops (then it may wake a drain).
struct OwnedFlight(Arc<Gateway>);

impl OwnedFlight {
    fn enter(gateway: Arc<Gateway>) -> Self {
        gateway.in_flight.fetch_add(1, Ordering::SeqCst);
        OwnedFlight(gateway)
    }
}

impl Drop for OwnedFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

pub(crate) fn internal(call_id: &str, tool: &str, why: String) -> CallResult {
    CallResult {
        id: call_id.to_owned(),
        tool: tool.to_owned(),
        version: None,
        status: Status::Error,
        output: None,
        error: Some(CallError::new("internal", why)),
        started: None,
        ended: None,
        authorization: None,
        approver: None,
        recorded: None,
    }
}
