//! The HTTP side of the gateway: one hyper server for MCP streamable HTTP (`/mcp`, rmcp's
//! service), the batch API (`/v1/run`, `/v1/plan`, `/v1/tools`), `/healthz` and `/metrics`.
//! Every route but `/healthz` is authenticated first; nothing runs for a request that is not.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use sluice_kernel::adapters::{report, Api, ExportOptions, IngestOptions};
use sluice_kernel::provenance::BatchOrigin;
use sluice_kernel::Batch;

use crate::conn::{self, Activity, Admission, Guarded, Tracked};
use crate::gateway::{Caller, Gateway, Principal};
use crate::mcp::{with_reserved, McpSession};
use crate::requests::{duplicate_id, RequestOrigin};

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
    let loopback = listener.local_addr().is_ok_and(|a| a.ip().is_loopback());
    let stop_sessions = config.cancellation_token.clone();
    let factory_gateway = gateway.clone();
    let mcp: Mcp = StreamableHttpService::new(
        move || Ok(McpSession::new(factory_gateway.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let front = Front { loopback };
    let closing = CancellationToken::new();
    let limits = gateway.options().connections.clone();
    let admission = Admission::new(&limits);
    let connection_numbers = std::sync::atomic::AtomicU64::new(1);
    let mut connections = tokio::task::JoinSet::new();
    let accept = |connections: &mut tokio::task::JoinSet<()>,
                  sock: tokio::net::TcpStream,
                  peer: std::net::SocketAddr| {
        // The cap and the peer's share, before anything else is spent on the connection: past
        // them it is closed at once (its descriptor freed), and the ones admitted still answer.
        let place = match admission.admit(peer.ip()) {
            Ok(place) => place,
            Err(why) => {
                gateway.metrics().refused_connection();
                tracing::debug!("refused a connection from {peer}: {why}");
                return;
            }
        };
        // Without it, a small response waits for the client's delayed ACK (Nagle): ~40 ms per
        // call on loopback, measured by benches/serve.rs.
        let _ = sock.set_nodelay(true);
        let activity = Activity::new();
        let gateway = gateway.clone();
        let stalled = gateway.clone();
        let write_timeout = gateway.options().write_timeout;
        let mcp = mcp.clone();
        let front = front.clone();
        let on_request = activity.clone();
        let connection: Arc<str> = Arc::from(format!(
            "{}/{}",
            gateway.instance(),
            connection_numbers.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let requests = std::sync::atomic::AtomicU64::new(1);
        let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
            // From here until its response body is dropped, the request keeps the connection
            // busy (not idle, whatever the wait).
            let busy = on_request.begin();
            req.extensions_mut().insert(RequestOrigin {
                connection: connection.clone(),
                peer,
                request: requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            });
            let gateway = gateway.clone();
            let mcp = mcp.clone();
            let front = front.clone();
            async move {
                let response = handle(gateway, mcp, &front, req).await;
                Ok::<_, Infallible>(response.map(|b| Guarded::new(b, busy).boxed()))
            }
        });
        // A client that stops reading: a write blocked past the deadline drops its connection
        // (its calls go on; only the answer is lost), and nothing else waits for it.
        let mut sock = tokio_io_timeout::TimeoutStream::new(sock);
        sock.set_write_timeout(Some(write_timeout));
        let io = Tracked::new(sock, activity.clone());
        let closing = closing.clone();
        let limits = limits.clone();
        connections.spawn(async move {
            let _place = place;
            let mut builder = hyper::server::conn::http1::Builder::new();
            // hyper's own header timeout runs from the moment a connection can take a request,
            // so it bounds idle and header time together: the watchdog below enforces each
            // exactly, and hyper's, past both, is a backstop.
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout + limits.idle_timeout);
            let mut conn =
                std::pin::pin!(builder.serve_connection(hyper_util::rt::TokioIo::new(io), service));
            let watchdog = conn::watch(activity, limits);
            tokio::pin!(watchdog);
            // Once the drain is over, a connection finishes the response it is writing (the
            // answer of a call that ran to its end) and closes.
            let served = tokio::select! {
                r = conn.as_mut() => r,
                expired = &mut watchdog => {
                    tracing::debug!("closed a connection from {peer}: {expired:?} timeout");
                    stalled.metrics().timed_out_connection();
                    return;
                }
                _ = closing.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = served {
                if timed_out(&e) {
                    tracing::warn!("dropped a connection whose client stopped reading");
                    stalled.metrics().stalled();
                }
            }
        });
    };
    // Serve until the shutdown signal, then drain: keep accepting (and answering 503) while the
    // calls in flight finish.
    let drained = async {
        shutdown.await;
        gateway.drain().await;
    };
    tokio::pin!(drained);
    let mut backoff = AcceptBackoff::default();
    loop {
        tokio::select! {
            _ = &mut drained => break,
            accepted = listener.accept() => match accepted {
                Ok((sock, peer)) => {
                    backoff.reset();
                    accept(&mut connections, sock, peer);
                }
                Err(e) => backoff.wait(&e).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    stop_sessions.cancel();
    drop(listener);
    closing.cancel();
    // Answers still being written get as long as a stalled write would; then they are cut.
    let grace = gateway.options().write_timeout;
    let _ = tokio::time::timeout(grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    connections.shutdown().await;
    Ok(())
}

/// How long the accept loop rests after a failed `accept` (out of descriptors, out of memory):
/// from 5 ms, doubling to 1 s, reset by the next success. Without it the loop spins a core on
/// `EMFILE` while the connections it cannot take wait in the backlog.
#[derive(Debug, Default)]
struct AcceptBackoff {
    next: Option<std::time::Duration>,
}

impl AcceptBackoff {
    const FIRST: std::time::Duration = std::time::Duration::from_millis(5);
    const MOST: std::time::Duration = std::time::Duration::from_secs(1);

    async fn wait(&mut self, e: &std::io::Error) {
        let d = self.next.unwrap_or(Self::FIRST);
        if self.next.is_none() {
            tracing::warn!("accept failed: {e}; backing off");
        }
        self.next = Some((d * 2).min(Self::MOST));
        tokio::time::sleep(d).await;
    }

    fn reset(&mut self) {
        self.next = None;
    }
}

/// What every request of one listener is checked against.
#[derive(Clone)]
struct Front {
    /// The listener is on a loopback address: `Host` and `Origin` must name loopback too.
    loopback: bool,
}

/// One HTTP request.
async fn handle(
    gateway: Arc<Gateway>,
    mcp: Mcp,
    front: &Front,
    req: Request<Incoming>,
) -> Response<Body> {
    let path = req.uri().path().to_owned();
    if path == "/healthz" {
        return if gateway.is_draining() {
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "shutting-down",
                "the gateway is draining",
                None,
            )
        } else if let Some((what, why)) = gateway.unhealthy() {
            // A database it needs is unreachable: a load balancer sends the work elsewhere.
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                &format!("{what}: {why}"),
                None,
            )
        } else {
            json_response(StatusCode::OK, &serde_json::json!({"status": "ok"}))
        };
    }
    // A page in a browser may reach a loopback gateway: by DNS rebinding (a name of its own
    // that resolves to 127.0.0.1, so `Host` names it) or by a cross-site request (`Origin`
    // names the page). Neither may run anything.
    if front.loopback {
        if let Err(r) = same_machine(&req) {
            return *r;
        }
    }
    let auth = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let Some(principal) = gateway.principal_of(auth) else {
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
        return refuse_body(&gateway, req).await;
    }
    let tenant = match principal {
        Principal::Tenant(t) => t,
        Principal::Operator => {
            return match (req.method(), path.as_str()) {
                (&Method::GET, "/metrics") => metrics(&gateway, None),
                _ => error(
                    StatusCode::FORBIDDEN,
                    "operator-token",
                    "an operator token reads `GET /metrics` only; calls need a tenant's token",
                    None,
                ),
            };
        }
    };
    match (req.method().clone(), path.as_str()) {
        (method, "/mcp") => mcp_request(&gateway, mcp, &tenant, method, req).await,
        (Method::GET, "/metrics") => {
            // Without tokens the one tenant is the machine's own user, who sees everything.
            let only = gateway
                .options()
                .requires_tokens()
                .then_some(tenant.as_str());
            metrics(&gateway, only)
        }
        (Method::GET, "/v1/tools") => tools(&gateway, &tenant, req.uri().query()),
        (Method::POST, "/v1/plan" | "/v1/run") => {
            let query = req.uri().query().map(str::to_owned);
            let origin = http_origin(req.extensions().get::<RequestOrigin>());
            let traceparent = req
                .headers()
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            // Required, not assumed: a page's `fetch` without CORS may only send `text/plain`,
            // a form or multipart, and must not run a batch.
            let is_json = req
                .headers()
                .get(hyper::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(is_json_media_type);
            if !is_json {
                return error(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported-media-type",
                    "the body must be JSON, sent with `Content-Type: application/json`",
                    None,
                );
            }
            let limit = gateway.options().connections.body_read_timeout;
            let body =
                match read_body_within(req.into_body(), gateway.options().max_body, limit).await {
                    Ok(b) => b,
                    Err(e) => return body_error(&gateway, e),
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
                let mut caller = Caller::new(&tenant, origin, CancellationToken::new());
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

/// A request to `/mcp`, handed to rmcp once it is known to be the tenant's: a request that
/// names a session (`Mcp-Session-Id`: a call, a GET stream, a DELETE, a notification, an answer
/// to an elicitation) is the session's tenant's, or it gets 404 and changes nothing.
async fn mcp_request(
    gateway: &Arc<Gateway>,
    mut mcp: Mcp,
    tenant: &str,
    method: Method,
    req: Request<Incoming>,
) -> Response<Body> {
    let session = req
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap_or_default().to_owned());
    let mut place = None;
    match &session {
        Some(id) if gateway.session_tenant(id).as_deref() != Some(tenant) => {
            // The same answer as for a session that does not exist: another tenant's session id
            // tells nothing about that session.
            return error(
                StatusCode::NOT_FOUND,
                "no-session",
                "no MCP session with this `Mcp-Session-Id` for this token: start a new session \
                 (initialize)",
                None,
            );
        }
        Some(_) => {}
        None if method == Method::POST => {
            // The place is counted now, in one step with the check; the session rmcp opens for
            // this request adopts it (and a request that opens none gives it back).
            place = gateway
                .sessions
                .reserve(gateway.options().max_sessions, tenant);
            if place.is_none() {
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
        }
        None => {}
    }
    let (parts, body) = req.into_parts();
    let limits = &gateway.options().connections;
    let body =
        match read_body_within(body, gateway.options().max_body, limits.body_read_timeout).await {
            Ok(b) => b,
            Err(e) => return body_error(gateway, e),
        };
    // A request whose id is already in flight in its session is refused here, before rmcp
    // routes by that id (the two would share one route, and one would never be answered).
    let mut claim = None;
    if let (true, Some(session)) = (method == Method::POST, &session) {
        if let Some(id) = request_id(&body) {
            let text = id.to_string();
            claim = gateway.request_ids.claim(session, &text);
            if claim.is_none() {
                return json_response(StatusCode::CONFLICT, &duplicate_id(&id));
            }
        }
    }
    let req = Request::from_parts(parts, Full::new(body));
    // The session this request may open adopts the place; a clone stays here to be named.
    let opening = place.clone();
    let served = with_reserved(place, tower_service::Service::call(&mut mcp, req)).await;
    let mut response = match served {
        Ok(r) => r,
        Err(never) => match never {},
    };
    match (&session, opening) {
        (None, Some(place)) => {
            let opened = response
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok());
            // Named only when a session adopted the place (the request opened one).
            if let (Some(id), false) = (opened, Arc::strong_count(&place) == 1) {
                gateway.sessions.name(&place, id);
            }
        }
        (Some(id), _) if method == Method::DELETE && response.status().is_success() => {
            gateway.sessions.forget(id);
        }
        _ => {}
    }
    // A session ended by the client (DELETE) is answered 202 by rmcp; the official Python SDK
    // counts only 200 and 204 as a terminated session and logs a failure.
    if method == Method::DELETE && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    match claim {
        // The id stays in flight until its answer (the SSE stream) is done.
        Some(claim) => response.map(|b| Guarded::new(b, claim).boxed()),
        None => response,
    }
}

/// The id of a JSON-RPC request (a message with a `method` and an `id`); `None` for a
/// notification, a response, or a body that is not one JSON object.
fn request_id(body: &[u8]) -> Option<Value> {
    #[derive(serde::Deserialize)]
    struct Envelope {
        id: Option<Value>,
        method: Option<serde::de::IgnoredAny>,
    }
    let e: Envelope = serde_json::from_slice(body).ok()?;
    e.method?;
    e.id.filter(|id| !id.is_null())
}

#[cfg(not(feature = "metrics"))]
fn metrics(_gateway: &Gateway, _tenant: Option<&str>) -> Response<Body> {
    error(
        StatusCode::NOT_FOUND,
        "not-found",
        "this build of Sluice leaves out `/metrics` (the `metrics` feature)",
        None,
    )
}

#[cfg(feature = "metrics")]
fn metrics(gateway: &Gateway, tenant: Option<&str>) -> Response<Body> {
    let mut r = Response::new(full(gateway.metrics().encode_for(tenant)));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        ),
    );
    r
}

/// `application/json`, with or without parameters (`; charset=utf-8`), in any case.
fn is_json_media_type(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

/// Whether a host (of `Host`, or of an origin; without its port) is this machine by name:
/// `localhost`, an IPv4 loopback address or `::1`.
fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The host of an authority (`host`, `host:port`, `[v6]`, `[v6]:port`).
fn host_of(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default();
    }
    authority.split(':').next().unwrap_or_default()
}

/// A loopback gateway's check that the request comes from this machine's own clients: `Host`
/// (when sent) names loopback, and `Origin` (when sent: a browser's) is a loopback page.
fn same_machine(req: &Request<Incoming>) -> Result<(), Box<Response<Body>>> {
    let header = |name| {
        req.headers()
            .get(name)
            .map(|v| v.to_str().unwrap_or("\u{0}"))
    };
    if let Some(host) = header(hyper::header::HOST) {
        if !is_loopback_host(host_of(host)) {
            return Err(Box::new(error(
                StatusCode::FORBIDDEN,
                "forbidden-host",
                &format!(
                    "`Host: {host}` is not this machine: a gateway on a loopback address answers \
                     `localhost` and loopback addresses only (DNS rebinding)"
                ),
                None,
            )));
        }
    }
    if let Some(origin) = header(hyper::header::ORIGIN) {
        let host = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .map(host_of);
        if !host.is_some_and(is_loopback_host) {
            return Err(Box::new(error(
                StatusCode::FORBIDDEN,
                "forbidden-origin",
                &format!(
                    "`Origin: {origin}` is a page elsewhere: a gateway on a loopback address \
                     takes no cross-site requests"
                ),
                None,
            )));
        }
    }
    Ok(())
}

/// Why a body was not taken.
enum BodyError {
    /// Over the limit (what was sent has been read and dropped, within bounds).
    TooLarge,
    /// The connection broke while it was read.
    Broken(String),
    /// It did not arrive whole within this time (`--body-read-timeout`).
    TimedOut(std::time::Duration),
}

/// How much of a refused body is read and dropped so that its client, still sending, reads the
/// 413 instead of a reset connection; past it (or [`DRAIN_TIME`]) the connection just closes.
const DRAIN_BYTES: usize = 64 << 20;
/// How long a refused body is read for at the most.
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads a body of at most `max` bytes; over it, reads and drops the rest (bounded).
async fn read_body(mut body: Incoming, max: usize) -> Result<Bytes, BodyError> {
    let mut out = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| BodyError::Broken(e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > max {
                drain(body).await;
                return Err(BodyError::TooLarge);
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out.freeze())
}

/// [`read_body`] that must finish within `limit` (`--body-read-timeout`).
async fn read_body_within(
    body: Incoming,
    max: usize,
    limit: std::time::Duration,
) -> Result<Bytes, BodyError> {
    tokio::time::timeout(limit, read_body(body, max))
        .await
        .unwrap_or(Err(BodyError::TimedOut(limit)))
}

/// The answer to a body that could not be read.
fn body_error(gateway: &Gateway, e: BodyError) -> Response<Body> {
    match e {
        BodyError::TooLarge => too_large(gateway),
        BodyError::Broken(e) => error(StatusCode::BAD_REQUEST, "bad-body", &e, None),
        BodyError::TimedOut(limit) => {
            let mut r = error(
                StatusCode::REQUEST_TIMEOUT,
                "body-timeout",
                &format!(
                    "the body did not arrive within {} s (`--body-read-timeout`)",
                    limit.as_secs()
                ),
                None,
            );
            r.headers_mut().insert(
                hyper::header::CONNECTION,
                hyper::header::HeaderValue::from_static("close"),
            );
            r
        }
    }
}

/// Reads and drops what is left of a body, within [`DRAIN_BYTES`] and [`DRAIN_TIME`].
async fn drain(mut body: Incoming) {
    let read = async {
        let mut seen = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                seen += data.len();
                if seen > DRAIN_BYTES {
                    return;
                }
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, read).await;
}

/// A request whose `Content-Length` is over the limit: 413, after reading what the client sends
/// anyway (one that waits for `100 Continue` sends nothing, and is answered at once), and the
/// connection closes after the answer.
async fn refuse_body(gateway: &Gateway, req: Request<Incoming>) -> Response<Body> {
    let expects_continue = req
        .headers()
        .get(hyper::header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    if !expects_continue {
        drain(req.into_body()).await;
    }
    too_large(gateway)
}

fn too_large(gateway: &Gateway) -> Response<Body> {
    let mut r = error(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too-large",
        &format!(
            "the body is over {} bytes (`--max-body`)",
            gateway.options().max_body
        ),
        None,
    );
    r.headers_mut().insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
    r
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

/// `GET /v1/tools`: the tools this tenant may call, as `tools/list` lists them (those a tool
/// rule of its policy denies are left out).
fn tools(gateway: &Gateway, tenant: &str, query: Option<&str>) -> Response<Body> {
    let format = param(query, "format").unwrap_or("json");
    let Some(api) = api_of(format) else {
        return error(
            StatusCode::BAD_REQUEST,
            "bad-format",
            &format!("unknown format `{format}`"),
            None,
        );
    };
    let kernel = gateway.kernel();
    match api {
        None => json_response(
            StatusCode::OK,
            &Value::Array(
                kernel
                    .tools()
                    .latest()
                    .filter(|t| !kernel.hides(tenant, t.id()))
                    .map(|t| t.manifest().to_value())
                    .collect(),
            ),
        ),
        Some(api) => {
            let options = ExportOptions::default().for_tenant(kernel, tenant);
            let e = api.export(kernel.tools(), gateway.names(), &options);
            json_response(StatusCode::OK, &Value::Array(e.definitions))
        }
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

fn batch_error(e: sluice_kernel::Error) -> Response<Body> {
    let pointer = match &e {
        sluice_kernel::Error::MalformedBatch { pointer, .. } => Some(pointer.clone()),
        sluice_kernel::Error::DuplicateCallId { second, .. } => Some(format!("/calls/{second}/id")),
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
    // The kernel's own normalizers (and the tenant's resources), as its calls would have.
    let plan = gateway.kernel().plan(batch);
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

fn http_origin(origin: Option<&RequestOrigin>) -> BatchOrigin {
    match origin {
        Some(o) => o.batch_origin("http", None),
        None => BatchOrigin {
            transport: "http".into(),
            ..BatchOrigin::default()
        },
    }
}

async fn run(
    gateway: &Arc<Gateway>,
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

/// The JSON error body of the batch API: `{"error": {"code", "message", "pointer"?}}`.
pub fn error_body(code: &str, message: &str, pointer: Option<&str>) -> Value {
    let mut e = serde_json::Map::new();
    e.insert("code".into(), json!(code));
    e.insert("message".into(), json!(message));
    if let Some(p) = pointer {
        e.insert("pointer".into(), json!(p));
    }
    json!({"error": e})
}

#[cfg(all(test, not(feature = "metrics")))]
mod without_metrics {
    use super::*;

    /// Without the `metrics` feature, `/metrics` is 404, naming the feature.
    #[tokio::test]
    async fn metrics_answer_404_naming_the_feature() {
        let kernel = sluice_kernel::Kernel::builder().build().unwrap();
        let gateway = Gateway::new(kernel, crate::GatewayOptions::default()).unwrap();
        let response = metrics(&gateway, None);
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("the `metrics` feature"), "{text}");
    }
}
