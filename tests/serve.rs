//! `sluice serve`, the gateway, as a process: MCP clients (rmcp's, over streamable HTTP and
//! stdio) in several sessions, the batch API, tokens and tenants, `/healthz` and `/metrics`, bad
//! input, and a drain on SIGTERM that leaves a provenance log that verifies.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::process::Command;

use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, Implementation, NumberOrString, ProgressToken, RequestMetaObject,
};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};
use support::gateway::{start, terminate, Gateway};
use support::temp_dir;

async fn mcp_client(url: &str, token: Option<&str>) -> RunningService<RoleClient, ClientConfig> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url);
    if let Some(t) = token {
        config = config.auth_header(t);
    }
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("sluice-test", "1.0.0"),
    )
    .serve(transport)
    .await
    .expect("the MCP handshake succeeds")
}

/// Waits until the gateway's own gauge says `n` calls of tenant `default` are in flight.
async fn in_flight(g: &Gateway, n: usize) {
    until_metric(
        g,
        &format!(r#"sluice_calls_in_flight{{tenant="default"}} {n}"#),
    )
    .await;
}

/// Posts a Sluice batch to `/v1/run` (no token) and reads the JSON answer.
async fn run_batch(base: String, batch: Value) -> Value {
    reqwest::Client::new()
        .post(format!("{base}/v1/run"))
        .header("content-type", "application/json")
        .body(batch.to_string())
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap()
}

/// Waits until `/metrics` has the line `want`.
async fn until_metric(g: &Gateway, want: &str) {
    let http = reqwest::Client::new();
    loop {
        let m = http
            .get(format!("{}/metrics", g.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if m.lines().any(|l| l == want) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

fn args(v: Value) -> serde_json::Map<String, Value> {
    v.as_object().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_sessions_share_the_tenants_conflict_order() {
    let dir = temp_dir("serve-mcp");
    let log = dir.join("log.jsonl");
    let g = start(&[
        "--provenance",
        log.to_str().unwrap(),
        "--durability",
        "durable",
    ]);
    let url = format!("{}/mcp", g.base);
    let a = mcp_client(&url, None).await;
    let b = mcp_client(&url, None).await;

    let tools = a.list_all_tools().await.unwrap();
    let incr = tools.iter().find(|t| t.name == "sluice.kv.incr").unwrap();
    let ann = incr.annotations.as_ref().unwrap();
    assert_eq!(ann.read_only_hint, Some(false));
    assert_eq!(ann.destructive_hint, Some(true));
    assert_eq!(ann.idempotent_hint, Some(false));
    let get = tools.iter().find(|t| t.name == "sluice.kv.get").unwrap();
    assert_eq!(get.annotations.as_ref().unwrap().read_only_hint, Some(true));

    // Twenty increments of one key from two sessions at once: each waits for the one before
    // (an unordered pair would lose an update: incr waits between its read and its write).
    let mut calls = Vec::new();
    for i in 0..20 {
        let peer = if i % 2 == 0 {
            a.peer().clone()
        } else {
            b.peer().clone()
        };
        calls.push(tokio::spawn(async move {
            peer.call_tool(
                CallToolRequestParams::new("sluice.kv.incr")
                    .with_arguments(args(json!({"key": "shared", "delay_ms": 5}))),
            )
            .await
        }));
    }
    for c in calls {
        let r = c.await.unwrap().unwrap();
        assert_ne!(r.is_error, Some(true), "{r:?}");
    }
    let r = a
        .call_tool(
            CallToolRequestParams::new("sluice.kv.get")
                .with_arguments(args(json!({"key": "shared"}))),
        )
        .await
        .unwrap();
    assert_eq!(r.structured_content.unwrap()["value"], 20, "no update lost");

    // An invalid argument is a result the model can read; an unknown tool is -32602.
    let bad = a
        .call_tool(
            CallToolRequestParams::new("sluice.kv.get").with_arguments(args(json!({"key": 5}))),
        )
        .await
        .unwrap();
    assert_eq!(bad.is_error, Some(true));
    let text = serde_json::to_value(&bad.content).unwrap()[0]["text"].clone();
    assert!(
        text.as_str().unwrap().starts_with("invalid-input (/key):"),
        "{text}"
    );
    let unknown = a
        .call_tool(CallToolRequestParams::new("no.such.tool"))
        .await
        .unwrap_err();
    let msg = unknown.to_string();
    assert!(
        msg.contains("-32602") || msg.contains("no tool `no.such.tool`"),
        "{msg}"
    );
    a.cancel().await.unwrap();
    b.cancel().await.unwrap();

    // Each MCP call is its own batch, and its record names the transport, session and client.
    let batch_records: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["record"]["type"] == "batch" || l["record"].get("calls").is_some())
        .map(|l| l["record"].clone())
        .collect();
    assert!(batch_records.len() >= 21, "{}", batch_records.len());
    let origin = &batch_records[0]["origin"];
    assert_eq!(origin["transport"], "mcp", "{origin}");
    assert_eq!(origin["client"], "sluice-test");
    assert_eq!(origin["client_version"], "1.0.0");
    assert!(origin["session"].is_string(), "{origin}");
    let sessions: std::collections::HashSet<String> = batch_records
        .iter()
        .filter_map(|r| r["origin"]["session"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(sessions.len(), 2, "two sessions: {sessions:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_name_tenants_and_the_batch_api_speaks_the_clis_shapes() {
    let dir = temp_dir("serve-tokens");
    let tokens = dir.join("tokens.json");
    std::fs::write(
        &tokens,
        json!({"tokens": [
            {"sha256": sluice::serve::token_hash("alpha-secret"), "tenant": "alpha"},
            {"sha256": sluice::serve::token_hash("beta-secret"), "tenant": "beta"}]})
        .to_string(),
    )
    .unwrap();
    let g = start(&["--tokens", tokens.to_str().unwrap(), "--max-body", "2000"]);
    let http = reqwest::Client::new();
    let post = |path: &str, token: Option<&str>, body: String| {
        let mut r = http
            .post(format!("{}{path}", g.base))
            .header("content-type", "application/json")
            .body(body);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };

    // No token, a wrong one: 401 and nothing runs. /healthz needs none.
    let batch = json!({"calls": [{"id": "w", "tool": "sluice.kv.put",
                                  "input": {"key": "k", "value": "alpha's"}}]});
    let r = post("/v1/run", None, batch.to_string()).await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["code"],
        "unauthorized"
    );
    let r = post("/v1/run", Some("nope"), batch.to_string())
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = http
        .get(format!("{}/healthz", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mcp = reqwest::Client::new()
        .post(format!("{}/mcp", g.base))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(mcp.status(), 401, "MCP is authenticated too");

    // The batch API: cli.md's JSON; a tenant's writes are not the other's.
    let r = post("/v1/run", Some("alpha-secret"), batch.to_string())
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["results"][0]["status"], "ok");
    assert_eq!(v["results"][0]["version"], "1.0.0");
    assert!(v["makespan_ms"].is_number());
    // A batch of one tenant naming another is refused (tests/serve_tenancy.rs: data apart).
    let foreign = json!({"tenant": "alpha", "calls": []});
    let r = post("/v1/run", Some("beta-secret"), foreign.to_string())
        .await
        .unwrap();
    assert_eq!(r.status(), 403);

    // Model-API shapes in and out.
    let msg = json!({"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "sluice__kv__get", "arguments": "{\"key\": \"k\"}"}}]});
    let r = post(
        "/v1/run?batch-format=openai&format=openai",
        Some("alpha-secret"),
        msg.to_string(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v[0]["tool_call_id"], "call_1");
    assert!(v[0]["content"].as_str().unwrap().contains("alpha's"), "{v}");

    // Plan and tools, as the CLI prints them.
    let plan = json!({"calls": [
        {"id": "a", "tool": "sluice.kv.put", "input": {"key": "x", "value": 1}},
        {"id": "b", "tool": "sluice.kv.get", "input": {"key": "x"}}]});
    let r = post("/v1/plan", Some("beta-secret"), plan.to_string())
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["tenant"], "beta");
    assert_eq!(v["edges"][0]["kind"], "read-after-write");
    let r = http
        .get(format!("{}/v1/tools?format=openai", g.base))
        .bearer_auth("beta-secret")
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert!(v
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["function"]["name"] == "sluice__kv__get"));

    // Bad input: each gets its own status and a JSON error; none of it runs anything.
    let cases: Vec<(&str, String, &str, u16)> = vec![
        ("/v1/run", "{not json".into(), "application/json", 400),
        (
            "/v1/run",
            json!({"calls": [{"id": "x", "tool": "t"}, {"id": "x", "tool": "t"}]}).to_string(),
            "application/json",
            400,
        ),
        ("/v1/run", "x".repeat(5000), "application/json", 413),
        ("/v1/run", batch.to_string(), "text/plain", 415),
        ("/v1/nothing", "{}".into(), "application/json", 404),
        (
            "/v1/run?batch-format=klingon",
            batch.to_string(),
            "application/json",
            400,
        ),
    ];
    for (path, body, ct, status) in cases {
        let r = http
            .post(format!("{}{path}", g.base))
            .bearer_auth("alpha-secret")
            .header("content-type", ct)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{path} {ct}");
        let v: Value = r.json().await.unwrap();
        assert!(
            v["error"]["code"].is_string() && v["error"]["message"].is_string(),
            "{v}"
        );
    }

    // The metrics count the calls per tenant, tool and status.
    let m = http
        .get(format!("{}/metrics", g.base))
        .bearer_auth("alpha-secret")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        m.contains(r#"sluice_calls_total{tenant="alpha",tool="sluice.kv.put",status="ok"} 1"#),
        "{m}"
    );
    assert!(m.contains("sluice_call_wait_seconds_bucket"), "{m}");
    assert!(m.contains("sluice_calls_in_flight"), "{m}");
}

#[test]
fn without_tokens_only_loopback_is_served() {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a loopback address"), "{err}");
    let dir = temp_dir("serve-bad-tokens");
    let f = dir.join("tokens.json");
    std::fs::write(
        &f,
        r#"{"tokens": [{"sha256": "plain-token", "tenant": "a"}]}"#,
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--tokens", f.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/tokens/0/sha256"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_serves_one_session() {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.args(["serve", "--stdio", "--tenant", "solo"]);
    let transport = TokioChildProcess::new(cmd).unwrap();
    let client = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("sluice-test", "1.0.0"),
    )
    .serve(transport)
    .await
    .unwrap();
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "sluice.echo"));
    let r = client
        .call_tool(CallToolRequestParams::new("sluice.echo").with_arguments(args(json!({"hi": 1}))))
        .await
        .unwrap();
    assert_eq!(r.structured_content.unwrap(), json!({"hi": 1}));
    client.cancel().await.unwrap();
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_and_the_log_verifies() {
    let dir = temp_dir("serve-drain");
    let log = dir.join("log.jsonl");
    let mut g = start(&[
        "--provenance",
        log.to_str().unwrap(),
        "--drain-timeout",
        "10",
    ]);
    let http = reqwest::Client::new();
    // A call in flight when the signal comes finishes; a request after it gets 503.
    let slow = tokio::spawn(run_batch(
        g.base.clone(),
        json!({"calls": [{"id": "s", "tool": "sluice.sleep", "input": {"ms": 600}}]}),
    ));
    // The signal comes once the call is in flight (the gateway's own gauge says so).
    in_flight(&g, 1).await;
    terminate(&g);
    // Once it drains (its health says so), new work gets 503.
    loop {
        match http.get(format!("{}/healthz", g.base)).send().await {
            Ok(r) if r.status() == 503 => {
                let late = http
                    .post(format!("{}/v1/run", g.base))
                    .header("content-type", "application/json")
                    .body(json!({"calls": []}).to_string())
                    .send()
                    .await;
                if let Ok(r) = late {
                    assert_eq!(r.status(), 503);
                }
                break;
            }
            Ok(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
            Err(_) => panic!("the gateway stopped before its call in flight finished"),
        }
    }
    let v = slow.await.unwrap();
    assert_eq!(v["results"][0]["status"], "ok", "{v}");
    let status = g.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let verify = support::sluice(&["provenance", "verify", log.to_str().unwrap()], None, None);
    assert_eq!(verify.code, 0, "{}", verify.stderr);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(r#""request":"1","transport":"http"}"#),
        "{text}"
    );
    assert!(text.contains(r#""origin":{"connection":""#), "{text}");
    // Keep Drop from killing an exited process twice.
    g.child = Command::new("true").spawn().unwrap();
}

/// The policy the SDK clients meet: tenant `default` allows, but denies deletes and the tool
/// `sluice.sleep` (which its tools/list then leaves out).
fn client_policy(dir: &std::path::Path) -> std::path::PathBuf {
    let policy = dir.join("policy.json");
    std::fs::write(
        &policy,
        json!({"tenants": {"default": {"default": "allow", "rules": [
            {"id": "no-deletes", "decision": "deny", "effects": ["deletes"]},
            {"id": "no-sleep", "decision": "deny", "tools": ["sluice.sleep"]}]}}})
        .to_string(),
    )
    .unwrap();
    policy
}

/// A policy for tenant `default` that allows everything but asks before `sluice.kv.put`.
fn ask_puts_policy(dir: &std::path::Path) -> std::path::PathBuf {
    let policy = dir.join("ask-puts.json");
    std::fs::write(
        &policy,
        json!({"tenants": {"default": {"default": "allow", "rules": [
            {"id": "ask-puts", "decision": "ask", "tools": ["sluice.kv.put"]}]}}})
        .to_string(),
    )
    .unwrap();
    policy
}

/// The official MCP Python SDK (`mcp`, tests/sdk/mcp-requirements.txt) as the client:
/// tests/sdk/mcp_clients.py lists tools, increments one key from three sessions at once, gets a
/// denial and an invalid-input result, writes one file from two sessions, cancels a waiting
/// call; against a gateway with `--approve elicit`, answers elicitation forms (protocol
/// 2025-11-25: requests to the client) and reads the progress of a waiting call.
#[test]
fn the_official_python_mcp_sdk_is_a_client() {
    let py = support::python::packages("mcp-python", "mcp-requirements.txt");
    let dir = temp_dir("serve-python");
    let policy = client_policy(&dir);
    let g = start(&[
        "--policy",
        policy.to_str().unwrap(),
        "--approve",
        "all",
        "--root",
        dir.to_str().unwrap(),
    ]);
    let url = format!("{}/mcp", g.base);
    let asking = ask_puts_policy(&dir);
    let e = start(&["--policy", asking.to_str().unwrap(), "--approve", "elicit"]);
    let elicit_url = format!("{}/mcp", e.base);
    let out = support::python::run_script(
        "mcp_clients.py",
        &py,
        &[
            ("SLUICE_MCP_URL", &url),
            ("SLUICE_MCP_ELICIT_URL", &elicit_url),
        ],
    );
    assert!(out.contains("8 checks passed"), "{out}");
}

/// The reference MCP server (npm) behind the gateway: its tool, adopted as a manifest, is called
/// through the gateway's MCP endpoint like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_server_behind_the_gateway() {
    let dir = temp_dir("serve-downstream");
    let tools = dir.join("ev.json");
    let endpoint = support::mcp::everything_stdio("");
    std::fs::write(
        &tools,
        support::mcp::mcp_manifest(
            "ev.echo",
            &endpoint,
            json!({"metadata": {"mcpTool": "echo"},
                   "input": {"type": "object", "properties": {"message": {"type": "string"}},
                             "required": ["message"]}}),
        )
        .to_string(),
    )
    .unwrap();
    let g = start(&["--tools", tools.to_str().unwrap()]);
    let client = mcp_client(&format!("{}/mcp", g.base), None).await;
    let listed = client.list_all_tools().await.unwrap();
    let echo = listed.iter().find(|t| t.name == "ev.echo").unwrap();
    assert_eq!(
        echo.annotations.as_ref().unwrap().open_world_hint,
        Some(true),
        "a downstream MCP tool is open-world"
    );
    let r = client
        .call_tool(
            CallToolRequestParams::new("ev.echo").with_arguments(args(json!({"message": "hi"}))),
        )
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    assert!(serde_json::to_string(&r).unwrap().contains("hi"), "{r:?}");
    client.cancel().await.unwrap();
}

/// A flood of sessions meets `--max-sessions` (a clear 503, the open ones unaffected, a closed
/// one frees its place), and a malformed JSON-RPC message is refused without harm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_sessions_and_malformed_json_rpc_leave_the_others_working() {
    let g = start(&["--max-sessions", "3"]);
    let url = format!("{}/mcp", g.base);
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(mcp_client(&url, None).await);
    }
    let http = reqwest::Client::new();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "flood", "version": "0"}}});
    let r = http
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(init.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "too-many-sessions", "{v}");

    // Malformed JSON-RPC: refused, nothing else disturbed.
    for body in ["{not json", "[]", r#"{"jsonrpc": "2.0", "method": 5}"#] {
        let r = http
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", "no-such-session")
            .body(body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_client_error(), "{body}: {}", r.status());
    }
    let r = open[0]
        .call_tool(CallToolRequestParams::new("sluice.echo").with_arguments(args(json!({"a": 1}))))
        .await
        .unwrap();
    assert_eq!(r.structured_content.unwrap(), json!({"a": 1}));

    // A session that ends frees its place.
    let closed = open.pop().unwrap();
    closed.cancel().await.unwrap();
    let mut again = None;
    for _ in 0..500 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
        let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
        if let Ok(c) = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("sluice-test", "1.0.0"),
        )
        .serve(transport)
        .await
        {
            again = Some(c);
            break;
        }
    }
    let again = again.expect("a place freed by a closed session is taken again");
    assert!(!again.list_all_tools().await.unwrap().is_empty());
}

/// The official MCP TypeScript SDK as the client (tests/sdk/mcp_clients.mjs): tools/list,
/// increments from three sessions at once, a denial, an invalid input, -32602, and a waiting call
/// cancelled through an AbortSignal that never runs.
#[test]
fn the_official_typescript_mcp_sdk_is_a_client() {
    let modules = support::mcp::npm_package(
        "mcp-typescript",
        "@modelcontextprotocol/sdk@1.32.2",
        "node_modules/@modelcontextprotocol/sdk/package.json",
    )
    .join("node_modules");
    let dir = temp_dir("serve-typescript");
    let policy = client_policy(&dir);
    let g = start(&["--policy", policy.to_str().unwrap(), "--approve", "all"]);
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/mcp_clients.mjs");
    let out = Command::new("node")
        .arg(&script)
        .env("SLUICE_MCP_URL", format!("{}/mcp", g.base))
        .env("NODE_PATH", &modules)
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    print!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("4 checks passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An MCP client for the gateway's tests that declares elicitation: it records the progress
/// messages it receives and the forms it is asked, and answers each form as `answer` says.
#[derive(Clone, Default)]
struct AskingClient {
    progress: Arc<Mutex<Vec<String>>>,
    asked: Arc<Mutex<Vec<String>>>,
    answer: Arc<Mutex<&'static str>>,
}

impl rmcp::ClientHandler for AskingClient {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _ctx: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = request {
            self.asked.lock().unwrap().push(message);
        }
        let answer = *self.answer.lock().unwrap();
        Ok(match answer {
            "approve" => {
                ElicitResult::new(ElicitationAction::Accept).with_content(json!({"approve": true}))
            }
            "say-no" => {
                ElicitResult::new(ElicitationAction::Accept).with_content(json!({"approve": false}))
            }
            _ => ElicitResult::new(ElicitationAction::Decline),
        })
    }

    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _ctx: rmcp::service::NotificationContext<RoleClient>,
    ) {
        if let Some(m) = params.message {
            self.progress.lock().unwrap().push(m);
        }
    }

    fn get_info(&self) -> ClientConfig {
        let capabilities: ClientCapabilities =
            serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap();
        ClientConfig::new(capabilities, Implementation::new("sluice-test", "1.0.0"))
    }
}

fn text_of(r: &rmcp::model::CallToolResult) -> String {
    serde_json::to_value(&r.content).unwrap()[0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A call that waits tells its client what it waits for (progress); asks go to the client's user
/// (elicitation, as `input_required` on MCP 2026-07-28, rmcp's client driving the rounds); every
/// call is a span at an OTLP receiver, linked to the span of the call it waited for.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn progress_elicitation_and_spans() {
    let receiver = support::otlp::start().await;
    let dir = temp_dir("serve-otlp");
    let log = dir.join("log.jsonl");
    let policy = ask_puts_policy(&dir);
    let mut g = start(&[
        "--policy",
        policy.to_str().unwrap(),
        "--approve",
        "elicit",
        "--otlp",
        &receiver.url(),
        "--provenance",
        log.to_str().unwrap(),
    ]);
    let url = format!("{}/mcp", g.base);
    let handler = AskingClient::default();
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), {
        StreamableHttpClientTransportConfig::with_uri(url.as_str())
    });
    let a = handler.clone().serve(transport).await.unwrap();
    // `sluice.kv.incr` asks on its first use (its manifest's mode): the user approves.
    *handler.answer.lock().unwrap() = "approve";

    // Progress: a call that waits for a conflicting one says so, then that it runs.
    let holder = {
        let peer = a.peer().clone();
        tokio::spawn(async move {
            peer.call_tool(
                CallToolRequestParams::new("sluice.kv.incr")
                    .with_arguments(args(json!({"key": "p", "delay_ms": 300}))),
            )
            .await
        })
    };
    in_flight(&g, 1).await;
    let mut waiting =
        CallToolRequestParams::new("sluice.kv.incr").with_arguments(args(json!({"key": "p"})));
    let mut meta = RequestMetaObject::default();
    meta.set_progress_token(ProgressToken(NumberOrString::Number(7)));
    waiting.meta = Some(meta);
    let waited = a.call_tool(waiting).await.unwrap();
    assert_ne!(waited.is_error, Some(true), "{waited:?}");
    assert_ne!(holder.await.unwrap().unwrap().is_error, Some(true));
    // rmcp's client gives every request a progress token: the first call said it waited for
    // its approval, the second for the first; both said they ran.
    let progress = handler.progress.lock().unwrap().clone();
    assert_eq!(progress.len(), 4, "{progress:?}");
    assert!(
        progress.contains(
            &"waiting for approval, asked by `mode:ask_on_first_use` (the tool's \
              human-in-the-loop mode)"
                .to_owned()
        ),
        "{progress:?}"
    );
    let conflict = progress
        .iter()
        .find_map(|m| m.strip_prefix("waiting for call `"))
        .unwrap_or_else(|| panic!("{progress:?}"));
    // When the second call arrives while the first still waits for its first-use approval, it
    // waits for that question too, and says so after the conflict (a matter of timing).
    assert!(
        conflict.ends_with("(sluice.kv.incr) on kv:p (read-after-write)")
            || conflict.contains(
                "(sluice.kv.incr) on kv:p (read-after-write) and for approval, asked by \
                 `mode:ask_on_first_use`"
            ),
        "{progress:?}"
    );
    let running = progress.iter().filter(|m| *m == "running sluice.kv.incr");
    assert_eq!(running.count(), 2, "{progress:?}");
    let first_use = std::mem::take(&mut *handler.asked.lock().unwrap());
    assert_eq!(
        first_use.len(),
        1,
        "a first use is asked once: {first_use:?}"
    );

    // Elicitation: approved runs, declined and "no" are rejected, naming who answered.
    let put = |value: i64| {
        CallToolRequestParams::new("sluice.kv.put")
            .with_arguments(args(json!({"key": "e", "value": value})))
    };
    let ok = a.call_tool(put(1)).await.unwrap();
    assert_ne!(ok.is_error, Some(true), "{ok:?}");
    let asked = handler.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(
        asked[0].contains("`sluice.kv.put`") && asked[0].contains("ask-puts"),
        "{asked:?}"
    );
    for answer in ["decline", "say-no"] {
        *handler.answer.lock().unwrap() = answer;
        let no = a.call_tool(put(2)).await.unwrap();
        assert_eq!(no.is_error, Some(true), "{answer}: {no:?}");
        assert!(
            text_of(&no).starts_with("rejected (elicitation:sluice-test):"),
            "{answer}: {}",
            text_of(&no)
        );
    }
    // A client that cannot be asked is rejected: fail closed.
    let mute = mcp_client(&url, None).await;
    let no = mute.call_tool(put(3)).await.unwrap();
    assert!(
        text_of(&no).starts_with("rejected (no-elicitation):"),
        "{}",
        text_of(&no)
    );
    // The batch API has nobody to ask either.
    let v = run_batch(
        g.base.clone(),
        json!({"calls": [{"id": "b", "tool": "sluice.kv.put", "input": {"key": "e", "value": 4}}]}),
    )
    .await;
    assert_eq!(v["results"][0]["status"], "rejected", "{v}");
    let get = a
        .call_tool(
            CallToolRequestParams::new("sluice.kv.get").with_arguments(args(json!({"key": "e"}))),
        )
        .await
        .unwrap();
    assert_eq!(
        get.structured_content.unwrap()["value"],
        1,
        "only the approved put ran"
    );
    a.cancel().await.unwrap();
    mute.cancel().await.unwrap();

    // The drain sends the last spans.
    terminate(&g);
    assert_eq!(g.child.wait().unwrap().code(), Some(0));
    g.child = Command::new("true").spawn().unwrap();
    assert_eq!(receiver.errors(), Vec::<String>::new());
    let spans = receiver.spans();
    assert_eq!(spans.len(), 8, "one span per call: {spans:#?}");
    for s in &spans {
        assert!(s.name.starts_with("execute_tool "), "{s:?}");
        assert_eq!(s.attr("gen_ai.operation.name"), Some("execute_tool"));
        assert_eq!(
            Some(&s.name["execute_tool ".len()..]),
            s.attr("gen_ai.tool.name")
        );
        assert!(s.attr("gen_ai.tool.call.id").is_some(), "{s:?}");
        assert_eq!(s.attr("sluice.tenant"), Some("default"));
        assert_eq!(s.service, "sluice");
        assert!(s.end_unix_nano >= s.start_unix_nano);
    }
    let incr: Vec<&support::otlp::Span> = spans
        .iter()
        .filter(|s| s.name == "execute_tool sluice.kv.incr")
        .collect();
    assert_eq!(incr.len(), 2);
    let (linked, first): (Vec<&support::otlp::Span>, Vec<_>) =
        incr.iter().partition(|s| !s.links.is_empty());
    assert_eq!((linked.len(), first.len()), (1, 1), "{incr:#?}");
    let (to, link_attrs) = &linked[0].links[0];
    assert_eq!(
        to, &first[0].span_id,
        "the link names the span it waited for"
    );
    assert_eq!(
        link_attrs.get("sluice.conflict.kind").map(String::as_str),
        Some("read-after-write")
    );
    assert!(linked[0].events.contains(&"sluice.started".to_owned()));
    let puts: Vec<&support::otlp::Span> = spans
        .iter()
        .filter(|s| s.name == "execute_tool sluice.kv.put")
        .collect();
    assert_eq!(puts.len(), 5);
    let errors: Vec<Option<&str>> = puts.iter().map(|s| s.attr("error.type")).collect();
    assert_eq!(
        errors.iter().filter(|e| e.is_none()).count(),
        1,
        "{errors:?}"
    );
    assert_eq!(
        errors.iter().filter(|e| **e == Some("rejected")).count(),
        4,
        "{errors:?}"
    );
    assert!(puts
        .iter()
        .filter(|s| s.attr("error.type").is_some())
        .all(|s| s.status_code == 2));

    // Provenance names who approved.
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(r#""approver":"elicitation:sluice-test""#),
        "{text}"
    );
}

/// A client that sends a request and never reads the answer: the gateway's blocked write gives
/// up after `--write-timeout`, the connection is dropped (and counted), and nobody else waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_dropped_and_the_others_go_on() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = temp_dir("serve-stalled");
    std::fs::write(dir.join("big.txt"), "x".repeat(4 << 20)).unwrap();
    let g = start(&["--root", dir.to_str().unwrap(), "--write-timeout", "1"]);
    let addr: std::net::SocketAddr = g.base.strip_prefix("http://").unwrap().parse().unwrap();

    // ~16 MiB of answer to a client whose receive buffer is small and who never reads.
    let calls: Vec<Value> = (0..4)
        .map(|i| json!({"id": format!("r{i}"), "tool": "sluice.fs.read", "input": {"path": "big.txt"}}))
        .collect();
    let body = json!({ "calls": calls }).to_string();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = socket.connect(addr).await.unwrap();
    let request = format!(
        "POST /v1/run HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stalled.write_all(request.as_bytes()).await.unwrap();

    // Everyone else is served meanwhile.
    let http = reqwest::Client::new();
    let run = |key: &'static str| {
        run_batch(
            g.base.clone(),
            json!({"calls": [{"id": "p", "tool": "sluice.kv.put", "input": {"key": key, "value": 1}}]}),
        )
    };
    assert_eq!(run("a").await["results"][0]["status"], "ok");

    // The gateway gives up on the stalled client, and says so.
    until_metric(&g, "sluice_http_stalled_connections_total 1").await;
    // What the stalled client can still read ends before the whole answer: it was cut off.
    let mut got = Vec::new();
    let _ = stalled.read_to_end(&mut got).await;
    assert!(
        got.len() < 16 << 20,
        "the whole answer arrived: {} bytes",
        got.len()
    );
    assert_eq!(run("b").await["results"][0]["status"], "ok");
    let health = http
        .get(format!("{}/healthz", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
}

/// One listing rule everywhere (issue 42): the MCP `tools/list` of a session, the batch API's
/// `/v1/tools?format=mcp` and `sluice tools --format mcp` give each tool the same entry (name,
/// schemas, annotations, `_meta`), and the policy's hidden tool is left out of both of the
/// gateway's listings alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_listing_of_the_gateway_agrees_with_the_cli() {
    let dir = temp_dir("serve-listings");
    let policy = client_policy(&dir);
    let g = start(&["--policy", policy.to_str().unwrap()]);
    let client = mcp_client(&format!("{}/mcp", g.base), None).await;
    let listed: Vec<Value> = client
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| serde_json::to_value(t).unwrap())
        .collect();
    let batch_api: Vec<Value> = reqwest::get(format!("{}/v1/tools?format=mcp", g.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let cli = support::sluice(&["tools", "--format", "mcp"], None, None);
    assert_eq!(cli.code, 0, "{}", cli.stderr);
    let by_name = |list: &[Value]| -> std::collections::BTreeMap<String, Value> {
        list.iter()
            .map(|t| (t["name"].as_str().unwrap().to_owned(), t.clone()))
            .collect()
    };
    let (listed, batch_api) = (by_name(&listed), by_name(&batch_api));
    let cli = by_name(cli.json().as_array().unwrap());
    assert!(
        !listed.contains_key("sluice.sleep"),
        "a denied tool is hidden"
    );
    assert!(
        !batch_api.contains_key("sluice.sleep"),
        "from both listings"
    );
    assert!(cli.contains_key("sluice.sleep"), "the CLI lists every tool");
    assert_eq!(listed.len(), cli.len() - 1);
    for (name, entry) in &listed {
        assert_eq!(
            Some(entry),
            batch_api.get(name),
            "{name}: tools/list vs /v1/tools"
        );
        for key in ["inputSchema", "annotations", "_meta", "description"] {
            assert_eq!(entry.get(key), cli[name].get(key), "{name}: {key}");
        }
    }
    let put = &listed["sluice.kv.put"]["annotations"];
    assert_eq!(put["destructiveHint"], true, "{put}");
    client.cancel().await.unwrap();
}
