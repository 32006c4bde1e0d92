//! The kernel: what an agent loop embeds, and its builder.
//!
//! Takes in: tools (manifest + handler), an [`Authorizer`], an [`Approver`], a
//! [`ProvenanceSink`] and options, once, through [`KernelBuilder`]; then batches. Hands on:
//! results in submission order ([`Kernel::run`]), or completions as they happen
//! ([`BatchHandle`] is a `futures::Stream`), from batches submitted whole or call by call while
//! the model is still streaming ([`Kernel::open`]).
//!
//! ```
//! use sluice_kernel::{builtin, Batch, Call, Kernel, Status};
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

use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;

use super::batch::{BatchHandle, ResolvedTool};
use super::options::{BatchOptions, KernelOptions, OnFailure};
use super::result::BatchResult;
use super::shared::KernelInner;
use crate::access::Normalizers;
use crate::authorize::{AllowAll, Approver, Authorizer, RejectAll};
use crate::error::Result;
use crate::model::Batch;
use crate::order::ready::ReadyQueue;
use crate::order::shared::SharedDomain;
use crate::order::Plan;
use crate::provenance::{NoProvenance, ProvenanceSink};
#[cfg(feature = "mcp")]
use crate::transport::mcp::{EndpointStatus, McpOptions};
use crate::transport::resolve::{self, ResolveOptions};
use crate::transport::{
    Provisions, SecretResolver, SpecSynthesizer, Synthesizers, Tool, ToolRegistry,
};

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
    shared: Option<Arc<dyn SharedDomain>>,
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

    /// A conflict domain shared with other processes (PostgreSQL: `sluice-postgres`): every
    /// call is also admitted there, and waits for the conflicting calls of every process that
    /// shares it. Default: the in-memory domain alone (one process).
    pub fn shared_domain(mut self, d: Arc<dyn SharedDomain>) -> Self {
        self.shared = Some(d);
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

    /// The secret resolver handlers reach through [`crate::transport::ToolContext::resolve_secret`]
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
    /// Each tool's transport is resolved here: `native` takes a handler registered in code,
    /// else the handler synthesized from its `spec`; `mcp` only the MCP endpoint; `auto` a native handler, else the handler synthesized
    /// from the `spec`, else the MCP endpoint. MCP servers are not started here: each endpoint's
    /// session starts with its first call.
    pub fn build(self) -> Result<Kernel> {
        let mut tools = self.tools;
        let synthesizers = self.synthesizers.unwrap_or_default();
        let resolved = resolve::resolve(
            self.pending,
            &ResolveOptions {
                synthesizers: &synthesizers,
                env: &self.provisions.env,
                #[cfg(feature = "mcp")]
                mcp: &self.mcp_options,
                allow_unrunnable: self.allow_unrunnable,
            },
        )?;
        for t in resolved.tools {
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
                commons: Arc::default(),
                first_use: DashMap::new(),
                seq: AtomicU64::new(0),
                batches: AtomicU64::new(0),
                nonce: super::shared::kernel_nonce(),
                #[cfg(feature = "mcp")]
                mcp: resolved.mcp,
                shared: self.shared,
                settling: tokio_util::task::TaskTracker::new(),
            }),
        })
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
    pub fn mcp_status(&self) -> Vec<EndpointStatus> {
        self.inner.mcp.status()
    }

    /// The registered tools.
    pub fn tools(&self) -> &ToolRegistry {
        &self.inner.tools
    }

    /// The options it was built with.
    pub fn options(&self) -> &KernelOptions {
        &self.inner.options
    }

    /// The registered tool `name` names (`id` or `id@version`, as [`ToolRegistry::get`]
    /// resolves it), for [`BatchHandle::submit_resolved`]: a front end that answers an
    /// unknown name itself looks the tool up once, here, and the kernel does not again.
    pub fn resolve(&self, name: &str) -> Option<ResolvedTool> {
        let tool = self.inner.tools.get(name)?;
        Some(ResolvedTool::new(tool.clone(), &self.inner))
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
        BatchHandle::open(&self.inner, tenant, options)
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

    /// For the calls of tools shared between tenants ([`TenantScope::Shared`]): (calls not
    /// finished, calls the domain common to every tenant still remembers). Both return to 0 when
    /// no such call is alive.
    ///
    /// [`TenantScope::Shared`]: crate::transport::TenantScope::Shared
    pub fn shared_load(&self) -> (usize, usize) {
        self.inner.commons.load()
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

    /// How many calls that will not run (cancelled, skipped, refused) still hold their place in
    /// the shared conflict domain: each releases there once its predecessors there are done, in
    /// the background. 0 without a shared domain.
    pub fn shared_settling(&self) -> usize {
        self.inner.settling.len()
    }

    /// Waits until every call of this kernel that will not run (cancelled, skipped, refused)
    /// has been released in the shared conflict domain, so that closing the process's lease
    /// strands nobody's successors. A call that runs releases its place before its batch
    /// yields its result, so once the batches are done and this returns, nothing of this
    /// kernel is left there. Settlings that begin while it waits are waited for too. Returns at
    /// once without a shared domain.
    pub async fn shared_settled(&self) {
        // A closed tracker still tracks what is spawned on it; closing only lets `wait` end
        // whenever it is empty, so it stays closed (any number may wait at once).
        let tracker = &self.inner.settling;
        tracker.close();
        tracker.wait().await;
    }

    /// Closes the kernel in the one order that strands nothing, once its batches are done (the
    /// caller has their results, or has dropped them):
    /// 1. every call that will not run is released in the shared conflict domain
    ///    ([`Kernel::shared_settled`]), then the domain is closed ([`SharedDomain::close`]):
    ///    other processes stop waiting on this one at once;
    /// 2. this handle is dropped inside the runtime, so that the last one closes the MCP
    ///    sessions where they run (call `shutdown` on the last handle; clones that outlive it keep
    ///    the kernel, and its sessions, alive);
    /// 3. the provenance sink is flushed ([`ProvenanceSink::flush`]) and closed
    ///    ([`ProvenanceSink::close`]: a log file writes its last signed checkpoint).
    ///
    /// An error names what the provenance sink could not keep; the other steps cannot fail.
    ///
    /// ```
    /// # async fn f() -> sluice_kernel::Result<()> {
    /// let kernel = sluice_kernel::Kernel::builder().build()?;
    /// // ... run batches ...
    /// kernel.shutdown().await?;
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(self) -> Result<()> {
        self.shared_settled().await;
        if let Some(shared) = &self.inner.shared {
            shared.close().await;
        }
        let sink = self.inner.sink.clone();
        drop(self);
        let flushed = sink.flush().await;
        let closed = sink.close().await;
        flushed
            .and(closed)
            .map_err(|why| crate::error::Error::ProvenanceUnkept {
                why: why.to_string(),
            })
    }

    /// Whether `tenant` is not offered `tool` (an id) at all, as the authorizer says
    /// ([`Authorizer::hides`]): tool listings for the tenant leave it out. Listing is not
    /// authorizing: a call of a hidden tool is still authorized as any other.
    pub fn hides(&self, tenant: &str, tool: &str) -> bool {
        self.inner.authorizer.hides(tenant, tool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Call, Status};
    use serde_json::json;

    /// A panic inside the conflict index, with the tenant's domain locked: the call concerned
    /// fails `internal`, the lock is not poisoned, and the tenant's next batches run in order.
    #[tokio::test]
    async fn a_panic_under_the_domain_lock_fails_the_call_and_leaves_the_tenant_usable() {
        let kv = crate::builtin::KvStore::new();
        let tools = crate::builtin::registry(
            crate::builtin::BuiltinConfig::new(std::env::temp_dir()).with_kv(kv.clone()),
        )
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
