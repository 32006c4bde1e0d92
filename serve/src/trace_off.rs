//! The gateway's spans in a build without the `otel` feature: a [`Telemetry`] cannot be made
//! (`--otlp` is refused, naming the feature), so no span is ever started.

use std::convert::Infallible;
use std::time::SystemTime;

use sluice_kernel::run::WaitedCall;
use sluice_kernel::CallResult;

use crate::error::ServeError;

/// The tracer of a gateway that exports its calls' spans: none in this build (the `otel`
/// feature is off), so no value of it exists.
#[derive(Debug)]
pub struct Telemetry {
    never: Infallible,
}

impl Telemetry {
    /// Refused: this build leaves out the `otel` feature.
    pub fn otlp(url: &str) -> Result<Self, ServeError> {
        Err(ServeError::Otlp {
            url: url.to_owned(),
            why: "this build of Sluice leaves out spans (the `otel` feature)".into(),
        })
    }

    /// Where the spans go (no value exists).
    pub fn endpoint(&self) -> &str {
        match self.never {}
    }

    /// Sends every span (no value exists).
    pub async fn shutdown(&self) {
        match self.never {}
    }

    pub(crate) fn start(&self, _scope: &SpanScope, _call: &str, _tool: &str) -> CallSpan {
        match self.never {}
    }

    pub(crate) fn start_at(&self, _: &SpanScope, _: &str, _: &str, _: SystemTime) -> CallSpan {
        match self.never {}
    }
}

/// What the spans of one batch would share.
#[derive(Debug, Clone)]
pub(crate) struct SpanScope {
    pub(crate) batch: String,
}

impl SpanScope {
    pub(crate) fn new(_tenant: &str, _traceparent: Option<&str>) -> Self {
        SpanScope {
            batch: String::new(),
        }
    }
}

/// A span's context (none exists in this build).
#[derive(Debug, Clone)]
pub(crate) struct SpanContext {
    never: Infallible,
}

/// One call's span (no value exists).
#[derive(Debug)]
pub(crate) struct CallSpan {
    never: Infallible,
}

impl CallSpan {
    pub(crate) fn context(&self) -> SpanContext {
        match self.never {}
    }

    pub(crate) fn link(&mut self, to: SpanContext, _waited: &WaitedCall) {
        match to.never {}
    }

    pub(crate) fn started(&mut self) {
        match self.never {}
    }

    pub(crate) fn traceparent(&self) -> String {
        match self.never {}
    }

    pub(crate) fn end(self, _result: &CallResult) {
        match self.never {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without the `otel` feature, `--otlp` is refused, naming the feature.
    #[test]
    fn otlp_is_refused_naming_the_feature() {
        // (No `Telemetry` value can exist in this build: the answer is an error.)
        let e = Telemetry::otlp("http://127.0.0.1:4318")
            .err()
            .map(|e| e.to_string());
        assert!(
            e.as_deref().unwrap_or("").contains("the `otel` feature"),
            "{e:?}"
        );
    }
}
