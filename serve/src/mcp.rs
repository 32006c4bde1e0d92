//! The MCP side of the gateway: rmcp's server, one [`McpSession`] per client session (streamable
//! HTTP) or one for the process (stdio).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InputRequest, InputRequiredResult, ListToolsResult, NumberOrString, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ProtocolVersion, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use sluice_kernel::adapters::mcp::ResultParts;
use sluice_kernel::adapters::ExportOptions;
use sluice_kernel::authorize::ApprovalOutcome;
use sluice_kernel::provenance::BatchOrigin;
use sluice_kernel::CallResult;

use crate::elicit;
use crate::gateway::{Caller, Gateway};
use crate::requests::{InFlightIds, RequestOrigin};
use crate::sessions::Place;
use crate::watch::Progress;

/// One MCP session in front of the gateway, of one tenant: the one its first request (the
/// `initialize` that opened it) was authenticated as. The HTTP layer refuses a later request of
/// the session from another tenant before rmcp sees it.
#[derive(Debug, Clone)]
pub struct McpSession {
    gateway: Arc<Gateway>,
    /// The session's place: its tenant, and its count under `--max-sessions` until its last
    /// clone is dropped.
    place: Arc<Place>,
    /// The request ids in flight of a stdio session (`None` over HTTP: the HTTP layer checks
    /// them, before rmcp routes them).
    ids: Option<Arc<InFlightIds>>,
}

tokio::task_local! {
    /// The place an HTTP request reserved for the session it may open, adopted by the session
    /// that rmcp's factory makes while serving that request.
    static RESERVED: std::cell::RefCell<Option<Arc<Place>>>;
}

/// Runs `serve` (rmcp serving one request) with `place` reserved for the session it may open;
/// a place not taken is given back when it ends.
pub(crate) async fn with_reserved<F: std::future::Future>(
    place: Option<Arc<Place>>,
    serve: F,
) -> F::Output {
    RESERVED.scope(std::cell::RefCell::new(place), serve).await
}

/// The place of a new session: the one its request reserved, else one counted now for
/// `tenant` (stdio: one session for the process).
fn adopt(gateway: &Gateway, tenant: Option<&str>) -> Arc<Place> {
    let reserved = RESERVED.try_with(|r| r.borrow_mut().take()).ok().flatten();
    reserved.unwrap_or_else(|| gateway.sessions.place(tenant))
}

impl McpSession {
    /// A session of streamable HTTP: its tenant is the one the request that opens it reserved
    /// its place for.
    pub fn new(gateway: Arc<Gateway>) -> Self {
        McpSession {
            place: adopt(&gateway, None),
            gateway,
            ids: None,
        }
    }

    /// A session of one tenant (stdio).
    pub fn of_tenant(gateway: Arc<Gateway>, tenant: &str) -> Self {
        McpSession {
            place: adopt(&gateway, Some(tenant)),
            gateway,
            ids: Some(Arc::default()),
        }
    }

    fn tenant(&self) -> Result<String, ErrorData> {
        self.place.tenant().map(str::to_owned).ok_or_else(|| {
            ErrorData::internal_error("the session was opened without a tenant", None)
        })
    }
}

/// The MCP tools a tenant sees: the kernel's `tools/list` entries (names, schemas, the
/// annotations of serve.md, the version in `_meta`), less those its authorizer hides from it.
pub(crate) fn mcp_tools(gateway: &Gateway, tenant: &str) -> Vec<Tool> {
    let kernel = gateway.kernel();
    let options = ExportOptions::default().for_tenant(kernel, tenant);
    sluice_kernel::adapters::mcp::export(kernel.tools(), gateway.names(), &options)
        .definitions
        .into_iter()
        .filter_map(|d| match serde_json::from_value::<Tool>(d) {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::error!(error = %e, "a tool's MCP entry does not read as an MCP Tool");
                None
            }
        })
        .collect()
}

/// A finished call as an MCP result: the kernel's one rendering
/// ([`sluice_kernel::adapters::mcp::result`]), built from its parts as rmcp's type.
pub(crate) fn to_mcp(r: &CallResult) -> CallToolResult {
    let parts = ResultParts::of(r);
    let content = vec![ContentBlock::text(parts.text)];
    let mut res = match parts.is_error {
        true => CallToolResult::error(content),
        false => CallToolResult::success(content),
    };
    res.structured_content = parts.structured.cloned();
    if !parts.meta.is_empty() {
        res.meta = Some(rmcp::model::MetaObject(parts.meta));
    }
    res
}

impl ServerHandler for McpSession {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        info.server_info = Implementation::new("sluice", env!("CARGO_PKG_VERSION"));
        info.instructions = Some(
            "Sluice runs each tool call the moment the calls it conflicts with have finished."
                .into(),
        );
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tenant = self.tenant()?;
        Ok(ListToolsResult::with_all_items(mcp_tools(
            &self.gateway,
            &tenant,
        )))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tenant = self.tenant()?;
        if self.gateway.is_draining() {
            return Err(ErrorData::internal_error(
                "the gateway is shutting down: no new calls",
                Some(json!({"code": "shutting-down"})),
            ));
        }
        let client = ctx.client_info();
        if let Some(state) = &request.request_state {
            let client_name = client
                .as_ref()
                .map_or_else(|| "mcp-client".to_owned(), |c| c.name.clone());
            let answer = request
                .input_responses
                .as_ref()
                .and_then(|r| r.get(APPROVE));
            let resumed = self
                .gateway
                .asks
                .resume(&tenant, state, &client_name, answer)
                .map_err(|_| {
                    ErrorData::invalid_params(
                        "no call waits under this requestState: it was resumed already, or it \
                         is not one this gateway gave",
                        None,
                    )
                })?;
            return finish(&request.name, resumed.call, resumed.cancel, &ctx.ct).await;
        }
        let id = match &ctx.id {
            NumberOrString::Number(n) => n.to_string(),
            NumberOrString::String(s) => s.to_string(),
        };
        let _claim = match &self.ids {
            Some(ids) => {
                let text = serde_json::to_string(&ctx.id).unwrap_or_default();
                let claim = ids.claim("stdio", &text);
                if claim.is_none() {
                    return Err(ErrorData::invalid_request(
                        format!("request id {text} is already in flight in this session"),
                        Some(json!({"code": "duplicate-request-id"})),
                    ));
                }
                claim
            }
            None => None,
        };
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        let parts = ctx.extensions.get::<http::request::Parts>();
        let mut origin = match parts.and_then(|p| p.extensions.get::<RequestOrigin>()) {
            Some(o) => o.batch_origin("mcp", Some(&id)),
            // stdio: one client, one connection.
            None => BatchOrigin {
                transport: "mcp".into(),
                connection: Some("stdio".into()),
                request: Some(format!("id={id}")),
                ..BatchOrigin::default()
            },
        };
        origin.session = parts
            .and_then(|p| p.headers.get("mcp-session-id"))
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        origin.client = client.as_ref().map(|c| c.name.clone());
        origin.client_version = client.as_ref().map(|c| c.version.clone());
        let mut caller = Caller::new(&tenant, origin, ctx.ct.clone());
        caller.traceparent = ctx
            .meta
            .get("traceparent")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let progress = ctx
            .meta
            .get_progress_token()
            .map(|token| ProgressForwarder::start(ctx.peer.clone(), token));
        caller.progress = progress.as_ref().map(ProgressForwarder::sink);
        let response = if self.gateway.options().elicit {
            self.call_asking(caller, &ctx, id, &request.name, args)
                .await
        } else {
            answer(
                &request.name,
                Ok(self.gateway.call(caller, &id, &request.name, args).await),
            )
        };
        if let Some(p) = progress {
            p.flush().await;
        }
        response
    }
}

impl McpSession {
    /// A call whose asks go to the client's user (`--approve elicit`): an elicitation request
    /// up to protocol 2025-11-25; from 2026-07-28 on, an `input_required` answer while the call
    /// keeps its place, resumed by the client's retry.
    async fn call_asking(
        &self,
        mut caller: Caller,
        ctx: &RequestContext<RoleServer>,
        id: String,
        name: &str,
        args: Value,
    ) -> Result<CallToolResponse, ErrorData> {
        let client = ctx
            .client_info()
            .map_or_else(|| "mcp-client".to_owned(), |c| c.name);
        let capable = elicit::can_elicit(ctx.client_capabilities().as_ref());
        let modern = ctx
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        if !(modern && capable) {
            caller.approver = Some(Arc::new(elicit::Elicit {
                peer: ctx.peer.clone(),
                client,
                capable: capable && !modern,
            }));
            return answer(name, Ok(self.gateway.call(caller, &id, name, args).await));
        }
        // The call's own token: the request that answers `input_required` ends, the call does
        // not.
        let cancel = CancellationToken::new();
        caller.cancel = cancel.clone();
        let (tx, mut asks) = mpsc::channel(1);
        caller.approver = Some(Arc::new(elicit::Relay(tx)));
        let gateway = self.gateway.clone();
        let owned = name.to_owned();
        let mut call = tokio::spawn(async move { gateway.call(caller, &id, &owned, args).await });
        tokio::select! {
            biased;
            Some((ask, answer)) = asks.recv() => {
                let keep = self.gateway.kernel().options().approval_timeout
                    + Duration::from_secs(60);
                let tenant = self.tenant()?;
                let Some(state) = elicit::request_state() else {
                    // No unguessable state to resume by: the ask is rejected (fail closed).
                    let _ = answer.send(ApprovalOutcome::Rejected {
                        by: "no-elicitation".into(),
                        reason: "the operating system gave no random bytes for a requestState"
                            .into(),
                    });
                    return finish(name, call, cancel, &ctx.ct).await;
                };
                self.gateway.asks.insert(&state, &tenant, answer, call, cancel, keep);
                let requests = BTreeMap::from([(
                    APPROVE.to_owned(),
                    InputRequest::Elicitation(elicit::input_request(&ask)),
                )]);
                Ok(InputRequiredResult::new(Some(requests), Some(state)).into())
            }
            done = &mut call => answer(name, done.map_err(|e| e.to_string())),
            _ = ctx.ct.cancelled() => {
                cancel.cancel();
                finish(name, call, cancel, &CancellationToken::new()).await
            }
        }
    }
}

/// The key of the approval form in `inputRequests` and `inputResponses`.
const APPROVE: &str = "approve";

/// Waits for a call (cancelled with the request), as the `tools/call` answer.
async fn finish(
    name: &str,
    mut call: tokio::task::JoinHandle<Option<CallResult>>,
    cancel: CancellationToken,
    request: &CancellationToken,
) -> Result<CallToolResponse, ErrorData> {
    let done = tokio::select! {
        r = &mut call => r,
        _ = request.cancelled() => {
            cancel.cancel();
            call.await
        }
    };
    answer(name, done.map_err(|e| e.to_string()))
}

/// A call's end as the `tools/call` answer: its result, -32602 for an unknown tool, or an
/// internal error when its task failed.
fn answer(
    name: &str,
    done: Result<Option<CallResult>, String>,
) -> Result<CallToolResponse, ErrorData> {
    match done {
        Ok(Some(r)) => Ok(to_mcp(&r).into()),
        Ok(None) => Err(ErrorData::invalid_params(
            format!("no tool `{name}` is registered"),
            Some(json!({"tool": name})),
        )),
        Err(e) => Err(ErrorData::internal_error(
            format!("the call's task failed: {e}"),
            None,
        )),
    }
}

/// Sends a call's progress to its client in order, on the request's progress token. Its task
/// starts with the first message: most calls wait for nothing and send none.
struct ProgressForwarder {
    peer: Peer<RoleServer>,
    token: ProgressToken,
    tx: std::sync::Mutex<Option<mpsc::UnboundedSender<Forward>>>,
}

enum Forward {
    Progress(f64, String),
    /// Answered once everything before it was sent.
    Flush(oneshot::Sender<()>),
}

impl ProgressForwarder {
    fn start(peer: Peer<RoleServer>, token: ProgressToken) -> Arc<Self> {
        Arc::new(ProgressForwarder {
            peer,
            token,
            tx: std::sync::Mutex::new(None),
        })
    }

    fn send(&self, message: Forward, start: bool) {
        let mut tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        if tx.is_none() && start {
            let (sender, mut rx) = mpsc::unbounded_channel();
            let (peer, token) = (self.peer.clone(), self.token.clone());
            tokio::spawn(async move {
                while let Some(m) = rx.recv().await {
                    match m {
                        Forward::Progress(progress, message) => {
                            let mut p = ProgressNotificationParam::new(token.clone(), progress);
                            p.message = Some(message);
                            // A client that went away misses its progress; the call goes on.
                            let _ = peer.notify_progress(p).await;
                        }
                        Forward::Flush(done) => {
                            let _ = done.send(());
                        }
                    }
                }
            });
            *tx = Some(sender);
        }
        if let Some(tx) = tx.as_ref() {
            let _ = tx.send(message);
        }
    }

    fn sink(self: &Arc<Self>) -> Progress {
        let me = self.clone();
        Arc::new(move |progress, message| me.send(Forward::Progress(progress, message), true))
    }

    /// Waits until every progress sent so far has gone out (before the result does).
    async fn flush(&self) {
        let (done, sent) = oneshot::channel();
        self.send(Forward::Flush(done), false);
        let _ = sent.await;
    }
}

/// Serves one MCP session over stdin and stdout as `tenant` until the client closes it.
pub async fn serve_stdio(gateway: Arc<Gateway>, tenant: &str) -> std::io::Result<()> {
    let session = McpSession::of_tenant(gateway, tenant);
    let running = session
        .serve(rmcp::transport::stdio())
        .await
        .map_err(std::io::Error::other)?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_kernel::model::Status;

    fn result(status: Status, recorded: Option<bool>) -> CallResult {
        CallResult {
            id: "c".into(),
            tool: "t".into(),
            version: None,
            status,
            output: (status == Status::Ok).then(|| json!({"n": 1})),
            error: (status != Status::Ok)
                .then(|| sluice_kernel::model::CallError::new("io", "disk")),
            started: None,
            ended: None,
            authorization: None,
            approver: None,
            recorded,
        }
    }

    /// The gateway's result is the kernel's rendering, member for member (rmcp adds its own
    /// `resultType`, the protocol's, which is not the rendering's): one rendering.
    #[test]
    fn the_gateway_renders_a_result_as_the_kernel_does() {
        for status in [Status::Ok, Status::Error, Status::Denied, Status::Cancelled] {
            for recorded in [Some(false), Some(true), None] {
                let mut r = result(status, recorded);
                r.version = Some("1.2.0".into());
                let mut ours = serde_json::to_value(to_mcp(&r)).unwrap();
                ours.as_object_mut().unwrap().remove("resultType");
                assert_eq!(ours, sluice_kernel::adapters::mcp::result(&r), "{status}");
            }
        }
    }

    #[test]
    fn a_result_whose_records_were_not_kept_says_so_in_meta() {
        for status in [Status::Ok, Status::Error] {
            let r = serde_json::to_value(to_mcp(&result(status, Some(false)))).unwrap();
            assert_eq!(r["_meta"]["sluice/recorded"], false, "{r}");
            for kept in [Some(true), None] {
                let r = serde_json::to_value(to_mcp(&result(status, kept))).unwrap();
                assert!(r.get("_meta").is_none(), "{r}");
            }
        }
    }
}
