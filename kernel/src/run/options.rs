//! The options of a kernel and of a batch.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::observe::CallObserver;
use crate::authorize::Approver;

/// What happens to the dependents of a call that fails (error, timeout, panic).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnFailure {
    /// They still run: the order existed for consistency, not because they need the result.
    #[default]
    Continue,
    /// They are skipped, and theirs, transitively.
    SkipDependents,
}

/// Options a kernel is built with (see [`KernelBuilder`](super::KernelBuilder) for the defaults).
#[derive(Debug, Clone)]
#[non_exhaustive]
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
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct BatchOptions {
    /// Overrides the kernel's failure mode for this batch.
    pub on_failure: Option<OnFailure>,
    /// Ready calls of higher priority get permits first (default 0); among equals, submission
    /// order.
    pub priority: i32,
    /// Where the batch came from, for its provenance record.
    pub origin: Option<crate::provenance::BatchOrigin>,
    /// Watches the batch's calls: what each waits for, when each starts.
    pub observer: Option<Arc<dyn CallObserver>>,
    /// Answers this batch's asks instead of the kernel's approver (a gateway asks the client
    /// that sent the call).
    pub approver: Option<Arc<dyn Approver>>,
    /// The client's W3C `traceparent`: the batch's calls carry its trace on to the services they
    /// call (a pack's `traceparent` header). Ignored when it does not parse.
    pub traceparent: Option<String>,
}

impl std::fmt::Debug for BatchOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchOptions")
            .field("on_failure", &self.on_failure)
            .field("priority", &self.priority)
            .field("origin", &self.origin)
            .field("observer", &self.observer.is_some())
            .field("approver", &self.approver.is_some())
            .field("traceparent", &self.traceparent)
            .finish()
    }
}

impl BatchOptions {
    /// These options with this batch's failure mode.
    pub fn with_on_failure(mut self, mode: OnFailure) -> Self {
        self.on_failure = Some(mode);
        self
    }

    /// These options with the batch's origin (recorded in its provenance batch record).
    pub fn with_origin(mut self, origin: crate::provenance::BatchOrigin) -> Self {
        self.origin = Some(origin);
        self
    }

    /// These options with an observer of the batch's calls.
    pub fn with_observer(mut self, observer: Arc<dyn CallObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// These options with the approver of this batch's asks (the kernel's approval timeout
    /// still applies).
    pub fn with_approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.approver = Some(approver);
        self
    }

    /// These options with the client's W3C trace context (see [`BatchOptions::traceparent`]).
    pub fn with_traceparent(mut self, traceparent: &str) -> Self {
        self.traceparent = Some(traceparent.to_owned());
        self
    }

    /// These options with this batch's priority.
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }
}
