//! The MCP transport over streamable HTTP, against a small MCP server of our own built with
//! rmcp's server side and started by the test; and transport resolution at registration.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Map, Value};
use sluice_kernel::model::McpEndpoint;
use sluice_kernel::run::Kernel;
use sluice_kernel::transport::mcp::{import_manifests, ImportOptions};
use sluice_kernel::transport::{handler, ToolContext, ToolError};
use sluice_kernel::{Batch, Call, Status};
use support::mcp::{kernel_of, mcp_manifest, run_one, unresolved_tool};
use tokio::sync::Notify;

/// What the server saw.
#[derive(Debug, Default)]
struct Seen {
    calls: AtomicUsize,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    cancelled: Notify,
    cancellations: AtomicUsize,
}

/// Tools: `add` (structured `{sum}`), `fail` (isError), `slow` (waits until cancelled),
/// `gather` (waits until `n` gather calls are in flight together).
#[derive(Clone)]
struct TestServer {
    seen: Arc<Seen>,
    gathered: Arc<Notify>,
}

fn schema(v: Value) -> Arc<Map<String, Value>> {
    Arc::new(serde_json::from_value(v).unwrap())
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        info.server_info = Implementation::new("sluice-test/adder", "1.4.2");
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut read_only = ToolAnnotations::default();
        read_only.read_only_hint = Some(true);
        let mut add = Tool::new(
            "add",
            "Adds two numbers",
            schema(
                json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                          "required": ["a", "b"]}),
            ),
        );
        add.output_schema = Some(schema(
            json!({"type": "object", "properties": {"sum": {"type": "number"}}, "required": ["sum"]}),
        ));
        add.annotations = Some(read_only);
        let fail = Tool::new("fail", "Always fails", schema(json!({"type": "object"})));
        Ok(ListToolsResult::with_all_items(vec![add, fail]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.seen.calls.fetch_add(1, Ordering::SeqCst);
        let args = request.arguments.unwrap_or_default();
        let result = match &*request.name {
            "add" => {
                let n = |k: &str| args.get(k).and_then(Value::as_f64).unwrap_or(0.0);
                CallToolResult::structured(json!({"sum": n("a") + n("b")}))
            }
            "fail" => CallToolResult::error(vec![ContentBlock::text("the disk is on fire")]),
            // What the call's `_meta` carried as its idempotency key.
            "key" => CallToolResult::structured(
                json!({"key": context.meta.get("sluice/idempotency-key").cloned()}),
            ),
            "slow" => {
                context.ct.cancelled().await;
                self.seen.cancellations.fetch_add(1, Ordering::SeqCst);
                self.seen.cancelled.notify_one();
                return Err(ErrorData::internal_error("cancelled", None));
            }
            "gather" => {
                let want = args.get("n").and_then(Value::as_u64).unwrap_or(1) as usize;
                let now = self.seen.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                self.seen.most_in_flight.fetch_max(now, Ordering::SeqCst);
                if now >= want {
                    self.gathered.notify_waiters();
                } else {
                    let wait = self.gathered.notified();
                    if self.seen.in_flight.load(Ordering::SeqCst) < want {
                        wait.await;
                    }
                }
                CallToolResult::structured(json!({"gathered": true}))
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no tool `{other}`"),
                    None,
                ))
            }
        };
        Ok(result.into())
    }
}

/// A running test server.
struct Running {
    endpoint: String,
    addr: std::net::SocketAddr,
    seen: Arc<Seen>,
    stop: Arc<Notify>,
    done: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops the server: no more connections, and every open one dropped. (Dropping the handle
    /// leaves the server serving until the test ends.)
    async fn stop(self) {
        self.stop.notify_one();
        let _ = self.done.await;
    }
}

/// Starts the server on an ephemeral loopback port; its `mcp+http://` endpoint.
async fn start_server() -> (String, Arc<Seen>) {
    let r = start_server_on("127.0.0.1:0").await;
    (r.endpoint, r.seen)
}

/// Starts the server on `addr`.
async fn start_server_on(addr: &str) -> Running {
    let seen = Arc::new(Seen::default());
    let server = TestServer {
        seen: seen.clone(),
        gathered: Arc::new(Notify::new()),
    };
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = Arc::new(Notify::new());
    let stopped = stop.clone();
    let done = tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                _ = stopped.notified() => break,
                accepted = listener.accept() => {
                    let Ok((sock, _)) = accepted else { break };
                    let svc = hyper_util::service::TowerToHyperService::new(service.clone());
                    connections.spawn(async move {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(sock), svc)
                            .await;
                    });
                }
            }
        }
        connections.shutdown().await;
    });
    Running {
        endpoint: format!("mcp+http://{addr}/mcp"),
        addr,
        seen,
        stop,
        done,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_content_is_the_output_and_is_error_an_error() {
    let (e, seen) = start_server().await;
    let k = kernel_of(vec![
        mcp_manifest(
            "t.add",
            &e,
            json!({"output": {"type": "object", "required": ["sum"]}}),
        ),
        mcp_manifest("t.fail", &e, json!({})),
        mcp_manifest("t.missing", &e, json!({})),
    ]);
    let r = k
        .run(
            Batch::new(
                "t",
                vec![
                    Call::new("a", "t.add", json!({"a": 2, "b": 3})),
                    Call::new("f", "t.fail", json!({})),
                    Call::new("m", "t.missing", json!({})),
                ],
            )
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(r.results[0].status, Status::Ok, "{:?}", r.results[0].error);
    assert_eq!(r.results[0].output, Some(json!({"sum": 5.0})));
    let fail = r.results[1].error.as_ref().unwrap();
    assert_eq!(
        (r.results[1].status, fail.code.as_str()),
        (Status::Error, "mcp-tool-error")
    );
    assert!(
        fail.message.contains("the disk is on fire"),
        "{}",
        fail.message
    );
    let missing = r.results[2].error.as_ref().unwrap();
    assert_eq!(missing.code, "mcp-error", "{}", missing.message);
    assert!(
        missing.message.contains("no tool `missing`"),
        "{}",
        missing.message
    );
    assert_eq!(seen.calls.load(Ordering::SeqCst), 3);
    assert_eq!(k.mcp_status()[0].starts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_on_one_session_are_in_flight_together() {
    let (e, seen) = start_server().await;
    let k = kernel_of(vec![mcp_manifest("t.gather", &e, json!({}))]);
    // Each call returns only once all 16 are in flight at the server at once.
    let calls = (0..16)
        .map(|i| Call::new(format!("g{i}"), "t.gather", json!({"n": 16})))
        .collect();
    let r = k.run(Batch::new("t", calls).unwrap()).await.unwrap();
    for c in &r.results {
        assert_eq!(c.status, Status::Ok, "{}: {:?}", c.id, c.error);
    }
    assert_eq!(seen.most_in_flight.load(Ordering::SeqCst), 16);
    assert_eq!(k.mcp_status()[0].starts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_sends_the_mcp_cancellation_to_the_server() {
    let (e, seen) = start_server().await;
    let k = kernel_of(vec![mcp_manifest(
        "t.slow",
        &e,
        json!({"limits": {"memMB": 64, "cpuMs": 200}}),
    )]);
    let r = run_one(&k, "s", "t.slow", json!({})).await;
    assert_eq!(
        r.results[0].status,
        Status::Timeout,
        "{:?}",
        r.results[0].error
    );
    // The server's handler ends only when `notifications/cancelled` reaches it.
    seen.cancelled.notified().await;
    assert_eq!(seen.cancellations.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_batch_cancels_its_mcp_calls_at_the_server() {
    let (e, seen) = start_server().await;
    let k = kernel_of(vec![mcp_manifest("t.slow", &e, json!({}))]);
    let handle = k
        .submit(Batch::new("t", vec![Call::new("s", "t.slow", json!({}))]).unwrap())
        .unwrap();
    while seen.calls.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    handle.cancel();
    let r = handle.finish().await;
    assert_eq!(r.results[0].status, Status::Cancelled);
    seen.cancelled.notified().await;
    assert_eq!(seen.cancellations.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_over_http_uses_the_output_schema_and_the_server_name() {
    let (e, _) = start_server().await;
    let imported = import_manifests(&McpEndpoint::parse(&e).unwrap(), &ImportOptions::default())
        .await
        .unwrap();
    assert_eq!(
        imported.prefix, "adder",
        "the last part of the server's name"
    );
    assert_eq!(
        imported.server,
        ("sluice-test/adder".into(), "1.4.2".into())
    );
    let add = &imported.manifests[0];
    assert_eq!(add["id"], "adder.add");
    assert_eq!(add["version"], "1.4.2");
    assert_eq!(add["output"]["required"], json!(["sum"]));
    assert_eq!(add["effects"][0]["resource"], "adder:*");
    let fail = &imported.manifests[1];
    assert_eq!(fail["mutating"], true);
    assert_eq!(fail["output"], json!({}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_prefers_a_native_handler_and_mcp_transport_takes_the_server() {
    let (e, seen) = start_server().await;
    let native =
        handler(|_: ToolContext, _: Value| async { Ok::<_, ToolError>(json!({"sum": -1})) });
    let manifest = |id: &str, transport: &str| {
        let m = mcp_manifest(
            id,
            &e,
            json!({"transport": transport, "metadata": {"mcpTool": "add"}}),
        );
        sluice_kernel::model::Manifest::from_value(m).unwrap()
    };
    let tool = |id: &str, transport: &str| {
        sluice_kernel::transport::Tool::new(
            manifest(id, transport),
            sluice_kernel::model::ManifestSource::built_in(),
            Some(native.clone()),
        )
        .unwrap()
    };
    let k = Kernel::builder()
        .tool(tool("t.auto", "auto"))
        .tool(tool("t.mcp", "mcp"))
        .build()
        .unwrap();
    let r = k
        .run(
            Batch::new(
                "t",
                vec![
                    Call::new("a", "t.auto", json!({"a": 1, "b": 1})),
                    Call::new("m", "t.mcp", json!({"a": 1, "b": 1})),
                ],
            )
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        r.results[0].output,
        Some(json!({"sum": -1})),
        "auto: the native handler"
    );
    assert_eq!(
        r.results[1].output,
        Some(json!({"sum": 2.0})),
        "mcp: the server"
    );
    assert_eq!(seen.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_went_away_is_reached_again_by_a_new_session() {
    let first = start_server_on("127.0.0.1:0").await;
    let (e, addr) = (first.endpoint.clone(), first.addr);
    let k = kernel_of(vec![mcp_manifest("t.add", &e, json!({}))]);
    let r = run_one(&k, "before", "t.add", json!({"a": 1, "b": 2})).await;
    assert_eq!(r.results[0].status, Status::Ok, "{:?}", r.results[0].error);
    first.stop().await;
    // The same address, a new server process (here: a new server with no sessions).
    let second = start_server_on(&addr.to_string()).await;
    let mut r = run_one(&k, "after", "t.add", json!({"a": 1, "b": 2})).await;
    // Whether the kernel has noticed the old session's end before this call is a race with the
    // old server's shutdown: a call sent on the dying session fails with `mcp-server-exited`
    // (docs/semantics.md, "MCP tools"), and the call after it starts a new session.
    if r.results[0].status != Status::Ok {
        let code = r.results[0].error.as_ref().map(|e| e.code.as_str());
        assert_eq!(code, Some("mcp-server-exited"), "{:?}", r.results[0].error);
        r = run_one(&k, "after-again", "t.add", json!({"a": 1, "b": 2})).await;
    }
    assert_eq!(r.results[0].status, Status::Ok, "{:?}", r.results[0].error);
    assert_eq!(r.results[0].output, Some(json!({"sum": 3.0})));
    assert_eq!(second.seen.calls.load(Ordering::SeqCst), 1);
    // rmcp may re-initialize on the same client (the new server does not know the old session
    // id) or Sluice may start a new session; either way the call reached the new server.
    second.stop().await;
}

#[test]
fn a_tool_with_no_way_to_run_is_refused_at_registration() {
    let m = json!({"id": "t.nothing", "description": "d", "version": "1.0.0",
                   "input": {}, "output": {}});
    let err = Kernel::builder()
        .tool(unresolved_tool(m))
        .build()
        .unwrap_err()
        .to_string();
    assert!(err.contains("`t.nothing`"), "{err}");
    assert!(
        err.contains("no native handler")
            && err.contains("no `spec`")
            && err.contains("no `mcpEndpoint`"),
        "{err}"
    );
    let native_only = json!({"id": "t.native", "description": "d", "version": "1.0.0",
                             "input": {}, "output": {}, "transport": "native"});
    let err = Kernel::builder()
        .tool(unresolved_tool(native_only))
        .build()
        .unwrap_err()
        .to_string();
    assert!(err.contains("transport: native"), "{err}");
}

/// An MCP tool's call carries its idempotency key in `_meta` (`sluice/idempotency-key`), the key
/// its context gives a native handler: 32 hex digits, one per call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_call_carries_its_idempotency_key_in_meta() {
    let (e, _seen) = start_server().await;
    let k = kernel_of(vec![mcp_manifest("t.key", &e, json!({}))]);
    let r = k
        .run(
            Batch::new(
                "t",
                vec![
                    Call::new("a", "t.key", json!({})),
                    Call::new("b", "t.key", json!({})),
                ],
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let key = |i: usize| {
        r.results[i].output.as_ref().unwrap()["key"]
            .as_str()
            .unwrap_or_else(|| panic!("no key: {:?}", r.results[i]))
            .to_owned()
    };
    assert_eq!(key(0).len(), 32);
    assert_ne!(key(0), key(1));
    assert_eq!(
        key(0),
        sluice_kernel::provenance::idempotency_key("t", &r.batch_id, "a")
    );
}
