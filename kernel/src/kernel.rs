//! The kernel: what an agent loop embeds.
//!
//! Takes in: tools (manifest + handler), an [`Authorizer`], an [`Approver`], a
//! [`ProvenanceSink`] and options, once, through [`KernelBuilder`]; then batches. Hands on:
//! results in submission order ([`Kernel::run`]), or completions as they happen
//! ([`BatchHandle`] is a `futures::Stream`), from batches submitted whole or call by call while
//! the model is still streaming ([`Kernel::open`]).
//!
//! ```
//! use sluice_kernel::{batch::{Batch, Call, Status}, builtin, kernel::Kernel};
//! use serde_json::json;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let kernel = Kernel::builder()
//!     .tools(builtin::registry(builtin::BuiltinConfig::default()).unwrap())
//!     .build()
//!     .unwrap();
//! let batch = Batch::new("acme", vec![
//!     Call::new("w", "sluice.kv.put", json!({"key": "k", "value": 1})),
//!     Call::new("r", "sluice.kv.get", json!({"key": "k"})),
//! ]).unwrap();
//! let result = kernel.run(batch).await.unwrap();
//! assert_eq!(result.results[1].status, Status::Ok);
//! assert_eq!(result.results[1].output.as_ref().unwrap()["value"], 1); // r ran after w
//! # });
//! ```

use std::collections::HashMap;
use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dashmap::DashMap;
use tokio::sync::{mpsc, Notify, OnceCell};
use tokio_util::sync::CancellationToken;

use crate::access::Normalizers;
use crate::authorize::{AllowAll, ApprovalOutcome, Approver, Authorizer, RejectAll};
use crate::batch::{Batch, BatchResult, Call, CallResult};
use crate::context::{Provisions, SecretResolver};
use crate::error::{Error, Result};
use crate::manifest::Transport;
#[cfg(feature = "mcp")]
use crate::mcp::{McpOptions, McpSessions};
use crate::plan::{Plan, PreparedCall};
use crate::provenance::{BatchRecord, NoProvenance, ProvenanceSink, Record};
use crate::registry::{Tool, ToolRegistry};
use crate::scheduler::{Domains, ReadyQueue};
use crate::transport::{SpecSynthesizer, Synthesizers};

/// What happens to the dependents of a call that fails (error, timeout, panic).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnFailure {
    /// They still run: the order existed for consistency, not because they need the result.
    #[default]
    Continue,
    /// They are skipped, and theirs, transitively.
    SkipDependents,
}

/// Options a kernel is built with (see [`KernelBuilder`] for the defaults).
#[derive(Debug, Clone)]
pub struct KernelOptions {
    /// The most calls running at once across all tenants (`None`: no cap).
    pub max_concurrency: Option<usize>,
    /// The most calls of one tool running at once.
    pub tool_concurrency: HashMap<String, usize>,
    /// The default failure mode of a batch.
    pub on_failure: OnFailure,
    /// The deadline of a call whose tool declares no `limits.cpuMs` (`None`: none).
    pub default_timeout: Option<Duration>,
    /// How long an ask may wait for its approver before it is rejected.
    pub approval_timeout: Duration,
}

impl Default for KernelOptions {
    fn default() -> Self {
        KernelOptions {
            max_concurrency: None,
            tool_concurrency: HashMap::new(),
            on_failure: OnFailure::Continue,
            default_timeout: None,
            approval_timeout: Duration::from_secs(300),
        }
    }
}

/// Options of one batch.
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchOptions {
    /// Overrides the kernel's failure mode for this batch.
    pub on_failure: Option<OnFailure>,
    /// Ready calls of higher priority get permits first (default 0); among equals, submission
    /// order.
    pub priority: i32,
}

/// The shared state of a kernel.
pub(crate) struct KernelInner {
    pub(crate) tools: ToolRegistry,
    pub(crate) normalizers: Normalizers,
    pub(crate) authorizer: Arc<dyn Authorizer>,
    pub(crate) approver: Arc<dyn Approver>,
    pub(crate) sink: Arc<dyn ProvenanceSink>,
    pub(crate) options: KernelOptions,
    pub(crate) provisions: Arc<Provisions>,
    pub(crate) ready: Arc<ReadyQueue>,
    pub(crate) domains: Arc<Domains>,
    /// In-flight first-use asks, per (tenant, tool).
    pub(crate) first_use: DashMap<(String, String), Arc<OnceCell<ApprovalOutcome>>>,
    seq: AtomicU64,
    batches: AtomicU64,
    #[cfg(feature = "mcp")]
    mcp: McpSessions,
}

/// Builds a [`Kernel`]. Every setting has a default:
/// tools: none; authorizer: [`AllowAll`]; approver: [`RejectAll`] (fail closed); provenance:
/// [`NoProvenance`]; normalizers: [`Normalizers::default`] (`fs:`); options:
/// [`KernelOptions::default`] (no caps, `continue`, no default timeout, approvals time out after
/// 300 s); no secrets, env values, capabilities, bindings or need slots.
#[derive(Default)]
pub struct KernelBuilder {
    tools: ToolRegistry,
    pending: Vec<Arc<Tool>>,
    normalizers: Option<Normalizers>,
    authorizer: Option<Arc<dyn Authorizer>>,
    approver: Option<Arc<dyn Approver>>,
    sink: Option<Arc<dyn ProvenanceSink>>,
    options: KernelOptions,
    provisions: Provisions,
    allow_unrunnable: bool,
    synthesizers: Option<Synthesizers>,
    #[cfg(feature = "mcp")]
    mcp_options: McpOptions,
}

impl fmt::Debug for KernelBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelBuilder")
            .field("tools", &(self.tools.len() + self.pending.len()))
            .field("options", &self.options)
            .finish()
    }
}

impl KernelBuilder {
    /// Adds every tool of a registry.
    pub fn tools(mut self, registry: ToolRegistry) -> Self {
        self.pending.extend(registry.iter().cloned());
        self
    }

    /// Adds one tool.
    pub fn tool(mut self, tool: Tool) -> Self {
        self.pending.push(Arc::new(tool));
        self
    }

    /// The authorizer (default [`AllowAll`]).
    pub fn authorizer(mut self, a: impl Authorizer) -> Self {
        self.authorizer = Some(Arc::new(a));
        self
    }

    /// The authorizer, shared.
    pub fn authorizer_arc(mut self, a: Arc<dyn Authorizer>) -> Self {
        self.authorizer = Some(a);
        self
    }

    /// The approver that answers asks (default [`RejectAll`]).
    pub fn approver(mut self, a: impl Approver) -> Self {
        self.approver = Some(Arc::new(a));
        self
    }

    /// The provenance sink (default [`NoProvenance`]).
    pub fn provenance(mut self, s: impl ProvenanceSink) -> Self {
        self.sink = Some(Arc::new(s));
        self
    }

    /// The provenance sink, shared.
    pub fn provenance_arc(mut self, s: Arc<dyn ProvenanceSink>) -> Self {
        self.sink = Some(s);
        self
    }

    /// The resource normalizers (default: `fs:` only).
    pub fn normalizers(mut self, n: Normalizers) -> Self {
        self.normalizers = Some(n);
        self
    }

    /// The most calls running at once (default: no cap).
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.options.max_concurrency = Some(n.max(1));
        self
    }

    /// The most calls of `tool` running at once (default: no cap).
    pub fn tool_concurrency(mut self, tool: &str, n: usize) -> Self {
        self.options
            .tool_concurrency
            .insert(tool.to_owned(), n.max(1));
        self
    }

    /// The default failure mode (default [`OnFailure::Continue`]).
    pub fn on_failure(mut self, mode: OnFailure) -> Self {
        self.options.on_failure = mode;
        self
    }

    /// The deadline of calls whose tool declares no `limits.cpuMs` (default: none).
    pub fn default_timeout(mut self, d: Duration) -> Self {
        self.options.default_timeout = Some(d);
        self
    }

    /// How long an ask waits for the approver before it is rejected (default 300 s).
    pub fn approval_timeout(mut self, d: Duration) -> Self {
        self.options.approval_timeout = d;
        self
    }

    /// The secret resolver handlers reach through [`crate::tool::ToolContext::resolve_secret`]
    /// (default: none, so every secret is unavailable).
    pub fn secrets(mut self, r: impl SecretResolver) -> Self {
        self.provisions.secrets = Some(Arc::new(r));
        self
    }

    /// An environment value for `needsSpec.env` (default: none).
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.provisions
            .env
            .insert(name.to_owned(), value.to_owned());
        self
    }

    /// Grants a capability (default: none).
    pub fn grant_capability(mut self, name: &str) -> Self {
        self.provisions.capabilities.push(name.to_owned());
        self
    }

    /// Grants a binding (default: none).
    pub fn grant_binding(mut self, name: &str) -> Self {
        self.provisions.bindings.push(name.to_owned());
        self
    }

    /// Fills the named need slot (`ctx.need::<T>(name)`) (default: only `tenant`, `batch`, `call`).
    pub fn need<T: std::any::Any + Send + Sync>(mut self, name: &str, value: T) -> Self {
        self.provisions
            .needs
            .insert(name.to_owned(), Arc::new(value));
        self
    }

    /// Registers (or replaces) the synthesizer that makes handlers from `spec`s of `kind`
    /// (default: `http`).
    pub fn synthesizer(mut self, kind: &str, s: impl SpecSynthesizer) -> Self {
        self.synthesizers
            .get_or_insert_with(Synthesizers::default)
            .register(kind, s);
        self
    }

    /// Accept tools the kernel cannot carry out (no native handler); their calls end with
    /// `no-handler`. Default `false`: `build` refuses them, naming each.
    pub fn allow_unrunnable_tools(mut self, yes: bool) -> Self {
        self.allow_unrunnable = yes;
        self
    }

    /// Options of the MCP transport (default [`McpOptions::default`]).
    #[cfg(feature = "mcp")]
    pub fn mcp_options(mut self, options: McpOptions) -> Self {
        self.mcp_options = options;
        self
    }

    /// Builds the kernel; refuses duplicate tool ids and (unless allowed) tools it cannot run.
    ///
    /// Each tool's transport is resolved here: `native` takes only a handler registered in
    /// code; `mcp` only the MCP endpoint; `auto` a native handler, else the handler synthesized
    /// from the `spec`, else the MCP endpoint. MCP servers are not started here: each endpoint's
    /// session starts with its first call.
    pub fn build(self) -> Result<Kernel> {
        let mut tools = self.tools;
        let synthesizers = self.synthesizers.unwrap_or_default();
        let resolved = resolve_transports(self.pending, &synthesizers)?;
        #[cfg(feature = "mcp")]
        let mcp = McpSessions::new(
            resolved
                .iter()
                .filter(|(_, by_mcp)| *by_mcp)
                .map(|(t, _)| &**t.manifest()),
            &self.provisions.env,
            &self.mcp_options,
        );
        for (t, by_mcp) in resolved {
            #[cfg(feature = "mcp")]
            let t = match mcp.handler(t.manifest()).filter(|_| by_mcp) {
                Some(handler) => with_handler(&t, handler)?,
                None => t,
            };
            #[cfg(not(feature = "mcp"))]
            let _ = by_mcp;
            if !self.allow_unrunnable && t.handler().is_none() {
                return Err(Error::Unrunnable {
                    id: t.id().to_owned(),
                    source_name: t.source().to_string(),
                    why: unrunnable_reason(t.manifest()).to_owned(),
                });
            }
            tools.insert_arc(t)?;
        }
        let ready = Arc::new(ReadyQueue::new(
            self.options.max_concurrency,
            self.options.tool_concurrency.clone(),
        ));
        Ok(Kernel {
            inner: Arc::new(KernelInner {
                tools,
                normalizers: self.normalizers.unwrap_or_default(),
                authorizer: self.authorizer.unwrap_or_else(|| Arc::new(AllowAll)),
                approver: self.approver.unwrap_or_else(|| Arc::new(RejectAll)),
                sink: self.sink.unwrap_or_else(|| Arc::new(NoProvenance)),
                options: self.options,
                provisions: Arc::new(self.provisions),
                ready,
                domains: Arc::default(),
                first_use: DashMap::new(),
                seq: AtomicU64::new(0),
                batches: AtomicU64::new(0),
                #[cfg(feature = "mcp")]
                mcp,
            }),
        })
    }
}

/// Resolves each tool's transport as far as native handlers and specs go: each tool (a spec's
/// handler synthesized in), and whether the MCP transport carries it out.
fn resolve_transports(
    pending: Vec<Arc<Tool>>,
    synthesizers: &Synthesizers,
) -> Result<Vec<(Arc<Tool>, bool)>> {
    let mut resolved = Vec::with_capacity(pending.len());
    for t in pending {
        let m = t.manifest();
        let entry = match m.transport() {
            Transport::Native => (t, false),
            Transport::Mcp => (t, true),
            Transport::Auto if t.handler().is_some() => (t, false),
            Transport::Auto => match synthesizers.synthesize(m) {
                Some(made) => {
                    let handler = made.map_err(|why| Error::InvalidManifest {
                        source_name: t.source().to_string(),
                        errors: vec![crate::validate::Diagnostic::new("/spec", why)],
                    })?;
                    (with_handler(&t, handler)?, false)
                }
                None => {
                    let by_mcp = m.mcp_endpoint.is_some();
                    (t, by_mcp)
                }
            },
        };
        resolved.push(entry);
    }
    Ok(resolved)
}

/// The same tool, carried out by `handler`.
fn with_handler(t: &Tool, handler: Arc<dyn crate::tool::Handler>) -> Result<Arc<Tool>> {
    let tool = Tool::new((**t.manifest()).clone(), t.source().clone(), Some(handler))?;
    Ok(Arc::new(tool))
}

/// Why a tool has no way to run: for [`Error::Unrunnable`] at build, and for the `no-handler`
/// result of a call to a tool the embedder accepted anyway.
pub(crate) fn unrunnable_reason(m: &crate::manifest::Manifest) -> &'static str {
    match (m.transport(), &m.mcp_endpoint) {
        (Transport::Native, _) => {
            "it is `transport: native` and no native handler is registered under its id"
        }
        (_, Some(_)) if !cfg!(feature = "mcp") => {
            "its MCP endpoint needs the `mcp` feature, which this build leaves out"
        }
        _ => "it has no native handler registered in code, no `spec` and no `mcpEndpoint`",
    }
}

/// The dispatch core an agent loop embeds. Cheap to clone; all clones share one state.
#[derive(Clone)]
pub struct Kernel {
    inner: Arc<KernelInner>,
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel")
            .field("tools", &self.inner.tools.len())
            .field("tenants", &self.inner.domains.len())
            .field("options", &self.inner.options)
            .finish()
    }
}

impl Kernel {
    /// A builder with every default.
    pub fn builder() -> KernelBuilder {
        KernelBuilder::default()
    }

    /// The MCP endpoints of the registered tools and the state of their sessions.
    #[cfg(feature = "mcp")]
    pub fn mcp_status(&self) -> Vec<crate::mcp::EndpointStatus> {
        self.inner.mcp.status()
    }

    /// The registered tools.
    pub fn tools(&self) -> &ToolRegistry {
        &self.inner.tools
    }

    /// Plans a batch without running it.
    pub fn plan(&self, batch: Batch) -> Plan {
        Plan::new(&self.inner.tools, &self.inner.normalizers, batch)
    }

    /// Opens a batch for `tenant` into which calls are submitted one at a time; each starts as
    /// soon as it may. Must be called inside a tokio runtime.
    pub fn open(&self, tenant: &str) -> Result<BatchHandle> {
        self.open_with(tenant, BatchOptions::default())
    }

    /// [`Kernel::open`] with options.
    pub fn open_with(&self, tenant: &str, options: BatchOptions) -> Result<BatchHandle> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime);
        }
        let n = self.inner.batches.fetch_add(1, Ordering::Relaxed);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(BatchShared {
            id: Arc::from(format!("b{:x}-{n}", now.as_millis())),
            tenant: Arc::from(tenant),
            started: Instant::now(),
            started_unix_ms: now.as_secs_f64() * 1000.0,
            cancel: CancellationToken::new(),
            on_failure: options.on_failure.unwrap_or(self.inner.options.on_failure),
            state: Mutex::new(BatchState {
                sender: Some(tx),
                ..BatchState::default()
            }),
            done: Notify::new(),
        });
        Ok(BatchHandle {
            kernel: self.inner.clone(),
            shared,
            rx,
            priority: options.priority,
            detached: false,
        })
    }

    /// Submits a whole batch (closed: no call can be added) and returns its handle.
    pub fn submit(&self, batch: Batch) -> Result<BatchHandle> {
        let mut handle = self.open(&batch.tenant)?;
        for call in batch.calls {
            handle.submit(call)?;
        }
        handle.close();
        Ok(handle)
    }

    /// Runs a batch to the end; results in submission order.
    pub async fn run(&self, batch: Batch) -> Result<BatchResult> {
        Ok(self.submit(batch)?.finish().await)
    }

    /// For a tenant: (calls not finished, calls its conflict index still remembers). Memory is
    /// bounded by these; both return to 0 when the tenant is idle.
    pub fn tenant_load(&self, tenant: &str) -> (usize, usize) {
        self.inner.domains.load(tenant)
    }

    /// How many tenants the kernel holds state for: a conflict domain (a call not finished, or a
    /// batch not ended) or a first-use approval being asked. An idle tenant costs nothing: this
    /// returns to 0 when every tenant is idle.
    pub fn tenants_held(&self) -> usize {
        let asking = self
            .inner
            .first_use
            .iter()
            .map(|e| e.key().0.clone())
            .filter(|t| !self.inner.domains.contains(t))
            .collect::<std::collections::HashSet<_>>();
        self.inner.domains.len() + asking.len()
    }
}

#[derive(Default)]
struct BatchState {
    ids: HashMap<String, usize>,
    results: Vec<Option<CallResult>>,
    positions: Vec<usize>,
    remaining: usize,
    closed: bool,
    done: bool,
    sender: Option<mpsc::UnboundedSender<usize>>,
}

/// The state of one batch, shared by its calls.
pub(crate) struct BatchShared {
    pub(crate) id: Arc<str>,
    pub(crate) tenant: Arc<str>,
    pub(crate) started: Instant,
    started_unix_ms: f64,
    pub(crate) cancel: CancellationToken,
    pub(crate) on_failure: OnFailure,
    state: Mutex<BatchState>,
    done: Notify,
}

impl BatchShared {
    /// Unix time in ms of an offset from the batch's start.
    pub(crate) fn unix_ms(&self, since_start: Duration) -> f64 {
        self.started_unix_ms + since_start.as_secs_f64() * 1000.0
    }

    pub(crate) fn note_position(&self, position: usize) {
        if let Ok(mut st) = self.state.lock() {
            st.positions.push(position);
        }
    }

    /// Stores a call's result and sends it as a completion; ends the batch after its last call.
    pub(crate) async fn deliver(&self, index: usize, result: CallResult, kernel: &KernelInner) {
        let ended = {
            let Ok(mut st) = self.state.lock() else {
                return;
            };
            if let Some(slot) = st.results.get_mut(index) {
                *slot = Some(result);
            }
            // Completions carry the index; the result is cloned only when someone reads it.
            if let Some(tx) = &st.sender {
                let _ = tx.send(index);
            }
            st.remaining = st.remaining.saturating_sub(1);
            self.take_end(&mut st)
        };
        if let Some(positions) = ended {
            self.end(positions, kernel).await;
        }
    }

    /// If the batch is closed and every call delivered (and it has not ended yet): marks it ended
    /// and returns its domain positions.
    fn take_end(&self, st: &mut BatchState) -> Option<Vec<usize>> {
        if st.closed && st.remaining == 0 && !st.done {
            st.done = true;
            Some(std::mem::take(&mut st.positions))
        } else {
            None
        }
    }

    async fn end(&self, positions: Vec<usize>, kernel: &KernelInner) {
        let (calls, makespan) = match self.state.lock() {
            Ok(st) => (
                st.ids_in_order(),
                st.results
                    .iter()
                    .flatten()
                    .filter_map(|r| r.ended)
                    .max()
                    .unwrap_or_default(),
            ),
            Err(_) => (Vec::new(), Duration::ZERO),
        };
        let record = BatchRecord {
            batch: self.id.to_string(),
            tenant: self.tenant.to_string(),
            calls,
            started_at_ms: self.started_unix_ms,
            ended_at_ms: self.unix_ms(makespan.max(self.started.elapsed())),
        };
        if let Err(why) = kernel.sink.record(Record::Batch(record)).await {
            tracing::error!(error = %why, "the provenance sink refused a batch record");
        }
        if !positions.is_empty() {
            // A domain that holds positions cannot have been evicted: they are not settled yet.
            if let Some(domain) = kernel.domains.existing(&self.tenant) {
                domain.lock().batch_ended(&positions);
            }
        }
        if let Ok(mut st) = self.state.lock() {
            st.sender = None; // ends the completion stream
        }
        self.done.notify_waiters();
    }
}

impl BatchState {
    fn ids_in_order(&self) -> Vec<String> {
        let mut ids: Vec<(&String, &usize)> = self.ids.iter().collect();
        ids.sort_by_key(|(_, i)| **i);
        ids.into_iter().map(|(id, _)| id.clone()).collect()
    }
}

/// A batch in flight: submit calls into it, read completions as they happen (it is a
/// `Stream<Item = CallResult>`), or wait for every result in submission order.
///
/// Dropping the handle before the batch ends cancels it (see [`BatchHandle::detach`]).
pub struct BatchHandle {
    kernel: Arc<KernelInner>,
    shared: Arc<BatchShared>,
    rx: mpsc::UnboundedReceiver<usize>,
    priority: i32,
    detached: bool,
}

impl fmt::Debug for BatchHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchHandle")
            .field("id", &self.shared.id)
            .field("tenant", &self.shared.tenant)
            .finish()
    }
}

impl BatchHandle {
    /// The batch id.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// Submits the next call (submission order is the order of these calls). Its synchronous
    /// stages run now: an unknown tool, an invalid input or a denial is answered at once, as a
    /// result. Refuses a call id already used in this batch, and any call once closed.
    pub fn submit(&mut self, call: Call) -> Result<()> {
        let priority = self.priority;
        self.submit_with_priority(call, priority)
    }

    /// [`BatchHandle::submit`] with a priority for this call.
    pub fn submit_with_priority(&mut self, call: Call, priority: i32) -> Result<()> {
        let index = {
            let Ok(mut st) = self.shared.state.lock() else {
                return Err(Error::Poisoned {
                    what: "the batch's state",
                });
            };
            if st.closed {
                return Err(Error::BatchClosed {
                    id: call.id.clone(),
                });
            }
            let index = st.results.len();
            if let Some(first) = st.ids.get(&call.id) {
                return Err(Error::DuplicateCallId {
                    id: call.id.clone(),
                    first: *first,
                    second: index,
                });
            }
            st.ids.insert(call.id.clone(), index);
            st.results.push(None);
            st.remaining += 1;
            index
        };
        let seq = self.kernel.seq.fetch_add(1, Ordering::Relaxed);
        let prepared = PreparedCall::new(&self.kernel.tools, &self.kernel.normalizers, call);
        crate::dispatch::submit(
            self.kernel.clone(),
            self.shared.clone(),
            index,
            seq,
            priority,
            prepared,
        );
        Ok(())
    }

    /// No more calls will come: the batch ends when the submitted ones have.
    pub fn close(&mut self) {
        let ended = match self.shared.state.lock() {
            Ok(mut st) => {
                st.closed = true;
                self.shared.take_end(&mut st)
            }
            Err(_) => None,
        };
        if let Some(positions) = ended {
            let (shared, kernel) = (self.shared.clone(), self.kernel.clone());
            // A handle dropped after its runtime shut down has nothing left to end on.
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move { shared.end(positions, &kernel).await });
            }
        }
    }

    /// Cancels the batch: calls waiting are not started, calls running are stopped; all are
    /// reported `cancelled`.
    pub fn cancel(&self) {
        self.shared.cancel.cancel();
    }

    /// The token that cancels this batch.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.shared.cancel.clone()
    }

    /// Lets the batch run on after the handle is dropped. No call can be added any more, so the
    /// batch is closed: it ends when its calls have.
    pub fn detach(mut self) {
        self.close();
        self.detached = true;
    }

    /// The next call to complete, in completion order; `None` once the batch has ended and every
    /// completion has been read.
    pub async fn next_completion(&mut self) -> Option<CallResult> {
        let index = self.rx.recv().await?;
        self.result_at(index)
    }

    fn result_at(&self, index: usize) -> Option<CallResult> {
        self.shared
            .state
            .lock()
            .ok()
            .and_then(|st| st.results.get(index).cloned().flatten())
    }

    /// Closes the batch and waits for its end; the results in submission order.
    pub async fn finish(mut self) -> BatchResult {
        self.close();
        loop {
            let notified = self.shared.done.notified();
            let done = self
                .shared
                .state
                .lock()
                .map(|s| s.done && s.sender.is_none());
            if done.unwrap_or(true) {
                break;
            }
            notified.await;
        }
        let (results, makespan) = match self.shared.state.lock() {
            Ok(mut st) => {
                let results: Vec<CallResult> = st.results.drain(..).flatten().collect();
                let makespan = results
                    .iter()
                    .filter_map(|r| r.ended)
                    .max()
                    .unwrap_or_default();
                (results, makespan)
            }
            Err(_) => (Vec::new(), Duration::ZERO),
        };
        BatchResult {
            batch_id: self.shared.id.to_string(),
            tenant: self.shared.tenant.to_string(),
            results,
            makespan,
        }
    }
}

impl futures::Stream for BatchHandle {
    type Item = CallResult;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<CallResult>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(index)) => Poll::Ready(self.result_at(index)),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for BatchHandle {
    /// Cancels a batch that has not ended, and closes it: no call can come any more, so it ends
    /// (and its tenant's domain may forget it) once its calls have.
    fn drop(&mut self) {
        if self.detached {
            return;
        }
        let done = self.shared.state.lock().map(|s| s.done).unwrap_or(true);
        if !done {
            self.shared.cancel.cancel();
            self.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Status;
    use serde_json::json;

    /// A panic inside the conflict index, with the tenant's domain locked: the call concerned
    /// fails `internal`, the lock is not poisoned, and the tenant's next batches run in order.
    #[tokio::test]
    async fn a_panic_under_the_domain_lock_fails_the_call_and_leaves_the_tenant_usable() {
        let kv = crate::builtin::KvStore::new();
        let tools = crate::builtin::registry(crate::builtin::BuiltinConfig {
            root: std::env::temp_dir(),
            kv: kv.clone(),
        })
        .unwrap();
        let kernel = Kernel::builder().tools(tools).build().unwrap();
        let put =
            |id: &str, v: i64| Call::new(id, "sluice.kv.put", json!({"key": "k", "value": v}));
        let incr = |id: &str| Call::new(id, "sluice.kv.incr", json!({"key": "k", "delay_ms": 5}));

        let tenant: Arc<str> = Arc::from("t");
        let domain = kernel.inner.domains.get(&tenant);
        domain.lock().panic_next_insert = true;
        let r = kernel
            .run(Batch::new("t", vec![put("p", 1)]).unwrap())
            .await
            .unwrap();
        assert_eq!(r.results[0].status, Status::Error);
        assert_eq!(r.results[0].error.as_ref().unwrap().code, "internal");
        drop(domain);

        let r = kernel
            .run(Batch::new("t", vec![put("a", 1), incr("b"), incr("c")]).unwrap())
            .await
            .unwrap();
        assert!(r.results.iter().all(|r| r.status == Status::Ok), "{r:?}");
        assert_eq!(r.results[2].output.as_ref().unwrap()["value"], 3);
        assert_eq!(kernel.tenant_load("t"), (0, 0));
        assert_eq!(kernel.tenants_held(), 0);
    }
}
