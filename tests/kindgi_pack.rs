//! Sluice in front of a real Kindgi pack service (`kindgi` 0.1.10 from PyPI, started on loopback
//! with a pack these tests write): its tools ordered by their declared effects, the pack's
//! outcomes mapped, deadlines, cancellation, a service that goes away and comes back, and one
//! that serves another version. The protocol details a real service does not show (headers,
//! retries of `503 overloaded`, the token) are held against a scripted service at the end.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use sluice_kernel::model::PackIndex;
use sluice_kernel::run::{BatchOptions, Kernel};
use sluice_kernel::transport::pack::{PackOptions, PackService, PackToken};
use sluice_kernel::transport::ToolRegistry;
use sluice_kernel::{Batch, CallResult, Error};
use support::pack::{self, Service, TOKEN};
use support::{sluice, temp_dir};

/// A kernel whose tools are the pack's, carried out by the service at `url` (the secret
/// `ECHO_KEY` resolves to `k-123`).
fn kernel_with(
    index: &std::path::Path,
    url: &str,
    options: PackOptions,
) -> (Kernel, Arc<PackService>) {
    let index = PackIndex::read(index).unwrap();
    let service = PackService::new(&index, url, PackToken::new(TOKEN), options).unwrap();
    let mut registry = ToolRegistry::new();
    assert_eq!(
        service.register(&index, &mut registry).unwrap(),
        index.tools.len()
    );
    let kernel = Kernel::builder()
        .tools(registry)
        .secrets(|_t: &str, name: &str, _e: Option<&str>| {
            (name == "ECHO_KEY").then(|| "k-123".to_owned())
        })
        .build()
        .unwrap();
    (kernel, service)
}

fn kernel_of(index: &std::path::Path, url: &str) -> (Kernel, Arc<PackService>) {
    kernel_with(index, url, PackOptions::default())
}

/// The tests' pack written under a new folder `name`, served, and a kernel in front of it.
fn ledger(name: &str) -> (std::path::PathBuf, Service, Kernel) {
    let dir = temp_dir(name);
    let index = pack::write_pack(&dir, "1.0.0");
    let service = Service::start(&index, pack::free_port());
    let (kernel, _) = kernel_of(&index, &service.url());
    (dir, service, kernel)
}

fn batch(calls: Value) -> Batch {
    Batch::from_value(&json!({"tenant": "acme", "calls": calls})).unwrap()
}

fn code(r: &CallResult) -> &str {
    r.error.as_ref().map_or("", |e| e.code.as_str())
}

fn message(r: &CallResult) -> &str {
    r.error.as_ref().map_or("", |e| e.message.as_str())
}

/// Runs a prepared `sluice` command with `stdin`: (exit code, stdout, stderr).
fn output(mut cmd: std::process::Command, stdin: &str) -> (i32, String, String) {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn peaks(dir: &std::path::Path) -> Value {
    serde_json::from_str::<Value>(
        &std::fs::read_to_string(pack::state(dir).join("in-flight.json")).unwrap(),
    )
    .unwrap()["peak"]
        .clone()
}

/// Two deposits on one account straight at the service lose one; through Sluice, four on each of
/// two accounts are ordered per account (none lost, never two at once on one account) while
/// the two accounts run side by side.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conflicting_writes_are_ordered_and_none_lost_where_the_bare_service_loses_one() {
    let dir = temp_dir("pack-order");
    let index = pack::write_pack(&dir, "1.0.0");
    let service = Service::start(&index, pack::free_port());

    // Straight at the service: both read 0, both write 5.
    let client = reqwest::Client::new();
    let invoke = |n: u32| {
        client
            .post(format!("{}/v1/invoke", service.url()))
            .header("kindgi-pack-token", TOKEN)
            .header("content-type", "application/json")
            .body(
                json!({"v": 2, "kind": "invoke", "tool": {"id": "ledger.deposit"},
                       "input": {"account": "bare", "cents": 5},
                       "ctx": {"tenantId": "acme", "runId": format!("r{n}")}})
                .to_string(),
            )
            .send()
    };
    let (a, b) = tokio::join!(invoke(1), invoke(2));
    let a: Value = a.unwrap().json().await.unwrap();
    let b: Value = b.unwrap().json().await.unwrap();
    assert_eq!(a["output"], json!({"cents": 5}), "{a}");
    assert_eq!(b["output"], json!({"cents": 5}), "one update lost: {b}");

    let (kernel, _) = kernel_of(&index, &service.url());
    let calls: Vec<Value> = (0..8)
        .map(|i| {
            let account = if i % 2 == 0 { "a" } else { "b" };
            json!({"id": format!("d{i}"), "tool": "ledger.deposit",
                   "input": {"account": account, "cents": 5}})
        })
        .collect();
    let result = kernel.run(batch(json!(calls))).await.unwrap();
    let outputs: Vec<(String, i64)> = result
        .results
        .iter()
        .map(|r| {
            assert_eq!(r.status.as_str(), "ok", "{r:?}");
            (
                r.id.clone(),
                r.output.as_ref().unwrap()["cents"].as_i64().unwrap(),
            )
        })
        .collect();
    let expected: Vec<(String, i64)> = (0..8).map(|i| (format!("d{i}"), 5 * (i / 2 + 1))).collect();
    assert_eq!(
        outputs, expected,
        "each account's deposits in submission order"
    );
    let balance = kernel
        .run(batch(json!([
            {"id": "a", "tool": "ledger.balance", "input": {"account": "a"}},
            {"id": "b", "tool": "ledger.balance", "input": {"account": "b"}}])))
        .await
        .unwrap();
    assert_eq!(balance.results[0].output, Some(json!({"cents": 20})));
    assert_eq!(balance.results[1].output, Some(json!({"cents": 20})));
    let peak = peaks(&dir);
    assert_eq!(
        peak["a"], 1,
        "never two deposits at once on one account: {peak}"
    );
    assert_eq!(peak["b"], 1, "{peak}");
    assert_eq!(peak["bare"], 2, "the bare service overlapped them: {peak}");
}

/// Input the pack refuses, a handler that raises, and a tool the index does not hold: each
/// answered with Sluice's code and the pack's own code and message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_packs_errors_keep_their_code_and_message() {
    let (_dir, _service, kernel) = ledger("pack-errors");
    let result = kernel
        .run(batch(json!([
            {"id": "frozen", "tool": "ledger.deposit", "input": {"account": "frozen-7", "cents": 1}},
            {"id": "throws", "tool": "ledger.probe", "input": {"fail": true}},
            {"id": "unknown", "tool": "ledger.nope", "input": {}},
            {"id": "schema", "tool": "ledger.deposit", "input": {"account": "a", "cents": 0}}])))
        .await
        .unwrap();
    let [frozen, throws, unknown, schema] = &result.results[..] else {
        panic!()
    };
    assert_eq!(code(frozen), "invalid-input", "{frozen:?}");
    assert!(
        message(frozen).contains("input-validation-failed")
            && message(frozen).contains("the account is frozen")
            && message(frozen).contains("/account"),
        "{frozen:?}"
    );
    assert_eq!(code(throws), "pack-tool-error", "{throws:?}");
    assert!(
        message(throws).contains("handler-throw")
            && message(throws).contains("the probe failed on purpose"),
        "{throws:?}"
    );
    assert_eq!(code(unknown), "unknown-tool", "{unknown:?}");
    // The index's own schema refuses this before anything is sent.
    assert_eq!(code(schema), "invalid-input", "{schema:?}");
    assert!(!message(schema).contains("pack `ledger`"), "{schema:?}");
}

/// The call's context reaches the handler: its tenant, its batch as the run, its id as the
/// request, and its idempotency key, the same key the provenance log names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_sees_the_calls_tenant_batch_and_key() {
    let (_dir, _service, kernel) = ledger("pack-ctx");
    let mut handle = kernel.open("acme").unwrap();
    handle
        .submit(sluice_kernel::Call::new("p1", "ledger.probe", json!({})))
        .unwrap();
    handle.close();
    let batch_id = handle.id().to_owned();
    let result = handle.finish().await;
    let out = result.results[0].output.clone().unwrap();
    assert_eq!(out["tenant"], "acme");
    assert_eq!(out["run"], batch_id.as_str());
    assert_eq!(out["request"], "p1");
    assert_eq!(
        out["key"],
        sluice_kernel::provenance::idempotency_key("acme", &batch_id, "p1").as_str()
    );
}

/// A call past its deadline ends `timeout` and the handler's cancellation fires; a call whose
/// batch is cancelled while it runs ends `cancelled`, and the handler sees `cancelled`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_and_a_cancellation_reach_the_handler() {
    let (dir, _service, kernel) = ledger("pack-cancel");

    let result = kernel
        .run(batch(
            json!([{"id": "late", "tool": "ledger.wait-limited", "input": {"name": "late"}}]),
        ))
        .await
        .unwrap();
    assert_eq!(
        result.results[0].status.as_str(),
        "timeout",
        "{:?}",
        result.results[0]
    );
    let seen = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || pack::wait_for_mark(&dir, "late.ended")
    })
    .await
    .unwrap();
    assert!(
        seen == "deadline-exceeded" || seen == "cancelled",
        "the handler saw its cancellation fire: {seen}"
    );

    let mut handle = kernel.open("acme").unwrap();
    handle
        .submit(sluice_kernel::Call::new(
            "held",
            "ledger.wait",
            json!({"name": "held"}),
        ))
        .unwrap();
    handle.close();
    let cancel = handle.cancellation_token();
    let started = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || pack::wait_for_mark(&dir, "held.started")
    });
    started.await.unwrap();
    cancel.cancel();
    let result = handle.finish().await;
    assert_eq!(
        result.results[0].status.as_str(),
        "cancelled",
        "{:?}",
        result.results[0]
    );
    let seen = tokio::task::spawn_blocking(move || pack::wait_for_mark(&dir, "held.ended"))
        .await
        .unwrap();
    assert_eq!(seen, "cancelled", "the service closed the handler's call");
}

/// A service that is down fails its calls `pack-unavailable`, naming the pack and never the
/// token; once it is back, the next calls run, with no new kernel. A service that comes back
/// with another version of a tool is refused (`pack-mismatch`), naming both versions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_goes_away_fails_clearly_and_works_once_back() {
    let dir = temp_dir("pack-down");
    let index = pack::write_pack(&dir, "1.0.0");
    let port = pack::free_port();
    let (kernel, service) = kernel_of(&index, &pack::url(port));

    match service.check().await {
        Err(Error::PackUnavailable { pack, .. }) => assert_eq!(pack, "ledger"),
        other => panic!("expected the service to be unreachable: {other:?}"),
    }
    let probe = || batch(json!([{"id": "p", "tool": "ledger.probe", "input": {}}]));
    let r = kernel.run(probe()).await.unwrap();
    assert_eq!(
        code(&r.results[0]),
        "pack-unavailable",
        "{:?}",
        r.results[0]
    );
    assert!(
        message(&r.results[0]).contains("pack `ledger`"),
        "{:?}",
        r.results[0]
    );
    assert!(!format!("{r:?}").contains(TOKEN));

    let running = Service::start(&index, port);
    let r = kernel.run(probe()).await.unwrap();
    assert_eq!(r.results[0].status.as_str(), "ok", "{:?}", r.results[0]);
    running.stop();

    let r = kernel.run(probe()).await.unwrap();
    assert_eq!(
        code(&r.results[0]),
        "pack-unavailable",
        "{:?}",
        r.results[0]
    );

    // Back, but with the pack at another version: refused, both versions named.
    let other = temp_dir("pack-down-v2");
    let index2 = pack::write_pack(&other, "1.1.0");
    let _v2 = Service::start(&index2, port);
    let r = kernel.run(probe()).await.unwrap();
    assert_eq!(code(&r.results[0]), "pack-mismatch", "{:?}", r.results[0]);
    let m = message(&r.results[0]);
    assert!(
        m.contains("`ledger.probe` is version 1.0.0 in the index and 1.1.0"),
        "{m}"
    );
}

/// The CLI: `validate` and `tools` read the index (every model format), `plan` orders its tools
/// by their effects, `run` checks `/v1/info` first (another version is exit 1 naming it) and
/// keeps the token out of its output and its provenance log.
#[test]
fn the_cli_reads_plans_and_runs_a_pack() {
    let dir = temp_dir("pack-cli");
    let index = pack::write_pack(&dir, "1.0.0");
    let index_s = index.to_str().unwrap();

    let v = sluice(&["validate", "--format", "json", index_s], None, None);
    assert_eq!(v.code, 0, "{}{}", v.stdout, v.stderr);
    let manifests = v.json()["manifests"].as_array().unwrap().clone();
    assert_eq!(manifests.len(), 5);
    assert!(manifests.iter().all(|m| m["valid"] == true));

    for format in [
        "json",
        "openai",
        "openai-responses",
        "anthropic",
        "gemini",
        "mcp",
    ] {
        let t = sluice(
            &["tools", "--pack", index_s, "--format", format],
            None,
            None,
        );
        assert_eq!(t.code, 0, "{format}: {}", t.stderr);
        assert!(t.stdout.contains("ledger"), "{format}: {}", t.stdout);
    }

    let deposits = json!({"tenant": "acme", "calls": [
        {"id": "d1", "tool": "ledger.deposit", "input": {"account": "a", "cents": 5}},
        {"id": "d2", "tool": "ledger.deposit", "input": {"account": "a", "cents": 5}},
        {"id": "d3", "tool": "ledger.deposit", "input": {"account": "b", "cents": 5}}]})
    .to_string();
    let p = sluice(
        &["plan", "--pack", index_s, "--batch", "-"],
        Some(&deposits),
        None,
    );
    assert_eq!(p.code, 0, "{}", p.stderr);
    assert_eq!(
        p.json()["edges"],
        json!([{"from": "d1", "to": "d2", "resource": "ledger:a", "kind": "write-after-write"}])
    );

    let service = Service::start(&index, pack::free_port());
    let log = dir.join("log.jsonl");
    let pack_arg = format!("{index_s}={},token-env=LEDGER_TOKEN", service.url());
    let run = |pack_arg: &str| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
        cmd.args(["run", "--pack", pack_arg, "--batch", "-", "--provenance"])
            .arg(&log)
            .env("LEDGER_TOKEN", TOKEN)
            .env_remove("KINDGI_PACK_SERVICE_TOKEN");
        output(cmd, &deposits)
    };
    let (code_, out, err) = run(&pack_arg);
    assert_eq!(code_, 0, "{out}{err}");
    let result: Value = serde_json::from_str(&out).unwrap();
    let cents: Vec<Value> = result["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["output"]["cents"].clone())
        .collect();
    assert_eq!(cents, vec![json!(5), json!(10), json!(5)]);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("ledger.deposit"));
    for text in [&out, &err, &logged] {
        assert!(!text.contains(TOKEN), "the token leaked: {text}");
    }

    // An index at another version than the service's: exit 1 before anything runs.
    let other = temp_dir("pack-cli-v2");
    let index2 = pack::write_pack(&other, "2.0.0");
    let (code_, out, err) = run(&format!(
        "{}={},token-env=LEDGER_TOKEN",
        index2.display(),
        service.url()
    ));
    assert_eq!(code_, 1, "{out}{err}");
    assert!(
        err.contains("`ledger.deposit` is version 2.0.0 in the index and 1.0.0 at the service"),
        "{err}"
    );
    assert!(!err.contains(TOKEN));

    // No token at all: exit 2 naming the variable, not a value.
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.args([
        "run",
        "--pack",
        &format!("{index_s}={}", service.url()),
        "--batch",
        "-",
    ])
    .env_remove("KINDGI_PACK_SERVICE_TOKEN");
    let (code_, _, err) = output(cmd, &deposits);
    assert_eq!(code_, 2, "{err}");
    assert!(err.contains("KINDGI_PACK_SERVICE_TOKEN"), "{err}");
}

/// An MCP client reaches the pack's tools through `sluice serve --pack`: two clients'
/// concurrent deposits on one account are ordered, none lost; `/metrics` never holds the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_clients_reach_pack_tools_through_the_gateway_in_order() {
    use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::ServiceExt;

    let dir = temp_dir("pack-serve");
    let index = pack::write_pack(&dir, "1.0.0");
    let service = Service::start(&index, pack::free_port());
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--pack"])
        .arg(format!("{}={}", index.display(), service.url()))
        .env("KINDGI_PACK_SERVICE_TOKEN", TOKEN);
    let (child, base) = support::gateway::listening(&mut cmd);
    let _gateway = support::gateway::Gateway {
        child,
        base: base.clone(),
    };

    let connect = || async {
        let config = StreamableHttpClientTransportConfig::with_uri(format!("{base}/mcp"));
        let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("t", "1.0.0"),
        )
        .serve(transport)
        .await
        .unwrap()
    };
    let (a, b) = (connect().await, connect().await);
    let tools = a.peer().list_all_tools().await.unwrap();
    assert!(
        tools.iter().any(|t| t.name == "ledger.deposit"),
        "{tools:?}"
    );
    let deposit = |peer: rmcp::Peer<rmcp::RoleClient>| async move {
        peer.call_tool(
            CallToolRequestParams::new("ledger.deposit").with_arguments(
                json!({"account": "shared", "cents": 5})
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
        )
        .await
        .unwrap()
    };
    let (x, y) = tokio::join!(deposit(a.peer().clone()), deposit(b.peer().clone()));
    let mut got = vec![
        x.structured_content.unwrap()["cents"].as_i64().unwrap(),
        y.structured_content.unwrap()["cents"].as_i64().unwrap(),
    ];
    got.sort();
    assert_eq!(got, vec![5, 10], "ordered, none lost");
    let metrics = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("ledger.deposit"), "{metrics}");
    assert!(!metrics.contains(TOKEN));
}

/// What a scripted pack service saw: each request's headers and body.
type Seen = Arc<Mutex<Vec<(http::HeaderMap, Value)>>>;

/// A scripted pack service on loopback: `/v1/info` agrees with `info`; `/v1/invoke` answers
/// `503 overloaded` to the first `overloaded` calls, then echoes what it was sent, or answers
/// 401 with the token in its body when `refuse` is set.
async fn scripted(info: Value, overloaded: usize, refuse: bool) -> (String, Seen) {
    use http_body_util::{BodyExt, Full};
    use hyper::service::service_fn;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen: Seen = Arc::default();
    let left = Arc::new(Mutex::new(overloaded));
    let s = seen.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let (info, seen, left) = (info.clone(), s.clone(), left.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let (info, seen, left) = (info.clone(), seen.clone(), left.clone());
                    async move {
                        let (parts, body) = req.into_parts();
                        let bytes = body.collect().await.unwrap().to_bytes();
                        let (status, answer) = if parts.uri.path() == "/v1/info" {
                            (200, info)
                        } else {
                            let body: Value = serde_json::from_slice(&bytes).unwrap();
                            seen.lock()
                                .unwrap()
                                .push((parts.headers.clone(), body.clone()));
                            let mut n = left.lock().unwrap();
                            if *n > 0 {
                                *n -= 1;
                                (503, json!({"error": "overloaded"}))
                            } else if refuse {
                                (401, json!({"error": format!("Bad pack token {TOKEN}")}))
                            } else {
                                let headers: serde_json::Map<String, Value> = parts
                                    .headers
                                    .iter()
                                    .map(|(k, v)| (k.to_string(), json!(v.to_str().unwrap())))
                                    .collect();
                                (
                                    200,
                                    json!({"v": 2, "kind": "result",
                                             "output": {"headers": headers, "ctx": body["ctx"]}}),
                                )
                            }
                        };
                        Ok::<_, std::convert::Infallible>(
                            hyper::Response::builder()
                                .status(status)
                                .header("retry-after", "1")
                                .body(Full::new(bytes::Bytes::from(answer.to_string())))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (url, seen)
}

fn scripted_index(dir: &std::path::Path) -> (std::path::PathBuf, Value) {
    let index = dir.join("index.json");
    std::fs::write(
        &index,
        json!({"v": 1, "packId": "echo", "packVersion": "1.0.0", "tools": [
            {"id": "echo.it", "description": "Echo", "version": "1.0.0",
             "input": {"type": "object"}, "output": {"type": "object"}, "effects": [],
             "mutating": false, "limits": {"memMB": 64, "cpuMs": 5000},
             "needsSpec": {"secrets": {"ECHO_KEY": {"type": "string"}}},
             "modulePath": "tools/echo.py"}]})
        .to_string(),
    )
    .unwrap();
    let info = json!({"protocol": 2, "packId": "echo", "packVersion": "1.0.0",
                      "tools": [{"id": "echo.it", "version": "1.0.0"}]});
    (index, info)
}

/// The headers every invoke carries (token, deadline, run, request, trace context), the
/// client's trace continued, `503 overloaded` retried until an answer, the declared secret sent
/// in `ctx.secrets` and kept out of the result, the token kept out of every message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_invoke_carries_the_protocols_headers_and_overload_is_retried() {
    let dir = temp_dir("pack-headers");
    let (index_path, info) = scripted_index(&dir);
    let (url, seen) = scripted(info.clone(), 2, false).await;
    let (kernel, _) = kernel_of(&index_path, &url);
    let client_trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut handle = kernel
        .open_with(
            "acme",
            BatchOptions::default().with_traceparent(client_trace),
        )
        .unwrap();
    handle
        .submit(sluice_kernel::Call::new("c1", "echo.it", json!({"x": 1})))
        .unwrap();
    handle.close();
    let batch_id = handle.id().to_owned();
    let result = handle.finish().await;
    let r = &result.results[0];
    assert_eq!(r.status.as_str(), "ok", "{r:?}");
    assert_eq!(
        seen.lock().unwrap().len(),
        3,
        "two 503 overloaded, then the answer"
    );
    let out = r.output.clone().unwrap();
    let h = &out["headers"];
    assert_eq!(h["kindgi-pack-token"], TOKEN);
    assert_eq!(h["kindgi-run-id"], batch_id.as_str());
    assert_eq!(h["kindgi-request-id"], "c1");
    let ms: u64 = h["kindgi-timeout-ms"].as_str().unwrap().parse().unwrap();
    assert!(
        ms > 0 && ms <= 5000,
        "the time left before cpuMs 5000: {ms}"
    );
    let tp = h["traceparent"].as_str().unwrap();
    assert!(
        tp.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
        "{tp}"
    );
    assert!(
        tp.ends_with("-01") && !tp.contains("00f067aa0ba902b7"),
        "{tp}"
    );
    assert_eq!(out["ctx"]["tenantId"], "acme");
    assert_eq!(out["ctx"]["secrets"], json!({"ECHO_KEY": "k-123"}));
    assert_eq!(h["content-type"], "application/json");

    // A service that refuses the token and echoes it back: the token never reaches the result.
    let (url, _) = scripted(info, 0, true).await;
    let (kernel, _) = kernel_of(&index_path, &url);
    let r = kernel
        .run(batch(json!([{"id": "c", "tool": "echo.it", "input": {}}])))
        .await
        .unwrap();
    let r = &r.results[0];
    assert_eq!(code(r), "pack-unavailable", "{r:?}");
    assert!(message(r).contains("401"), "{r:?}");
    assert!(!format!("{r:?}").contains(TOKEN), "{r:?}");
}

/// With no deadline, `503 overloaded` is retried for the retry budget, then the call fails
/// `pack-unavailable` saying how often it was refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_past_the_budget_fails_saying_so() {
    let dir = temp_dir("pack-overload");
    let index_path = dir.join("index.json");
    std::fs::write(
        &index_path,
        json!({"v": 1, "packId": "echo", "tools": [
            {"id": "echo.it", "description": "Echo", "version": "1.0.0",
             "input": {"type": "object"}, "output": {}, "effects": [], "mutating": false}]})
        .to_string(),
    )
    .unwrap();
    let info =
        json!({"protocol": 2, "packId": "echo", "tools": [{"id": "echo.it", "version": "1.0.0"}]});
    let (url, seen) = scripted(info, usize::MAX, false).await;
    let options = PackOptions::default().with_retry_budget(std::time::Duration::from_millis(300));
    let (kernel, _) = kernel_with(&index_path, &url, options);
    let r = kernel
        .run(batch(json!([{"id": "c", "tool": "echo.it", "input": {}}])))
        .await
        .unwrap();
    let r = &r.results[0];
    assert_eq!(code(r), "pack-unavailable", "{r:?}");
    assert!(message(r).contains("503 overloaded"), "{r:?}");
    assert!(seen.lock().unwrap().len() >= 2, "it was retried");
}
