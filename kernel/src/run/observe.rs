//! Watching a batch's calls on their way: what a call waits for, and when its handler starts.
//!
//! A gateway tells its client why a call has not started yet (MCP progress notifications), and
//! traces link a call to the calls it waited for; both need what only the conflict domain knows.
//! An observer is given per batch ([`BatchOptions::with_observer`](super::BatchOptions)); the
//! kernel calls it synchronously on the submitting or running task, so it must be quick and must
//! not block (send on a channel, record a timestamp).

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::authorize::Authorization;
use crate::model::Call;

/// What an observer knows a call by (a trace's span context, say), handed to the observers of the
/// calls that wait for it. The kernel only keeps it and passes it on.
pub type CallMark = Arc<dyn Any + Send + Sync>;

/// One unfinished call that a new call waits for.
#[derive(Clone)]
pub struct WaitedCall {
    /// Its batch id.
    pub batch: Arc<str>,
    /// Its call id.
    pub call: Arc<str>,
    /// Its tool id (`None` for a call whose tool is unknown).
    pub tool: Option<String>,
    /// The resource of the first conflict found between the two calls (its text).
    pub resource: String,
    /// The kind of that conflict: `read-after-write`, `write-after-read` or `write-after-write`.
    pub kind: &'static str,
    /// The mark its batch's observer gave it, if any.
    pub mark: Option<CallMark>,
}

impl fmt::Debug for WaitedCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitedCall")
            .field("batch", &self.batch)
            .field("call", &self.call)
            .field("tool", &self.tool)
            .field("resource", &self.resource)
            .field("kind", &self.kind)
            .field("marked", &self.mark.is_some())
            .finish()
    }
}

/// What a call waits for when it enters its tenant's conflict domain.
#[derive(Debug, Clone, Copy)]
pub struct Waiting<'a> {
    /// The unfinished conflicting calls it waits for, each once, in the order they were
    /// submitted. A call of a batch that has neither an observer nor a provenance sink is not
    /// named: the domain keeps no names for it (see `unnamed`).
    pub calls: &'a [WaitedCall],
    /// How many more unfinished calls it waits for without their names.
    pub unnamed: usize,
    /// How many unfinished calls it waits for on resources shared between tenants (tools of
    /// [`TenantScope::Shared`](crate::transport::TenantScope)): of any tenant, so never named.
    pub shared: usize,
    /// The ask it waits for, when its authorization asks a person (the rule is in `by`).
    pub approval: Option<&'a Authorization>,
}

impl Waiting<'_> {
    /// Whether the call waits for anything.
    pub fn is_waiting(&self) -> bool {
        !self.calls.is_empty() || self.unnamed > 0 || self.shared > 0 || self.approval.is_some()
    }
}

/// Watches one batch's calls. Every method has a default that does nothing.
pub trait CallObserver: Send + Sync + 'static {
    /// A call is about to enter its tenant's conflict domain (it passed resolve, validate and
    /// authorize). What this returns is the call's mark: later calls that wait for it see it in
    /// [`WaitedCall::mark`].
    fn mark(&self, _call: &Call) -> Option<CallMark> {
        None
    }

    /// The call entered the domain and waits: for conflicting calls still unfinished, for an
    /// approval, or both. Not called for a call that can start at once.
    fn waiting(&self, _call: &Call, _waiting: &Waiting<'_>) {}

    /// The call's handler is about to start (its predecessors are done, its ask approved, a
    /// permit under the caps taken).
    fn started(&self, _call: &Call) {}

    /// The call's W3C `traceparent` as its handler is to send it on (its own span, when the
    /// observer exports spans), asked just before [`CallObserver::started`]. `None` (the
    /// default): the kernel derives one from the batch's trace.
    fn traceparent(&self, _call: &Call) -> Option<String> {
        None
    }
}

/// Runs an observer's method: the observer is the embedder's code, and a panic in it must not
/// leave a call half-submitted (it would hold its place in the domain forever). A panic is logged
/// and the call goes on as if nobody watched.
pub(crate) fn quietly<T>(what: &str, f: impl FnOnce() -> Option<T>) -> Option<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(payload) => {
            tracing::error!(
                observer = what,
                panic = %crate::error::panic_message(payload.as_ref()),
                "a batch observer panicked; the call goes on unobserved"
            );
            None
        }
    }
}
