//! `sluice serve --otlp URL`: one OpenTelemetry span per call, exported over OTLP/HTTP.
//!
//! A call's span is named `execute_tool {tool}` and carries the GenAI semantic conventions'
//! attributes (`gen_ai.operation.name` = `execute_tool`, `gen_ai.tool.name`,
//! `gen_ai.tool.call.id`, `error.type` when it did not end `ok`), plus `sluice.tenant`,
//! `sluice.batch` and `sluice.status`. It starts when the call enters its tenant's conflict domain
//! (or, for a call refused before, when its batch began), has an event `sluice.started` when its
//! handler starts, and ends with its result: the span's length is wait plus run. It links to the
//! spans of the calls it waited for, each link naming the resource and the kind of the conflict.
//! A `traceparent` the client sent (the MCP request's `_meta`, or the batch API's header) makes the
//! span its child.

use std::collections::HashMap;
use std::time::SystemTime;

use opentelemetry::propagation::TextMapPropagator;
pub(crate) use opentelemetry::trace::SpanContext;
use opentelemetry::trace::{
    Span as _, SpanKind, Status as SpanStatus, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;

use crate::error::ServeError;
use sluice_kernel::model::Status;
use sluice_kernel::run::WaitedCall;
use sluice_kernel::CallResult;

/// The tracer of a gateway that exports its calls' spans.
#[derive(Debug)]
pub struct Telemetry {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    endpoint: String,
}

impl Telemetry {
    /// Exports to the OTLP/HTTP collector at `url` (protobuf). A URL with no path (or `/`) gets
    /// the traces path `/v1/traces`; any other path is used as written. Spans are batched and
    /// sent on a thread of the SDK's, never on the caller's runtime.
    pub fn otlp(url: &str) -> Result<Self, ServeError> {
        let fail = |why: String| ServeError::Otlp {
            url: url.to_owned(),
            why,
        };
        let parsed = url::Url::parse(url).map_err(|e| fail(e.to_string()))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(fail("an OTLP/HTTP endpoint is an http or https URL".into()));
        }
        let endpoint = if matches!(parsed.path(), "" | "/") {
            format!("{}/v1/traces", url.trim_end_matches('/'))
        } else {
            url.to_owned()
        };
        // The operator names the collector: no proxy from the environment, as for tools. The
        // blocking client owns a runtime of its own, so it is built off any async context.
        let client = std::thread::spawn(|| reqwest::blocking::Client::builder().no_proxy().build())
            .join()
            .map_err(|_| fail("building the HTTP client panicked".into()))?
            .map_err(|e| fail(e.to_string()))?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_endpoint(endpoint.clone())
            .build()
            .map_err(|e| fail(e.to_string()))?;
        let provider = SdkTracerProvider::builder()
            .with_span_processor(BatchSpanProcessor::builder(exporter).build())
            .with_resource(
                Resource::builder_empty()
                    .with_service_name("sluice")
                    .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
                    .build(),
            )
            .build();
        let tracer = provider.tracer("sluice");
        Ok(Telemetry {
            provider,
            tracer,
            endpoint,
        })
    }

    /// Where the spans go.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Sends every span ended so far and stops the exporter (at the end of a drain).
    pub async fn shutdown(&self) {
        let provider = self.provider.clone();
        // The SDK waits for its exporter thread by blocking: not on a runtime worker.
        let done = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(e)) = done {
            tracing::warn!(error = %e, "the OTLP exporter did not shut down cleanly");
        }
    }

    /// Starts a call's span now.
    pub(crate) fn start(&self, scope: &SpanScope, call: &str, tool: &str) -> CallSpan {
        self.start_at(scope, call, tool, SystemTime::now())
    }

    /// Starts a call's span at `start`.
    pub(crate) fn start_at(
        &self,
        scope: &SpanScope,
        call: &str,
        tool: &str,
        start: SystemTime,
    ) -> CallSpan {
        let span = self
            .tracer
            .span_builder(format!("execute_tool {tool}"))
            .with_kind(SpanKind::Internal)
            .with_start_time(start)
            .with_attributes([
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("gen_ai.tool.name", tool.to_owned()),
                KeyValue::new("gen_ai.tool.call.id", call.to_owned()),
                KeyValue::new("sluice.tenant", scope.tenant.clone()),
                KeyValue::new("sluice.batch", scope.batch.clone()),
            ])
            .start_with_context(&self.tracer, &scope.parent);
        CallSpan { span }
    }
}

/// What the spans of one batch share: tenant, batch and the client's trace context.
#[derive(Debug, Clone)]
pub(crate) struct SpanScope {
    pub(crate) tenant: String,
    pub(crate) batch: String,
    pub(crate) parent: Context,
}

impl SpanScope {
    /// The scope of a batch; `traceparent` (W3C) makes its spans children of the client's.
    pub(crate) fn new(tenant: &str, traceparent: Option<&str>) -> Self {
        let parent = match traceparent {
            Some(tp) => {
                let carrier = HashMap::from([("traceparent".to_owned(), tp.to_owned())]);
                TraceContextPropagator::new().extract(&carrier)
            }
            None => Context::new(),
        };
        SpanScope {
            tenant: tenant.to_owned(),
            batch: String::new(),
            parent,
        }
    }
}

/// One call's span, open until its result.
#[derive(Debug)]
pub(crate) struct CallSpan {
    span: opentelemetry_sdk::trace::Span,
}

impl CallSpan {
    /// Its context, for the links of the calls that will wait for it.
    pub(crate) fn context(&self) -> SpanContext {
        self.span.span_context().clone()
    }

    /// Links it to a call it waits for.
    pub(crate) fn link(&mut self, to: SpanContext, waited: &WaitedCall) {
        self.span.add_link(
            to,
            vec![
                KeyValue::new("sluice.conflict.resource", waited.resource.clone()),
                KeyValue::new("sluice.conflict.kind", waited.kind),
            ],
        );
    }

    /// Its W3C `traceparent`.
    pub(crate) fn traceparent(&self) -> String {
        let cx = self.span.span_context();
        format!(
            "00-{}-{}-{:02x}",
            cx.trace_id(),
            cx.span_id(),
            cx.trace_flags().to_u8()
        )
    }

    /// Marks the start of its handler.
    pub(crate) fn started(&mut self) {
        self.span.add_event("sluice.started", Vec::new());
    }

    /// Ends it with the call's result.
    pub(crate) fn end(mut self, result: &CallResult) {
        self.span
            .set_attribute(KeyValue::new("sluice.status", result.status.as_str()));
        if let Some(v) = &result.version {
            self.span
                .set_attribute(KeyValue::new("sluice.tool.version", v.clone()));
        }
        if result.status != Status::Ok {
            let (kind, message) = match &result.error {
                Some(e) => (e.code.as_str().to_owned(), e.message.clone()),
                None => (result.status.as_str().to_owned(), String::new()),
            };
            self.span.set_attribute(KeyValue::new("error.type", kind));
            self.span.set_status(SpanStatus::error(message));
        }
        self.span.end();
    }
}

/// Whether a context names a valid span (a `traceparent` that parsed).
#[cfg(test)]
fn has_parent(cx: &Context) -> bool {
    use opentelemetry::trace::TraceContextExt;
    cx.span().span_context().is_valid()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_becomes_the_parent_and_garbage_is_ignored() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert!(has_parent(&SpanScope::new("t", Some(tp)).parent));
        assert!(!has_parent(&SpanScope::new("t", Some("nonsense")).parent));
        assert!(!has_parent(&SpanScope::new("t", None).parent));
    }

    #[test]
    fn an_otlp_url_gets_the_traces_path_unless_it_has_one() {
        let t = Telemetry::otlp("http://127.0.0.1:4318").unwrap();
        assert_eq!(t.endpoint(), "http://127.0.0.1:4318/v1/traces");
        let t = Telemetry::otlp("http://127.0.0.1:4318/custom/traces").unwrap();
        assert_eq!(t.endpoint(), "http://127.0.0.1:4318/custom/traces");
        for bad in ["127.0.0.1:4318", "ftp://collector/", "not a url"] {
            let e = Telemetry::otlp(bad).unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
    }

    /// The exporter shuts down on its own thread: built, used and dropped on a current-thread
    /// runtime (no drain), it neither panics nor waits on that runtime.
    #[tokio::test]
    async fn telemetry_dropped_on_a_current_thread_runtime_returns() {
        let t = Telemetry::otlp("http://127.0.0.1:9").unwrap();
        let scope = SpanScope::new("t", None);
        let span = t.start(&scope, "c", "tool");
        span.end(&crate::gateway::internal("c", "tool", "on purpose".into()));
        drop(t);
    }
}
