//! What the gateway watches of each of a batch's calls: progress for a client that asked for it
//! (what a waiting call waits for, then that it runs; a call that waits for nothing sends
//! nothing), and the call's span when spans are exported.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, OnceLock};

use crate::trace::{CallSpan, SpanContext, SpanScope, Telemetry};
use sluice_kernel::model::Call;
use sluice_kernel::run::{CallMark, CallObserver, Waiting};
use sluice_kernel::CallResult;

/// Where a call's progress goes: `(progress, message)`, progress increasing from 0.
pub type Progress = Arc<dyn Fn(f64, String) + Send + Sync>;

/// The observer of one gateway batch.
pub(crate) struct Watch {
    progress: Option<Progress>,
    /// The calls whose client was told they wait: told again when they start.
    told: Mutex<Vec<String>>,
    trace: Option<(Arc<Telemetry>, OnceLock<SpanScope>)>,
    spans: Mutex<HashMap<String, CallSpan>>,
}

impl Watch {
    /// Every gateway batch is watched, even without progress or spans: a watched call keeps
    /// its name in the conflict domain, so that a call of another client that waits for it can
    /// say which call it waits for.
    pub(crate) fn new(progress: Option<Progress>, telemetry: Option<Arc<Telemetry>>) -> Arc<Self> {
        Arc::new(Watch {
            progress,
            told: Mutex::new(Vec::new()),
            trace: telemetry.map(|t| (t, OnceLock::new())),
            spans: Mutex::new(HashMap::new()),
        })
    }

    /// Names the batch the spans belong to (once it is open, before its first call).
    pub(crate) fn set_scope(&self, scope: SpanScope) {
        if let Some((_, s)) = &self.trace {
            let _ = s.set(scope);
        }
    }

    /// Ends a call's span with its result; a call refused before it entered the conflict domain
    /// gets a span from `refused_start` to now.
    pub(crate) fn finish(&self, result: &CallResult, refused_start: std::time::SystemTime) {
        let Some((telemetry, scope)) = &self.trace else {
            return;
        };
        let span = self.lock_spans().remove(&result.id);
        let span = match (span, scope.get()) {
            (Some(span), _) => span,
            (None, Some(scope)) => {
                telemetry.start_at(scope, &result.id, &result.tool, refused_start)
            }
            (None, None) => return,
        };
        span.end(result);
    }

    fn lock_spans(&self) -> std::sync::MutexGuard<'_, HashMap<String, CallSpan>> {
        lock(&self.spans)
    }
}

impl CallObserver for Watch {
    fn mark(&self, call: &Call) -> Option<CallMark> {
        let (telemetry, scope) = self.trace.as_ref()?;
        let span = telemetry.start(scope.get()?, &call.id, &call.tool);
        let context = span.context();
        self.lock_spans().insert(call.id.clone(), span);
        Some(Arc::new(context))
    }

    fn waiting(&self, call: &Call, waiting: &Waiting<'_>) {
        if self.trace.is_some() {
            if let Some(span) = self.lock_spans().get_mut(&call.id) {
                for w in waiting.calls {
                    if let Some(cx) = w
                        .mark
                        .as_ref()
                        .and_then(|m| m.downcast_ref::<SpanContext>())
                    {
                        span.link(cx.clone(), w);
                    }
                }
            }
        }
        if let Some(progress) = &self.progress {
            progress(0.0, describe(waiting));
            lock(&self.told).push(call.id.clone());
        }
    }

    /// The call's own span, when spans are exported: a service the call reaches continues it.
    fn traceparent(&self, call: &Call) -> Option<String> {
        self.trace.as_ref()?;
        self.lock_spans().get(&call.id).map(CallSpan::traceparent)
    }

    fn started(&self, call: &Call) {
        if self.trace.is_some() {
            if let Some(span) = self.lock_spans().get_mut(&call.id) {
                span.started();
            }
        }
        if let Some(progress) = &self.progress {
            let mut told = lock(&self.told);
            if let Some(i) = told.iter().position(|id| *id == call.id) {
                told.swap_remove(i);
                drop(told);
                progress(1.0, format!("running {}", call.tool));
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a call waits for, for its client: each conflicting call by tool, resource and conflict,
/// then the approval.
pub(crate) fn describe(w: &Waiting<'_>) -> String {
    let mut parts: Vec<String> = w
        .calls
        .iter()
        .map(|c| {
            format!(
                "call `{}` ({}) on {} ({})",
                c.call,
                c.tool.as_deref().unwrap_or("an unknown tool"),
                c.resource,
                c.kind
            )
        })
        .collect();
    if w.unnamed > 0 {
        parts.push(format!(
            "{} more conflicting call{}",
            w.unnamed,
            if w.unnamed == 1 { "" } else { "s" }
        ));
    }
    // Calls of other tenants may be among them: counted, never named.
    if w.shared > 0 {
        parts.push(format!(
            "{} call{} on resources shared between tenants",
            w.shared,
            if w.shared == 1 { "" } else { "s" }
        ));
    }
    let mut text = String::from("waiting");
    if !parts.is_empty() {
        let _ = write!(text, " for {}", parts.join(", "));
    }
    if let Some(a) = w.approval {
        let joint = if parts.is_empty() { " for" } else { " and for" };
        let _ = write!(text, "{joint} approval, asked by {}", a.by.describe());
    }
    text
}
