//! The context a handler runs in: the typed dependency injection of the manifest's `needs` and
//! `needsSpec`.
//!
//! Takes in: the call's ids and cancellation token, and what the embedder supplies through the
//! [`crate::run::KernelBuilder`] (a [`SecretResolver`], environment values, granted
//! capabilities and bindings, named need slots). Hands on: a [`ToolContext`] through which a
//! handler reaches exactly that.
//!
//! Before a handler runs, every *required* need is checked: each `needs` entry without
//! `optional: true` has a slot (`tenant`, `batch` and `call` always do), each `needsSpec.env`
//! name without a string `default` has a value, each secret resolves, each capability and binding
//! is granted. A need the kernel cannot supply fails the call (`missing-need`) before the handler
//! runs. Under `sandbox: context-isolated` or `strict`, a handler reaches only what its manifest
//! declared: asking for anything else is a [`ContextError::Undeclared`].

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::model::{HttpAuthSpec, Manifest, NeedsSpec, NonEmptyString, Sandbox, ToolSpec};

/// Resolves secrets by name for a tenant (the CLI's resolver reads the environment variable the
/// manifest's `envName` names).
pub trait SecretResolver: Send + Sync + 'static {
    /// The secret's value, or `None` when it is not available.
    fn resolve(&self, tenant: &str, name: &str, env_name: Option<&str>) -> Option<String>;
}

impl<F> SecretResolver for F
where
    F: Fn(&str, &str, Option<&str>) -> Option<String> + Send + Sync + 'static,
{
    fn resolve(&self, tenant: &str, name: &str, env_name: Option<&str>) -> Option<String> {
        self(tenant, name, env_name)
    }
}

/// Reads secrets from the process environment, by `envName` (or the name itself).
#[derive(Debug, Clone, Copy, Default)]
pub struct EnvSecrets;

impl SecretResolver for EnvSecrets {
    fn resolve(&self, _tenant: &str, name: &str, env_name: Option<&str>) -> Option<String> {
        std::env::var(env_name.unwrap_or(name)).ok()
    }
}

/// Why a handler could not reach something through its context.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    /// The sandbox allows only what the manifest declared.
    #[error("the tool runs under `sandbox: {sandbox}` and did not declare the {what} `{name}`")]
    Undeclared {
        /// `need`, `env value`, `secret`, `capability` or `binding`.
        what: &'static str,
        /// Its name.
        name: String,
        /// The sandbox posture.
        sandbox: &'static str,
    },
    /// Declared (or not isolated), but not supplied by the embedder.
    #[error("the {what} `{name}` is not available")]
    Unavailable {
        /// `need`, `env value`, `secret`, `capability` or `binding`.
        what: &'static str,
        /// Its name.
        name: String,
    },
    /// A need slot holds a value of another type.
    #[error("the need `{name}` is not a `{expected}`")]
    WrongType {
        /// The slot.
        name: String,
        /// The type asked for.
        expected: &'static str,
    },
}

/// What a handler knows of the call it carries out, and what it may reach.
///
/// Cheap to clone. See the [`crate::transport`] docs for the typed dependency injection behind it.
#[derive(Debug, Clone)]
pub struct ToolContext {
    pub(crate) inner: std::sync::Arc<ContextInner>,
}

/// What the embedder supplies to every call (set through the kernel builder).
#[derive(Clone, Default)]
pub(crate) struct Provisions {
    pub(crate) secrets: Option<Arc<dyn SecretResolver>>,
    pub(crate) env: HashMap<String, String>,
    pub(crate) capabilities: Vec<String>,
    pub(crate) bindings: Vec<String>,
    pub(crate) needs: HashMap<String, Arc<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for Provisions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provisions")
            .field("secret_resolver", &self.secrets.is_some())
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("capabilities", &self.capabilities)
            .field("bindings", &self.bindings)
            .field("needs", &self.needs.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The shared state behind a [`ToolContext`].
#[derive(Debug)]
pub(crate) struct ContextInner {
    pub(crate) tenant: Arc<str>,
    pub(crate) batch_id: Arc<str>,
    pub(crate) call_id: String,
    pub(crate) manifest: Arc<Manifest>,
    pub(crate) cancel: CancellationToken,
    pub(crate) provisions: Arc<Provisions>,
    /// Every secret value handed out during this call, for redaction.
    pub(crate) handed_out: Mutex<Vec<String>>,
    /// The call's admission number in a shared conflict domain.
    pub(crate) fencing_token: Option<u64>,
    /// When the kernel stops waiting for the handler (its `limits.cpuMs`, else the kernel's
    /// default timeout).
    pub(crate) deadline: Option<tokio::time::Instant>,
    /// The call's W3C trace context as its batch's observer gave it.
    pub(crate) traceparent: Option<String>,
    /// The client's trace of the call's batch (`<trace id>-<flags>`), when it sent one.
    pub(crate) client_trace: Option<Arc<str>>,
}

/// The names a manifest declares, by kind.
fn declared_secrets(m: &Manifest) -> Vec<(String, Option<String>)> {
    let mut out: Vec<(String, Option<String>)> = m
        .needs_spec
        .as_ref()
        .and_then(|n| n.secrets.as_ref())
        .map(|s| s.keys().map(|k| (k.clone(), None)).collect())
        .unwrap_or_default();
    if let Some(ToolSpec::Http(h)) = &m.spec {
        if let Some(HttpAuthSpec::Bearer { secret_ref } | HttpAuthSpec::Header { secret_ref, .. }) =
            &h.authorization
        {
            out.push((
                secret_ref.name.to_string(),
                Some(secret_ref.env_name.to_string()),
            ));
        }
    }
    out
}

fn is_isolated(m: &Manifest) -> bool {
    matches!(m.sandbox(), Sandbox::ContextIsolated | Sandbox::Strict)
}

fn sandbox_name(m: &Manifest) -> &'static str {
    match m.sandbox() {
        Sandbox::None => "none",
        Sandbox::ContextIsolated => "context-isolated",
        Sandbox::Strict => "strict",
    }
}

/// Slots every call has.
const BUILT_IN_NEEDS: [&str; 3] = ["tenant", "batch", "call"];

impl ToolContext {
    pub(crate) fn new(
        tenant: Arc<str>,
        batch_id: Arc<str>,
        call_id: &str,
        manifest: Arc<Manifest>,
        cancel: CancellationToken,
        provisions: Arc<Provisions>,
    ) -> Self {
        ToolContext {
            inner: Arc::new(ContextInner {
                tenant,
                batch_id,
                call_id: call_id.to_owned(),
                manifest,
                cancel,
                provisions,
                handed_out: Mutex::new(Vec::new()),
                fencing_token: None,
                deadline: None,
                traceparent: None,
                client_trace: None,
            }),
        }
    }

    /// This context with the call's fencing token (its admission number in a shared domain).
    pub(crate) fn with_fencing_token(mut self, token: Option<u64>) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.fencing_token = token;
        }
        self
    }

    /// This context with the call's deadline and trace context, set before the handler starts.
    pub(crate) fn with_run(
        mut self,
        deadline: Option<tokio::time::Instant>,
        traceparent: Option<String>,
        client_trace: Option<Arc<str>>,
    ) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.deadline = deadline;
            inner.traceparent = traceparent;
            inner.client_trace = client_trace;
        }
        self
    }

    /// When the kernel stops waiting for this call (its tool's `limits.cpuMs`, else the kernel's
    /// default timeout), on tokio's clock; `None` when it waits as long as it takes. A handler
    /// that calls a service passes the time left on (a pack's `kindgi-timeout-ms`).
    pub fn deadline(&self) -> Option<tokio::time::Instant> {
        self.inner.deadline
    }

    /// The call's W3C trace context, `00-<trace id>-<span id>-<flags>`, for a handler to send
    /// on as `traceparent`: the call's own span when its gateway exports spans, else a span id
    /// of the call's under its batch's trace (the client's `traceparent` when it sent one, else
    /// a trace id of the batch's own). `None` for a context made outside a kernel.
    pub fn traceparent(&self) -> Option<String> {
        if let Some(tp) = &self.inner.traceparent {
            return Some(tp.clone());
        }
        if self.inner.batch_id.is_empty() {
            return None;
        }
        Some(super::trace::for_call(
            &self.inner.batch_id,
            self.inner.client_trace.as_deref(),
            &self.inner.call_id,
        ))
    }

    /// The call's fencing token when the kernel runs on a shared conflict domain: its admission
    /// number, increasing across every process that shares the database. A downstream store can
    /// refuse a write carrying a token lower than one it has seen (a holder whose process was
    /// presumed dead). `None` on the in-memory domain.
    pub fn fencing_token(&self) -> Option<u64> {
        self.inner.fencing_token
    }

    /// The call's idempotency key: the same for every attempt of this call (the intent a
    /// durable log keeps names it too), different for any two calls. HTTP tools send it as
    /// `Idempotency-Key`, MCP tools in `_meta` as `sluice/idempotency-key`; a native handler
    /// that writes to a store that deduplicates can pass it on. See
    /// [`crate::provenance::idempotency_key`].
    pub fn idempotency_key(&self) -> String {
        crate::provenance::idempotency_key(
            &self.inner.tenant,
            &self.inner.batch_id,
            &self.inner.call_id,
        )
    }

    /// A context for calling a handler outside a kernel (tests, examples): no provisions.
    pub fn detached(tenant: &str, call_id: &str, manifest: Arc<Manifest>) -> Self {
        Self::new(
            Arc::from(tenant),
            Arc::from(""),
            call_id,
            manifest,
            CancellationToken::new(),
            Arc::new(Provisions::default()),
        )
    }

    /// The tenant the call runs for.
    pub fn tenant(&self) -> &str {
        &self.inner.tenant
    }

    /// The batch's id.
    pub fn batch_id(&self) -> &str {
        &self.inner.batch_id
    }

    /// The call's id.
    pub fn call_id(&self) -> &str {
        &self.inner.call_id
    }

    /// The tool's manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.inner.manifest
    }

    /// Cancelled when the call's batch is cancelled or its deadline passes; long handlers
    /// should watch it.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.inner.cancel
    }

    fn undeclared(&self, what: &'static str, name: &str) -> ContextError {
        ContextError::Undeclared {
            what,
            name: name.to_owned(),
            sandbox: sandbox_name(&self.inner.manifest),
        }
    }

    /// The value of a named need slot, downcast to `T`.
    pub fn need<T: Any + Send + Sync>(&self, name: &str) -> Result<Arc<T>, ContextError> {
        let m = &self.inner.manifest;
        let declared = m.needs.iter().flatten().any(|n| n.name.as_str() == name);
        if is_isolated(m) && !declared {
            return Err(self.undeclared("need", name));
        }
        let slot = self
            .inner
            .provisions
            .needs
            .get(name)
            .cloned()
            .ok_or_else(|| ContextError::Unavailable {
                what: "need",
                name: name.to_owned(),
            })?;
        slot.downcast::<T>().map_err(|_| ContextError::WrongType {
            name: name.to_owned(),
            expected: std::any::type_name::<T>(),
        })
    }

    /// An environment value declared in `needsSpec.env` (its string `default` applied), or under
    /// `sandbox: none` any value the embedder supplied.
    pub fn env(&self, name: &str) -> Result<String, ContextError> {
        let m = &self.inner.manifest;
        let schema = m
            .needs_spec
            .as_ref()
            .and_then(|n| n.env.as_ref())
            .and_then(|e| e.get(name));
        if is_isolated(m) && schema.is_none() {
            return Err(self.undeclared("env value", name));
        }
        if let Some(v) = self.inner.provisions.env.get(name) {
            return Ok(v.clone());
        }
        match schema.and_then(|s| s.get("default")) {
            Some(Value::String(d)) => Ok(d.clone()),
            _ => Err(ContextError::Unavailable {
                what: "env value",
                name: name.to_owned(),
            }),
        }
    }

    /// Resolves a secret through the embedder's resolver. Under isolation only declared secrets
    /// (`needsSpec.secrets`, or the HTTP spec's `secretRef`) resolve. Every value handed out is
    /// redacted from the call's error messages and provenance.
    pub fn resolve_secret(&self, name: &str) -> Result<String, ContextError> {
        let m = &self.inner.manifest;
        let declared = declared_secrets(m);
        let entry = declared.iter().find(|(n, _)| n == name);
        if is_isolated(m) && entry.is_none() {
            return Err(self.undeclared("secret", name));
        }
        let env_name = entry.and_then(|(_, e)| e.as_deref());
        let value = self
            .inner
            .provisions
            .secrets
            .as_ref()
            .and_then(|r| r.resolve(&self.inner.tenant, name, env_name))
            .ok_or_else(|| ContextError::Unavailable {
                what: "secret",
                name: name.to_owned(),
            })?;
        if let Ok(mut h) = self.inner.handed_out.lock() {
            if !h.contains(&value) {
                h.push(value.clone());
            }
        }
        Ok(value)
    }

    /// Whether a capability is granted (and, under isolation, declared).
    pub fn capability(&self, name: &str) -> Result<(), ContextError> {
        self.grant(
            "capability",
            name,
            |n| n.capabilities.as_ref(),
            |p| &p.capabilities,
        )
    }

    /// Whether a binding is granted (and, under isolation, declared).
    pub fn binding(&self, name: &str) -> Result<(), ContextError> {
        self.grant("binding", name, |n| n.bindings.as_ref(), |p| &p.bindings)
    }

    fn grant(
        &self,
        what: &'static str,
        name: &str,
        declared: impl Fn(&NeedsSpec) -> Option<&Vec<NonEmptyString>>,
        granted: impl Fn(&Provisions) -> &Vec<String>,
    ) -> Result<(), ContextError> {
        let m = &self.inner.manifest;
        let is_declared = m
            .needs_spec
            .as_ref()
            .and_then(declared)
            .is_some_and(|v| v.iter().any(|c| c.as_str() == name));
        if is_isolated(m) && !is_declared {
            return Err(self.undeclared(what, name));
        }
        if granted(&self.inner.provisions).iter().any(|c| c == name) {
            Ok(())
        } else {
            Err(ContextError::Unavailable {
                what,
                name: name.to_owned(),
            })
        }
    }

    /// Checks every required need before the handler runs; the first one missing, if any.
    pub(crate) fn check_required(&self) -> Result<(), ContextError> {
        let m = self.inner.manifest.clone();
        if m.needs.is_none() && m.needs_spec.is_none() && m.spec.is_none() {
            return Ok(());
        }
        for n in m.needs.iter().flatten().filter(|n| !n.is_optional()) {
            let name = n.name.as_str();
            if !BUILT_IN_NEEDS.contains(&name) && !self.inner.provisions.needs.contains_key(name) {
                return Err(ContextError::Unavailable {
                    what: "need",
                    name: name.to_owned(),
                });
            }
        }
        if let Some(ns) = &m.needs_spec {
            for name in ns.env.iter().flatten().map(|(k, _)| k) {
                self.env(name)?;
            }
            for c in ns.capabilities.iter().flatten() {
                self.capability(c)?;
            }
            for b in ns.bindings.iter().flatten() {
                self.binding(b)?;
            }
        }
        for (name, _) in declared_secrets(&m) {
            self.resolve_secret(&name)?;
        }
        Ok(())
    }

    /// The secret values handed out so far.
    pub(crate) fn handed_out(&self) -> Vec<String> {
        self.inner
            .handed_out
            .lock()
            .map(|h| h.clone())
            .unwrap_or_default()
    }
}
