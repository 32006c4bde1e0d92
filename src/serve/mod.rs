//! `sluice serve`: the gateway. One kernel — its tools, each tenant's conflict domain, the
//! policy and the provenance log — behind an MCP server (streamable HTTP at `/mcp`, or stdio) and
//! a small HTTP batch API (`/v1/run`, `/v1/plan`, `/v1/tools`), with `/healthz` and `/metrics`.
//!
//! Every MCP `tools/call` is one call, submitted into its tenant's conflict domain when it
//! arrives: conflicting calls, from any session of the tenant and from the batch API, run one
//! after another in arrival order; the rest run at once. Tenants come from bearer tokens (their
//! sha256 in a token file), or are the one default tenant on a loopback address.
//!
//! ```no_run
//! use std::sync::Arc;
//! use sluice::kernel::{builtin, Kernel};
//! use sluice::serve::{Gateway, GatewayOptions};
//!
//! # async fn run() -> std::io::Result<()> {
//! let kernel = Kernel::builder()
//!     .tools(builtin::registry(builtin::BuiltinConfig::default()).unwrap())
//!     .build()
//!     .unwrap();
//! let gateway = Arc::new(Gateway::new(kernel, GatewayOptions::default()).unwrap());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! sluice::serve::serve_http(gateway, listener, std::future::pending()).await
//! # }
//! ```

mod conn;
mod elicit;
mod http;
mod mcp;
mod metrics;
mod trace;
mod watch;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use dashmap::DashMap;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub use conn::{descriptor_limit, ConnectionLimits};
pub use http::serve_http;
pub use mcp::{serve_stdio, McpSession};
pub use metrics::Metrics;
pub use trace::Telemetry;
pub use watch::Progress;

use crate::kernel::adapters::ToolNames;
use crate::kernel::authorize::DecidedBy;
use crate::kernel::model::{Call, Status};
use crate::kernel::provenance::BatchOrigin;
use crate::kernel::run::{BatchOptions, Kernel};
use crate::kernel::CallResult;

/// Why the gateway could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The token file is unreadable or malformed.
    #[error("the token file {path}: {why}")]
    Tokens {
        /// The file.
        path: String,
        /// What is wrong, with the JSON pointer where there is one.
        why: String,
    },
    /// The tools' names collide.
    #[error(transparent)]
    Kernel(#[from] crate::kernel::Error),
    /// The OTLP endpoint is unusable.
    #[error("--otlp {url}: {why}")]
    Otlp {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
}

/// How the gateway serves.
#[derive(Clone)]
#[non_exhaustive]
pub struct GatewayOptions {
    /// sha256 (lowercase hex) of each bearer token -> its tenant. Empty (and no operators): no
    /// tokens, every request is `default_tenant` (loopback only; the CLI enforces that).
    pub tokens: HashMap<String, String>,
    /// sha256 (lowercase hex) of each operator token: it reads every tenant's series on
    /// `/metrics` (a tenant's token reads only its own) and runs nothing.
    pub operators: HashSet<String>,
    /// The tenant of every request when there are no tokens, and of a stdio session.
    pub default_tenant: String,
    /// The largest request body taken (413 beyond; default 4 MiB).
    pub max_body: usize,
    /// How long a drain waits for calls in flight before cancelling them (default 30 s).
    pub drain_timeout: Duration,
    /// The most MCP sessions open at once; a new session beyond it gets 503 (default 1024).
    /// Idle sessions are closed by rmcp's keep-alive, so abandoned ones free their place.
    pub max_sessions: usize,
    /// Whether a tool is left out of a tenant's `tools/list` (`(tenant, tool id)`: the tools a
    /// tool rule of its policy denies). Default: every tool is listed.
    pub hidden: Option<HiddenTools>,
    /// How long a write to a client may stay blocked (the client stopped reading) before its
    /// connection is dropped (default 30 s). An SSE stream that has nothing to send is not
    /// blocked.
    pub write_timeout: Duration,
    /// The limits on connections: the cap and a peer's share, and the header, idle and body
    /// timeouts (see [`ConnectionLimits`]).
    pub connections: ConnectionLimits,
    /// Whether an MCP call's asks go to its client's user through MCP elicitation
    /// (`--approve elicit`). Without it, the kernel's approver answers.
    pub elicit: bool,
    /// Where each call's span goes (`--otlp`); `None`: no spans.
    pub telemetry: Option<Arc<Telemetry>>,
    /// What `/healthz` asks besides the drain: each check names a dependency (the shared
    /// domain's database, the provenance database) and says why it cannot serve; any `Err` makes
    /// `/healthz` answer 503 with it.
    pub health: Vec<HealthCheck>,
}

/// A dependency's health for `/healthz`: its name, and `Err(why)` while it cannot serve.
pub type HealthCheck = (String, Arc<dyn Fn() -> Result<(), String> + Send + Sync>);

/// Decides which tools a tenant's `tools/list` leaves out: `(tenant, tool id) -> hidden`.
pub type HiddenTools = Arc<dyn Fn(&str, &str) -> bool + Send + Sync>;

impl std::fmt::Debug for GatewayOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayOptions")
            .field("tenants", &self.tokens.len())
            .field("operators", &self.operators.len())
            .field("default_tenant", &self.default_tenant)
            .field("max_body", &self.max_body)
            .field("drain_timeout", &self.drain_timeout)
            .field("max_sessions", &self.max_sessions)
            .field("hidden", &self.hidden.is_some())
            .field("write_timeout", &self.write_timeout)
            .field("connections", &self.connections)
            .field("elicit", &self.elicit)
            .field("telemetry", &self.telemetry.as_ref().map(|t| t.endpoint()))
            .field(
                "health",
                &self.health.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Default for GatewayOptions {
    fn default() -> Self {
        GatewayOptions {
            tokens: HashMap::new(),
            operators: HashSet::new(),
            default_tenant: "default".into(),
            max_body: 4 << 20,
            drain_timeout: Duration::from_secs(30),
            max_sessions: 1024,
            hidden: None,
            write_timeout: Duration::from_secs(30),
            connections: ConnectionLimits::default(),
            elicit: false,
            telemetry: None,
            health: Vec::new(),
        }
    }
}

impl GatewayOptions {
    /// Adds a dependency `/healthz` checks (see [`GatewayOptions::health`]).
    pub fn with_health_check(
        mut self,
        name: &str,
        check: Arc<dyn Fn() -> Result<(), String> + Send + Sync>,
    ) -> Self {
        self.health.push((name.to_owned(), check));
        self
    }

    /// Sets the tenants' tokens (sha256 hex -> tenant).
    pub fn with_tokens(mut self, tokens: HashMap<String, String>) -> Self {
        self.tokens = tokens;
        self
    }

    /// Sets the operator tokens (sha256 hex): they read all of `/metrics` and run nothing.
    pub fn with_operators(mut self, operators: HashSet<String>) -> Self {
        self.operators = operators;
        self
    }

    /// Sets the tenants' and the operators' tokens as a token file gives them.
    pub fn with_token_file(self, file: TokenFile) -> Self {
        self.with_tokens(file.tenants)
            .with_operators(file.operators)
    }

    /// Whether requests must carry a token.
    pub fn requires_tokens(&self) -> bool {
        !self.tokens.is_empty() || !self.operators.is_empty()
    }

    /// Sets the default tenant.
    pub fn with_default_tenant(mut self, tenant: &str) -> Self {
        self.default_tenant = tenant.to_owned();
        self
    }

    /// Sets the body limit.
    pub fn with_max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// Sets the most MCP sessions open at once.
    pub fn with_max_sessions(mut self, n: usize) -> Self {
        self.max_sessions = n;
        self
    }

    /// Leaves out of each tenant's `tools/list` the tools `hidden(tenant, tool id)` says.
    pub fn with_hidden_tools(mut self, hidden: HiddenTools) -> Self {
        self.hidden = Some(hidden);
        self
    }

    /// Asks the user of the MCP client that sent a call, through elicitation, when the call's
    /// authorization asks.
    pub fn with_elicitation(mut self, elicit: bool) -> Self {
        self.elicit = elicit;
        self
    }

    /// Exports a span per call through `telemetry`.
    pub fn with_telemetry(mut self, telemetry: Arc<Telemetry>) -> Self {
        self.telemetry = Some(telemetry);
        self
    }

    /// Sets how long a blocked write may wait for a client that stopped reading.
    pub fn with_write_timeout(mut self, d: Duration) -> Self {
        self.write_timeout = d;
        self
    }

    /// Sets the connection limits.
    pub fn with_connections(mut self, limits: ConnectionLimits) -> Self {
        self.connections = limits;
        self
    }

    /// Sets the drain timeout.
    pub fn with_drain_timeout(mut self, d: Duration) -> Self {
        self.drain_timeout = d;
        self
    }
}

/// What a token file holds: each tenant's tokens, and the operators' (by their sha256).
#[derive(Debug, Clone, Default)]
pub struct TokenFile {
    /// sha256 (lowercase hex) -> tenant.
    pub tenants: HashMap<String, String>,
    /// sha256 (lowercase hex) of each operator token.
    pub operators: HashSet<String>,
}

/// Reads a token file: `{"tokens": [{"sha256": "<hex>", "tenant": "acme"}, {"sha256": "<hex>",
/// "operator": true}]}`. A token is a tenant's or an operator's, never both; one sha256 is listed
/// once.
pub fn read_tokens(path: &std::path::Path) -> Result<TokenFile, ServeError> {
    let fail = |why: String| ServeError::Tokens {
        path: path.display().to_string(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| fail(format!("not JSON: {e}")))?;
    let list = doc
        .get("tokens")
        .and_then(Value::as_array)
        .ok_or_else(|| fail("`/tokens` must be an array".into()))?;
    let mut out = TokenFile::default();
    for (i, t) in list.iter().enumerate() {
        let hash = t.get("sha256").and_then(Value::as_str).unwrap_or("");
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(fail(format!(
                "`/tokens/{i}/sha256` must be the 64 hex digits of the token's sha256 (the file \
                 never holds a token in the clear)"
            )));
        }
        let hash = hash.to_ascii_lowercase();
        if out.tenants.contains_key(&hash) || out.operators.contains(&hash) {
            return Err(fail(format!(
                "`/tokens/{i}/sha256` is listed twice: a token belongs to one tenant or operator"
            )));
        }
        let operator = match t.get("operator") {
            None | Some(Value::Bool(false)) => false,
            Some(Value::Bool(true)) => true,
            Some(_) => return Err(fail(format!("`/tokens/{i}/operator` must be a boolean"))),
        };
        match (t.get("tenant"), operator) {
            (Some(_), true) => {
                return Err(fail(format!(
                    "`/tokens/{i}`: an operator token has no tenant (it reads `/metrics` and runs \
                     nothing); give the tenant a token of its own"
                )))
            }
            (None, true) => {
                out.operators.insert(hash);
            }
            (tenant, false) => {
                let tenant = tenant.and_then(Value::as_str).unwrap_or("");
                if tenant.is_empty() {
                    return Err(fail(format!(
                        "`/tokens/{i}/tenant` must be a non-empty string (or the entry \
                         `\"operator\": true`)"
                    )));
                }
                out.tenants.insert(hash, tenant.to_owned());
            }
        }
    }
    Ok(out)
}

/// The lowercase hex sha256 of a token, as the token file holds it.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// The gateway's state, shared by every connection and session.
#[derive(Debug)]
pub struct Gateway {
    kernel: Kernel,
    names: ToolNames,
    options: GatewayOptions,
    metrics: Arc<Metrics>,
    draining: AtomicBool,
    in_flight: AtomicUsize,
    sessions: AtomicUsize,
    idle: Notify,
    /// Cancelled when a drain gives up waiting: every call still running is cancelled.
    abort: CancellationToken,
    /// Calls that answered `input_required` (`--approve elicit`, MCP 2026-07-28) and wait for
    /// their client's retry.
    asks: elicit::PendingAsks,
    /// Each MCP session's tenant, by its `Mcp-Session-Id`: every request naming a session is
    /// refused unless it comes from the session's tenant.
    session_tenants: DashMap<String, String>,
    /// The JSON-RPC request ids in flight in each MCP session (streamable HTTP).
    request_ids: Arc<mcp::InFlightIds>,
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
            sessions: AtomicUsize::new(0),
            idle: Notify::new(),
            abort: CancellationToken::new(),
            asks: elicit::PendingAsks::default(),
            session_tenants: DashMap::new(),
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
        self.session_tenants.get(session).map(|t| t.clone())
    }

    /// A session was opened for `tenant`; sessions that rmcp has closed since (idle ones) are
    /// forgotten now and then, `live` saying which still are.
    pub(crate) fn session_opened(&self, session: &str, tenant: &str, live: impl Fn(&str) -> bool) {
        self.session_tenants
            .insert(session.to_owned(), tenant.to_owned());
        if self.session_tenants.len() > 2 * self.sessions() + 64 {
            self.session_tenants.retain(|id, _| live(id));
        }
    }

    /// A session ended.
    pub(crate) fn session_closed(&self, session: &str) {
        self.session_tenants.remove(session);
    }

    /// How many MCP sessions are open.
    pub fn sessions(&self) -> usize {
        self.sessions.load(Ordering::SeqCst)
    }

    /// The first dependency that cannot serve now, named, with why (see
    /// [`GatewayOptions::health`]).
    pub fn unhealthy(&self) -> Option<(String, String)> {
        self.options
            .health
            .iter()
            .find_map(|(name, check)| check().err().map(|why| (name.clone(), why)))
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
        let tool = self.mcp_tool(name)?;
        let batch = match crate::kernel::Batch::new(
            &caller.tenant,
            vec![Call::new(call_id, tool.clone(), arguments)],
        ) {
            Ok(b) => b,
            Err(e) => return Some(internal(call_id, &tool, e.to_string())),
        };
        match self.run_batch(batch, caller).await {
            Ok(mut result) => result.results.pop(),
            Err(e) => Some(internal(call_id, &tool, e.to_string())),
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
        batch: crate::kernel::Batch,
        caller: Caller,
    ) -> crate::kernel::Result<crate::kernel::BatchResult> {
        let began = SystemTime::now();
        let tenant = batch.tenant.clone();
        let mut options = BatchOptions::default().with_origin(caller.origin);
        if let Some(a) = caller.approver {
            options = options.with_approver(a);
        }
        let watch = watch::Watch::new(caller.progress, self.options.telemetry.clone());
        options = options.with_observer(watch.clone());
        let mut handle = self.kernel.open_with(&tenant, options)?;
        if self.options.telemetry.is_some() {
            let mut scope = trace::SpanScope::new(&tenant, caller.traceparent.as_deref());
            scope.batch = handle.id().to_owned();
            watch.set_scope(scope);
        }
        let flight = OwnedFlight::enter(self.clone());
        let mut gauge =
            metrics::InFlightCalls::started(self.metrics.clone(), &tenant, batch.calls.len());
        for call in batch.calls {
            handle.submit(call)?;
        }
        handle.close();
        let batch_cancel = handle.cancellation_token();
        let abort = self.abort.clone();
        let cancel = caller.cancel;
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let gateway = self.clone();
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
                gauge.ended(gateway.known_tool(&r.tool), r);
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
            Err(_) => Err(crate::kernel::Error::Poisoned {
                what: "the gateway's batch task",
            }),
        }
    }

    /// The tool's id when it is registered, else `unknown` (a metrics label: the tools a client
    /// names never add series).
    fn known_tool<'a>(&self, id: &'a str) -> &'a str {
        if self.kernel.tools().get(id).is_some() {
            id
        } else {
            "unknown"
        }
    }

    /// The tool (`id` or `id@version`) an MCP tool name names, if any.
    pub fn mcp_tool(&self, name: &str) -> Option<String> {
        let key = self.names.id(name);
        self.kernel.tools().get(&key).map(|_| key)
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
    pub approver: Option<Arc<dyn crate::kernel::authorize::Approver>>,
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

fn internal(call_id: &str, tool: &str, why: String) -> CallResult {
    CallResult {
        id: call_id.to_owned(),
        tool: tool.to_owned(),
        version: None,
        status: Status::Error,
        output: None,
        error: Some(crate::kernel::model::CallError::new("internal", why)),
        started: None,
        ended: None,
        authorization: None,
        approver: None,
        recorded: None,
    }
}

/// The text block of a call that did not end `ok`, as serve.md spells it: the status (or, for
/// an `error`, its code), what is behind it in parentheses (the rule or approver of a refusal,
/// the JSON pointer of an invalid input, the code of a timeout), then the message.
pub fn failure_text(r: &CallResult) -> String {
    let (code, message) = match &r.error {
        Some(e) => (e.code.as_str(), e.message.as_str()),
        None => ("", ""),
    };
    let lead = if r.status == Status::Error && !code.is_empty() {
        code.to_owned()
    } else {
        r.status.to_string()
    };
    let detail = match (r.status, code) {
        (Status::Denied | Status::Rejected, _) => match (&r.authorization, &r.approver) {
            (_, Some(approver)) if r.status == Status::Rejected => Some(approver.clone()),
            (Some(a), _) => Some(match &a.by {
                DecidedBy::Rule(id) => id.to_string(),
                other => other.to_string(),
            }),
            _ => None,
        },
        (_, "invalid-input") => message
            .split_once("fails its schema at `")
            .and_then(|(_, rest)| rest.split_once('`'))
            .map(|(pointer, _)| pointer.to_owned()),
        (Status::Error | Status::Cancelled, _) => None,
        (_, c) if !c.is_empty() && c != lead => Some(c.to_owned()),
        _ => None,
    };
    match detail {
        Some(d) if !d.is_empty() => format!("{lead} ({d}): {message}"),
        _ => format!("{lead}: {message}"),
    }
}

/// The JSON error body of the batch API: `{"error": {"code", "message", "pointer"?}}`.
pub fn error_body(code: &str, message: &str, pointer: Option<&str>) -> Value {
    let mut e = json!({"code": code, "message": message});
    if let Some(p) = pointer {
        e["pointer"] = json!(p);
    }
    json!({"error": e})
}
