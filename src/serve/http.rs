//! The HTTP side of the gateway: one hyper server for MCP streamable HTTP (`/mcp`, rmcp's
//! service), the batch API (`/v1/run`, `/v1/plan`, `/v1/tools`), `/healthz` and `/metrics`.
//! Every route but `/healthz` is authenticated first; nothing runs for a request that is not.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::mcp::{McpSession, Tenant};
use super::{error_body, Caller, Gateway};
use crate::kernel::access::Normalizers;
use crate::kernel::adapters::{Api, ExportOptions, IngestOptions};
use crate::kernel::order::Plan;
use crate::kernel::provenance::BatchOrigin;
use crate::kernel::Batch;
use crate::report;

type Body = BoxBody<Bytes, Infallible>;
type Mcp = StreamableHttpService<McpSession, LocalSessionManager>;

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

fn json_response(status: StatusCode, v: &Value) -> Response<Body> {
    let mut r = Response::new(full(serde_json::to_vec_pretty(v).unwrap_or_default()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn error(status: StatusCode, code: &str, message: &str, pointer: Option<&str>) -> Response<Body> {
    json_response(status, &error_body(code, message, pointer))
}

/// Whether a connection ended because a write timed out.
fn timed_out(e: &hyper::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::TimedOut;
        }
        source = s.source();
    }
    false
}

/// Serves HTTP on `listener` until `shutdown` resolves, then drains: new requests get 503 while
/// the calls in flight finish (up to the drain timeout; the rest are cancelled), then every
/// connection closes.
pub async fn serve_http(
    gateway: Arc<Gateway>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let mut config = StreamableHttpServerConfig::default();
    // The gateway authenticates every request itself; the Host check stays rmcp's (loopback by
    // default) unless the address is not a loopback one.
    if let Ok(addr) = listener.local_addr() {
        if !addr.ip().is_loopback() {
            config.allowed_hosts = Vec::new();
        }
    }
    let stop_sessions = config.cancellation_token.clone();
    let factory_gateway = gateway.clone();
    let mcp: Mcp = StreamableHttpService::new(
        move || Ok(McpSession::new(factory_gateway.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let mut connections = tokio::task::JoinSet::new();
    let accept = |connections: &mut tokio::task::JoinSet<()>, sock: tokio::net::TcpStream| {
        // Without it, a small response waits for the client's delayed ACK (Nagle): ~40 ms per
        // call on loopback, measured by benches/serve.rs.
        let _ = sock.set_nodelay(true);
        let gateway = gateway.clone();
        let stalled = gateway.clone();
        let write_timeout = gateway.options().write_timeout;
        let mcp = mcp.clone();
        let service = hyper::service::service_fn(move |req| {
            let gateway = gateway.clone();
            let mcp = mcp.clone();
            async move { Ok::<_, Infallible>(handle(gateway, mcp, req).await) }
        });
        // A client that stops reading: a write blocked past the deadline drops its connection
        // (its calls go on; only the answer is lost), and nothing else waits for it.
        let mut sock = tokio_io_timeout::TimeoutStream::new(sock);
        sock.set_write_timeout(Some(write_timeout));
        connections.spawn(async move {
            let served = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(Box::pin(sock)), service)
                .await;
            if let Err(e) = served {
                if timed_out(&e) {
                    tracing::warn!("dropped a connection whose client stopped reading");
                    stalled.metrics().stalled();
                }
            }
        });
    };
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((sock, _)) => accept(&mut connections, sock),
                Err(e) => tracing::warn!("accept failed: {e}"),
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    // Drain: keep answering (503) while the calls in flight finish.
    let drained = gateway.drain();
    tokio::pin!(drained);
    loop {
        tokio::select! {
            _ = &mut drained => break,
            accepted = listener.accept() => {
                if let Ok((sock, _)) = accepted {
                    accept(&mut connections, sock);
                }
            }
        }
    }
    stop_sessions.cancel();
    drop(listener);
    connections.shutdown().await;
    Ok(())
}

/// One HTTP request.
async fn handle(gateway: Arc<Gateway>, mcp: Mcp, mut req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_owned();
    if path == "/healthz" {
        return if gateway.is_draining() {
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "shutting-down",
                "the gateway is draining",
                None,
            )
        } else {
            json_response(StatusCode::OK, &serde_json::json!({"status": "ok"}))
        };
    }
    let auth = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let Some(tenant) = gateway.tenant_of(auth) else {
        let mut r = error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid `Authorization: Bearer <token>` is required",
            None,
        );
        r.headers_mut().insert(
            hyper::header::WWW_AUTHENTICATE,
            hyper::header::HeaderValue::from_static("Bearer"),
        );
        return r;
    };
    if gateway.is_draining() {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting-down",
            "the gateway is shutting down: no new requests",
            None,
        );
    }
    let too_long = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .is_some_and(|n| n > gateway.options().max_body);
    if too_long {
        return too_large(&gateway);
    }
    match (req.method().clone(), path.as_str()) {
        (method, "/mcp") => {
            let opens_session =
                method == Method::POST && !req.headers().contains_key("mcp-session-id");
            if opens_session && gateway.sessions() >= gateway.options().max_sessions {
                return error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too-many-sessions",
                    &format!(
                        "{} MCP sessions are open (`--max-sessions`): close one, or retry later",
                        gateway.sessions()
                    ),
                    None,
                );
            }
            req.extensions_mut().insert(Tenant(tenant));
            let (parts, body) = req.into_parts();
            let limited = Limited::new(body, gateway.options().max_body);
            let req = Request::from_parts(parts, limited);
            let mut mcp = mcp;
            let mut response = match tower_service::Service::call(&mut mcp, req).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            // A session ended by the client (DELETE) is answered 202 by rmcp; the official
            // Python SDK counts only 200 and 204 as a terminated session and logs a failure.
            if method == Method::DELETE && response.status() == StatusCode::ACCEPTED {
                *response.status_mut() = StatusCode::NO_CONTENT;
            }
            response
        }
        (Method::GET, "/metrics") => {
            let mut r = Response::new(full(gateway.metrics().encode()));
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            r
        }
        (Method::GET, "/v1/tools") => tools(&gateway, req.uri().query()),
        (Method::POST, "/v1/plan" | "/v1/run") => {
            let query = req.uri().query().map(str::to_owned);
            let traceparent = req
                .headers()
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let is_json = req
                .headers()
                .get(hyper::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_none_or(|ct| ct.trim_start().starts_with("application/json"));
            if !is_json {
                return error(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported-media-type",
                    "the body must be JSON (`Content-Type: application/json`)",
                    None,
                );
            }
            let body = match Limited::new(req.into_body(), gateway.options().max_body)
                .collect()
                .await
            {
                Ok(b) => b.to_bytes(),
                Err(e) if e.is::<http_body_util::LengthLimitError>() => return too_large(&gateway),
                Err(e) => return error(StatusCode::BAD_REQUEST, "bad-body", &e.to_string(), None),
            };
            let doc: Value = match serde_json::from_slice(&body) {
                Ok(v) => v,
                Err(e) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        "malformed-batch",
                        &format!("the body is not JSON: {e}"),
                        None,
                    )
                }
            };
            if path == "/v1/plan" {
                plan(&gateway, &tenant, &doc)
            } else {
                let mut caller = Caller::new(&tenant, http_origin(), CancellationToken::new());
                caller.traceparent = traceparent;
                run(&gateway, caller, query.as_deref(), &doc).await
            }
        }
        (_, "/metrics" | "/v1/tools" | "/v1/plan" | "/v1/run") => error(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            "GET /metrics, GET /v1/tools, POST /v1/plan, POST /v1/run",
            None,
        ),
        _ => error(
            StatusCode::NOT_FOUND,
            "not-found",
            &format!("no route `{path}` (MCP is at /mcp, the batch API under /v1/)"),
            None,
        ),
    }
}

fn too_large(gateway: &Gateway) -> Response<Body> {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too-large",
        &format!(
            "the body is over {} bytes (`--max-body`)",
            gateway.options().max_body
        ),
        None,
    )
}

/// A query parameter.
fn param<'a>(query: Option<&'a str>, key: &str) -> Option<&'a str> {
    query?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

fn api_of(name: &str) -> Option<Option<Api>> {
    match name {
        "sluice" | "json" => Some(None),
        other => Api::ALL.into_iter().find(|a| a.as_str() == other).map(Some),
    }
}

fn tools(gateway: &Gateway, query: Option<&str>) -> Response<Body> {
    let format = param(query, "format").unwrap_or("json");
    let registry = gateway.kernel().tools();
    match api_of(format) {
        Some(None) => json_response(
            StatusCode::OK,
            &Value::Array(registry.latest().map(|t| t.manifest().to_value()).collect()),
        ),
        Some(Some(api)) => {
            let e = api.export(registry, gateway.names(), &ExportOptions::default());
            json_response(StatusCode::OK, &Value::Array(e.definitions))
        }
        None => error(
            StatusCode::BAD_REQUEST,
            "bad-format",
            &format!("unknown format `{format}`"),
            None,
        ),
    }
}

/// A Sluice batch of this tenant (its `tenant` absent or the same), or the error response.
fn own_batch(tenant: &str, doc: &Value) -> Result<Batch, Box<Response<Body>>> {
    let mut doc = doc.clone();
    match doc.get("tenant") {
        None => {
            if let Some(o) = doc.as_object_mut() {
                o.insert("tenant".into(), Value::String(tenant.to_owned()));
            }
        }
        Some(Value::String(t)) if t == tenant => {}
        Some(_) => {
            return Err(Box::new(error(
                StatusCode::FORBIDDEN,
                "forbidden",
                &format!("the batch names another tenant than this token's (`{tenant}`)"),
                Some("/tenant"),
            )))
        }
    }
    Batch::from_value(&doc).map_err(|e| Box::new(batch_error(e)))
}

fn batch_error(e: crate::kernel::Error) -> Response<Body> {
    let pointer = match &e {
        crate::kernel::Error::MalformedBatch { pointer, .. } => Some(pointer.clone()),
        crate::kernel::Error::DuplicateCallId { second, .. } => Some(format!("/calls/{second}/id")),
        _ => None,
    };
    error(
        StatusCode::BAD_REQUEST,
        "malformed-batch",
        &e.to_string(),
        pointer.as_deref(),
    )
}

fn plan(gateway: &Gateway, tenant: &str, doc: &Value) -> Response<Body> {
    let batch = match own_batch(tenant, doc) {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let plan = Plan::new(gateway.kernel().tools(), &Normalizers::default(), batch);
    if let Some((call, rejection)) = plan.first_rejection() {
        return error(
            StatusCode::BAD_REQUEST,
            rejection.code().as_str(),
            &rejection.message(&call.call),
            None,
        );
    }
    json_response(StatusCode::OK, &report::plan_json(&plan, None))
}

/// The origin of a batch API request.
fn http_origin() -> BatchOrigin {
    BatchOrigin {
        transport: "http".into(),
        ..BatchOrigin::default()
    }
}

async fn run(
    gateway: &Gateway,
    caller: Caller,
    query: Option<&str>,
    doc: &Value,
) -> Response<Body> {
    let tenant = caller.tenant.as_str();
    let input = param(query, "batch-format").unwrap_or("sluice");
    let output = param(query, "format").unwrap_or("json");
    let (Some(input_api), Some(output_api)) = (api_of(input), api_of(output)) else {
        return error(
            StatusCode::BAD_REQUEST,
            "bad-format",
            &format!("unknown batch-format `{input}` or format `{output}`"),
            None,
        );
    };
    let batch = match input_api {
        None => match own_batch(tenant, doc) {
            Ok(b) => b,
            Err(r) => return *r,
        },
        Some(api) => match api.batch(tenant, doc, gateway.names(), &IngestOptions::default()) {
            Ok(mut b) => {
                if matches!(api, Api::Openai | Api::OpenaiResponses) {
                    report::absent_for_null(&mut b, gateway.kernel().tools());
                }
                b
            }
            Err(e) => return batch_error(e),
        },
    };
    let result = match gateway.run_batch(batch, caller).await {
        Ok(r) => r,
        Err(e) => return batch_error(e),
    };
    match output_api {
        None => json_response(StatusCode::OK, &report::run_json(&result)),
        Some(api) => json_response(
            StatusCode::OK,
            &Value::Array(api.results(&result.results, gateway.names())),
        ),
    }
}
