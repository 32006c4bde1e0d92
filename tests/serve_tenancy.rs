//! Several tenants on one gateway (`sluice serve` as a process): their data, metrics and MCP
//! sessions apart; a resource they share on purpose still ordered between them; and the doors a
//! loopback gateway keeps shut to pages in a browser, oversized bodies and clients that hang up.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use support::gateway::{start, Gateway};
use support::temp_dir;

/// A token file for tenants `acme` and `zeta` (tokens `acme-secret`, `zeta-secret`) and an
/// operator (`ops-secret`).
fn tokens(dir: &Path) -> PathBuf {
    let f = dir.join("tokens.json");
    let h = sluice::serve::token_hash;
    std::fs::write(
        &f,
        json!({"tokens": [
            {"sha256": h("acme-secret"), "tenant": "acme"},
            {"sha256": h("zeta-secret"), "tenant": "zeta"},
            {"sha256": h("ops-secret"), "operator": true}]})
        .to_string(),
    )
    .unwrap();
    f
}

/// A client of one gateway.
struct Client<'a> {
    g: &'a Gateway,
    http: reqwest::Client,
}

impl<'a> Client<'a> {
    fn new(g: &'a Gateway) -> Self {
        Client {
            g,
            http: reqwest::Client::new(),
        }
    }

    /// POSTs JSON to `path` with `token`; the status and the JSON answer.
    async fn post(&self, path: &str, token: Option<&str>, body: &Value) -> (u16, Value) {
        let mut r = self
            .http
            .post(format!("{}{path}", self.g.base))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        let r = r.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Runs one call as `token`'s tenant; its result.
    async fn call(&self, token: &str, tool: &str, input: Value) -> Value {
        let batch = json!({"calls": [{"id": "c", "tool": tool, "input": input}]});
        let (status, v) = self.post("/v1/run", Some(token), &batch).await;
        assert_eq!(status, 200, "{v}");
        v["results"][0].clone()
    }

    /// `/metrics` as `token` reads it.
    async fn metrics(&self, token: &str) -> (u16, String) {
        let r = self
            .http
            .get(format!("{}/metrics", self.g.base))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    /// Waits until the operator's `/metrics` has the line `want`.
    async fn until_metric(&self, want: &str) {
        loop {
            let (_, m) = self.metrics("ops-secret").await;
            if m.lines().any(|l| l == want) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tenant_has_its_own_memory() {
    let dir = temp_dir("tenancy-kv");
    let g = start(&["--tokens", tokens(&dir).to_str().unwrap()]);
    let c = Client::new(&g);

    // The issue's report: acme's secret, then zeta reads it.
    let put = c
        .call(
            "acme-secret",
            "sluice.kv.put",
            json!({"key": "secret", "value": "acme-only"}),
        )
        .await;
    assert_eq!(put["status"], "ok", "{put}");
    let got = c
        .call("zeta-secret", "sluice.kv.get", json!({"key": "secret"}))
        .await;
    assert_eq!(got["output"], json!({"key": "secret", "value": null}));
    let got = c
        .call("acme-secret", "sluice.kv.get", json!({"key": "secret"}))
        .await;
    assert_eq!(got["output"]["value"], "acme-only");

    // acme counts to 6; zeta's first increment of the same key is 1.
    for _ in 0..6 {
        c.call("acme-secret", "sluice.kv.incr", json!({"key": "n"}))
            .await;
    }
    let z = c
        .call("zeta-secret", "sluice.kv.incr", json!({"key": "n"}))
        .await;
    assert_eq!(z["output"]["value"], 1, "{z}");
    // Deleting is the tenant's own too.
    let d = c
        .call("zeta-secret", "sluice.kv.delete", json!({"key": "secret"}))
        .await;
    assert_eq!(d["output"]["existed"], false);
    let a = c
        .call("acme-secret", "sluice.kv.incr", json!({"key": "n"}))
        .await;
    assert_eq!(a["output"]["value"], 7, "{a}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_per_tenant_keeps_files_apart() {
    let dir = temp_dir("tenancy-roots");
    let roots = dir.join("roots");
    let g = start(&[
        "--tokens",
        tokens(&dir).to_str().unwrap(),
        "--root-per-tenant",
        roots.to_str().unwrap(),
    ]);
    let c = Client::new(&g);
    let w = c
        .call(
            "acme-secret",
            "sluice.fs.write",
            json!({"path": "notes.txt", "content": "acme's plan"}),
        )
        .await;
    assert_eq!(w["status"], "ok", "{w}");
    assert_eq!(
        std::fs::read_to_string(roots.join("acme/notes.txt")).unwrap(),
        "acme's plan"
    );
    // zeta's notes.txt is its own (none yet), and acme's is out of its reach by any spelling.
    let r = c
        .call(
            "zeta-secret",
            "sluice.fs.read",
            json!({"path": "notes.txt"}),
        )
        .await;
    assert_eq!(r["status"], "error", "{r}");
    assert_eq!(r["error"]["code"], "io", "{r}");
    let acme_file = roots.join("acme/notes.txt");
    for path in ["../acme/notes.txt", acme_file.to_str().unwrap()] {
        let r = c
            .call("zeta-secret", "sluice.fs.read", json!({"path": path}))
            .await;
        assert_eq!(r["error"]["code"], "path-escapes-root", "{path}: {r}");
        let w = c
            .call(
                "zeta-secret",
                "sluice.fs.write",
                json!({"path": path, "content": "zeta was here"}),
            )
            .await;
        assert_eq!(w["error"]["code"], "path-escapes-root", "{path}: {w}");
    }
    assert_eq!(std::fs::read_to_string(&acme_file).unwrap(), "acme's plan");
    let r = c
        .call(
            "acme-secret",
            "sluice.fs.read",
            json!({"path": "notes.txt"}),
        )
        .await;
    assert_eq!(r["output"]["content"], "acme's plan");

    // The plan names each tenant's own file: the same path is two resources.
    let batch =
        json!({"calls": [{"id": "r", "tool": "sluice.fs.read", "input": {"path": "notes.txt"}}]});
    for (token, tenant) in [("acme-secret", "acme"), ("zeta-secret", "zeta")] {
        let (status, plan) = c.post("/v1/plan", Some(token), &batch).await;
        assert_eq!(status, 200, "{plan}");
        let want = format!("fs:{}", roots.join(tenant).join("notes.txt").display());
        assert_eq!(plan["calls"][0]["accesses"][0]["resource"], want, "{plan}");
    }
}

#[test]
fn a_root_per_tenant_refuses_tenants_that_are_not_directory_names() {
    let dir = temp_dir("tenancy-bad-names");
    let f = dir.join("tokens.json");
    std::fs::write(
        &f,
        json!({"tokens": [{"sha256": sluice::serve::token_hash("x"), "tenant": "../up"}]})
            .to_string(),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--listen", "127.0.0.1:0", "--tokens"])
        .arg(&f)
        .arg("--root-per-tenant")
        .arg(dir.join("roots"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("../up"), "{err}");
    // And the two roots are one choice.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--listen", "127.0.0.1:0", "--root", "."])
        .arg("--root-per-tenant")
        .arg(dir.join("roots"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_sharing_a_service_lose_no_increments() {
    // One remote counter both tenants reach (an HTTP tool: shared between tenants by default)
    // that loses updates when requests overlap. The gateway orders the tenants' calls of it.
    let server = support::http_server::start().await;
    let dir = temp_dir("tenancy-shared");
    let manifest = json!({"id": "svc.incr", "description": "a shared counter", "version": "1.0.0",
        "input": {"type": "object"}, "output": {}, "mutating": true,
        "effects": [{"kind": "writes", "resource": "svc:counter"},
                    {"kind": "network", "resource": "net:127.0.0.1"}],
        "network": {"kind": "allowlist", "hosts": ["127.0.0.1"]},
        "spec": {"kind": "http", "method": "POST", "urlTemplate": server.url("/incr/hits")}});
    let tools = dir.join("svc.json");
    std::fs::write(&tools, manifest.to_string()).unwrap();
    let g = start(&[
        "--tokens",
        tokens(&dir).to_str().unwrap(),
        "--tools",
        tools.to_str().unwrap(),
    ]);
    let c = Client::new(&g);
    let batch = json!({"calls": (0..5).map(|i| json!({"id": format!("i{i}"), "tool": "svc.incr", "input": {}})).collect::<Vec<_>>()});
    let (a, z) = tokio::join!(
        c.post("/v1/run", Some("acme-secret"), &batch),
        c.post("/v1/run", Some("zeta-secret"), &batch)
    );
    for (status, v) in [a, z] {
        assert_eq!(status, 200, "{v}");
        for r in v["results"].as_array().unwrap() {
            assert_eq!(r["status"], "ok", "{r}");
        }
    }
    assert_eq!(server.count("hits"), 10, "no increment was lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_a_tenant_its_own_series_and_the_operator_all() {
    let dir = temp_dir("tenancy-metrics");
    let g = start(&["--tokens", tokens(&dir).to_str().unwrap()]);
    let c = Client::new(&g);
    c.call("acme-secret", "sluice.echo", json!({})).await;
    c.call("zeta-secret", "sluice.echo", json!({})).await;
    // A made-up tool name is labelled `unknown`: names a client sends add no series.
    let r = c.call("acme-secret", "made.up.tool-1234", json!({})).await;
    assert_ne!(r["status"], "ok");

    let (status, acme) = c.metrics("acme-secret").await;
    assert_eq!(status, 200);
    assert!(acme.contains(r#"tenant="acme""#), "{acme}");
    assert!(!acme.contains("zeta"), "{acme}");
    assert!(
        acme.contains(r#"sluice_calls_total{tenant="acme",tool="unknown","#),
        "{acme}"
    );
    assert!(!acme.contains("made.up"), "{acme}");
    // The gateway-wide series are the operator's.
    assert!(
        !acme.contains("sluice_http_stalled_connections_total "),
        "{acme}"
    );
    let (_, zeta) = c.metrics("zeta-secret").await;
    assert!(
        zeta.contains(r#"tenant="zeta""#) && !zeta.contains("acme"),
        "{zeta}"
    );

    let (status, all) = c.metrics("ops-secret").await;
    assert_eq!(status, 200);
    assert!(
        all.contains(r#"tenant="acme""#) && all.contains(r#"tenant="zeta""#),
        "{all}"
    );
    assert!(
        all.contains("sluice_http_stalled_connections_total"),
        "{all}"
    );

    // The operator's token runs nothing and lists nothing; no token reads nothing.
    let batch =
        json!({"calls": [{"id": "p", "tool": "sluice.kv.put", "input": {"key": "k", "value": 1}}]});
    let (status, v) = c.post("/v1/run", Some("ops-secret"), &batch).await;
    assert_eq!(status, 403, "{v}");
    assert_eq!(v["error"]["code"], "operator-token");
    let (status, _) = c.post("/mcp", Some("ops-secret"), &json!({})).await;
    assert_eq!(status, 403);
    let r = c
        .http
        .get(format!("{}/metrics", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[test]
fn bad_token_files_are_refused_with_where_and_why() {
    let dir = temp_dir("tenancy-token-files");
    let h = sluice::serve::token_hash;
    let cases = [
        (
            json!({"tokens": [{"sha256": h("a"), "tenant": "acme", "operator": true}]}),
            "/tokens/0",
        ),
        (
            json!({"tokens": [{"sha256": h("a"), "tenant": "acme"},
                              {"sha256": h("a"), "tenant": "zeta"}]}),
            "/tokens/1",
        ),
        (json!({"tokens": [{"sha256": h("a")}]}), "/tokens/0"),
    ];
    for (i, (doc, pointer)) in cases.into_iter().enumerate() {
        let f = dir.join(format!("tokens-{i}.json"));
        std::fs::write(&f, doc.to_string()).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["serve", "--listen", "127.0.0.1:0", "--tokens"])
            .arg(&f)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{doc}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(pointer), "{doc}: {err}");
        assert!(err.contains(f.to_str().unwrap()), "{doc}: {err}");
    }
}

/// A raw MCP request to `/mcp` as `token`, in `session` (if any); the status, the session id
/// the answer names, and its body.
async fn mcp(
    g: &Gateway,
    method: reqwest::Method,
    token: &str,
    session: Option<&str>,
    body: Option<Value>,
) -> (u16, Option<String>, String) {
    let mut r = reqwest::Client::new()
        .request(method, format!("{}/mcp", g.base))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream");
    if let Some(s) = session {
        r = r.header("mcp-session-id", s);
    }
    if let Some(b) = body {
        r = r
            .header("content-type", "application/json")
            .body(b.to_string());
    }
    let mut r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let id = r
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    // A reply comes as an event stream; read until it holds the JSON-RPC answer (or ends).
    let mut text = String::new();
    let read = async {
        while let Ok(Some(chunk)) = r.chunk().await {
            text.push_str(&String::from_utf8_lossy(&chunk));
            if status != 200 || text.contains(r#""id":"#) {
                break;
            }
        }
    };
    // A stream that stays open (a GET) is read briefly: only its status matters.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), read).await;
    (status, id, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_session_answers_only_its_own_tenant() {
    let dir = temp_dir("tenancy-sessions");
    let g = start(&["--tokens", tokens(&dir).to_str().unwrap()]);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "tenancy-test", "version": "1.0.0"}}});
    let (status, session, _) =
        mcp(&g, reqwest::Method::POST, "acme-secret", None, Some(init)).await;
    assert_eq!(status, 200);
    let session = session.expect("the gateway names the session");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, _) = mcp(
        &g,
        reqwest::Method::POST,
        "acme-secret",
        Some(&session),
        Some(initialized.clone()),
    )
    .await;
    assert_eq!(status, 202);

    // zeta holds acme's session id: every kind of request gets 404 and does nothing.
    let put = |id: i64, key: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "sluice.kv.put", "arguments": {"key": key, "value": "zeta's"}}})
    };
    let attempts: Vec<(reqwest::Method, Option<Value>)> = vec![
        (reqwest::Method::GET, None),
        (reqwest::Method::POST, Some(put(2, "stolen"))),
        (reqwest::Method::POST, Some(initialized)),
        (
            reqwest::Method::POST,
            Some(
                json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": 1}}),
            ),
        ),
        // An answer to an elicitation the gateway may have sent acme.
        (
            reqwest::Method::POST,
            Some(json!({"jsonrpc": "2.0", "id": 0, "result": {"action": "accept", "content": {}}})),
        ),
        (reqwest::Method::DELETE, None),
    ];
    for (method, body) in attempts {
        let (status, _, text) = mcp(&g, method.clone(), "zeta-secret", Some(&session), body).await;
        assert_eq!(status, 404, "{method}: {text}");
        assert!(text.contains("no-session"), "{method}: {text}");
    }
    let c = Client::new(&g);
    for token in ["acme-secret", "zeta-secret"] {
        let r = c
            .call(token, "sluice.kv.get", json!({"key": "stolen"}))
            .await;
        assert_eq!(r["output"]["value"], Value::Null, "{token}: {r}");
    }

    // The session is still acme's, and works.
    let (status, _, text) = mcp(
        &g,
        reqwest::Method::POST,
        "acme-secret",
        Some(&session),
        Some(put(3, "mine")),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(r#""result""#), "{text}");
    let r = c
        .call("acme-secret", "sluice.kv.get", json!({"key": "mine"}))
        .await;
    assert_eq!(r["output"]["value"], "zeta's");
    let (status, _, _) = mcp(
        &g,
        reqwest::Method::DELETE,
        "acme-secret",
        Some(&session),
        None,
    )
    .await;
    assert!(status == 200 || status == 204, "{status}");
    let (status, _, _) = mcp(
        &g,
        reqwest::Method::GET,
        "acme-secret",
        Some(&session),
        None,
    )
    .await;
    assert_eq!(status, 404, "a closed session is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_gateway_takes_nothing_from_a_page_elsewhere() {
    // No tokens: every request is tenant `default`, so only its checks stand between a page in
    // a browser on this machine and the tools.
    let g = start(&[]);
    let c = Client::new(&g);
    let port = g.base.rsplit(':').next().unwrap().to_owned();
    let put = json!({"calls": [{"id": "p", "tool": "sluice.kv.put",
                                "input": {"key": "owned", "value": "by a page"}}]});
    let routes: [(&str, &str); 5] = [
        ("POST", "/v1/run"),
        ("POST", "/v1/plan"),
        ("GET", "/v1/tools"),
        ("GET", "/metrics"),
        ("POST", "/mcp"),
    ];
    let evil_host = format!("evil.example:{port}");
    let rebound = format!("attacker.test:{port}");
    let cases: Vec<(&str, &str, u16, &str)> = vec![
        ("host", &evil_host, 403, "forbidden-host"),
        ("host", &rebound, 403, "forbidden-host"),
        ("origin", "http://evil.example", 403, "forbidden-origin"),
        ("origin", "null", 403, "forbidden-origin"),
    ];
    for (method, path) in routes {
        for (header, value, status, code) in &cases {
            let r = c
                .http
                .request(method.parse().unwrap(), format!("{}{path}", g.base))
                .header(*header, *value)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(put.to_string())
                .send()
                .await
                .unwrap();
            assert_eq!(
                r.status().as_u16(),
                *status,
                "{method} {path} {header}: {value}"
            );
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["error"]["code"], *code, "{method} {path}: {v}");
        }
    }
    // What a page may send without CORS (a "simple" request) never runs a batch.
    for ct in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        None,
    ] {
        for path in ["/v1/run", "/v1/plan"] {
            let mut r = c
                .http
                .post(format!("{}{path}", g.base))
                .body(put.to_string());
            if let Some(ct) = ct {
                r = r.header("content-type", ct);
            }
            let r = r.send().await.unwrap();
            assert_eq!(r.status(), 415, "{path} {ct:?}");
        }
    }
    let r = c
        .call("default", "sluice.kv.get", json!({"key": "owned"}))
        .await;
    assert_eq!(r["output"]["value"], Value::Null, "nothing ran: {r}");

    // This machine's own clients are served, by any loopback name, and a loopback page too.
    for (header, value) in [
        ("host", format!("localhost:{port}")),
        ("host", format!("127.0.0.1:{port}")),
        ("origin", format!("http://localhost:{port}")),
        ("origin", format!("http://127.0.0.1:{port}")),
    ] {
        let r = c
            .http
            .post(format!("{}/v1/run", g.base))
            .header(header, &value)
            .header("content-type", "application/json; charset=utf-8")
            .body(put.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{header}: {value}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_tools_lists_what_tools_list_offers() {
    let dir = temp_dir("tenancy-tools");
    let policy = dir.join("policy.json");
    std::fs::write(
        &policy,
        json!({"tenants": {
            "acme": {"default": "allow", "rules": [
                {"id": "no-sleep", "decision": "deny", "tools": ["sluice.sleep"]},
                {"id": "no-kv-writes", "decision": "deny", "tools": ["sluice.kv.put", "sluice.kv.delete"]}]},
            "zeta": {"default": "allow"}}})
        .to_string(),
    )
    .unwrap();
    let g = start(&[
        "--tokens",
        tokens(&dir).to_str().unwrap(),
        "--policy",
        policy.to_str().unwrap(),
    ]);
    let c = Client::new(&g);
    let listed = |token: &'static str| {
        let c = &c;
        async move {
            let r = c
                .http
                .get(format!("{}/v1/tools", c.g.base))
                .bearer_auth(token)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            let v: Value = r.json().await.unwrap();
            let mut ids: Vec<String> = v
                .as_array()
                .unwrap_or_else(|| panic!("a list of manifests: {v}"))
                .iter()
                .map(|m| m["id"].as_str().unwrap().to_owned())
                .collect();
            ids.sort();
            ids
        }
    };
    let acme = listed("acme-secret").await;
    let zeta = listed("zeta-secret").await;
    for hidden in ["sluice.sleep", "sluice.kv.put", "sluice.kv.delete"] {
        assert!(!acme.contains(&hidden.to_owned()), "{acme:?}");
        assert!(zeta.contains(&hidden.to_owned()), "{zeta:?}");
    }
    assert!(acme.contains(&"sluice.kv.get".to_owned()));

    // MCP's tools/list of the same tenant offers the same tools.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "tenancy-test", "version": "1.0.0"}}});
    let (_, session, _) = mcp(&g, reqwest::Method::POST, "acme-secret", None, Some(init)).await;
    let session = session.unwrap();
    mcp(
        &g,
        reqwest::Method::POST,
        "acme-secret",
        Some(&session),
        Some(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
    )
    .await;
    let (_, _, text) = mcp(
        &g,
        reqwest::Method::POST,
        "acme-secret",
        Some(&session),
        Some(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})),
    )
    .await;
    let data = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .find(|d| d.contains(r#""tools""#))
        .unwrap_or_else(|| panic!("a tools/list answer: {text}"));
    let answer: Value = serde_json::from_str(data.trim()).unwrap();
    // MCP names are `sluice tools --format mcp`'s; each tool's id is in its description's
    // manifest meta, so compare by the names the tenant's own /v1/tools gives in MCP format.
    let mut mcp_names: Vec<String> = answer["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    mcp_names.sort();
    let r = c
        .http
        .get(format!("{}/v1/tools?format=mcp", g.base))
        .bearer_auth("acme-secret")
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    let mut v1_names: Vec<String> = v
        .as_array()
        .or_else(|| v["tools"].as_array())
        .unwrap_or_else(|| panic!("MCP tools: {v}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    v1_names.sort();
    assert_eq!(mcp_names, v1_names);
    assert_eq!(mcp_names.len(), acme.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_cancels_its_batch_and_the_gauge_goes_back() {
    let dir = temp_dir("tenancy-hangup");
    let g = start(&["--tokens", tokens(&dir).to_str().unwrap()]);
    let c = Client::new(&g);
    let addr = g.base.strip_prefix("http://").unwrap().to_owned();
    let body = json!({"calls": [
        {"id": "long", "tool": "sluice.sleep", "input": {"ms": 600000}},
        {"id": "after", "tool": "sluice.kv.incr", "input": {"key": "n", "delay_ms": 600000}}]})
    .to_string();
    let mut sock = TcpStream::connect(&addr).unwrap();
    write!(
        sock,
        "POST /v1/run HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer acme-secret\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    c.until_metric(r#"sluice_calls_in_flight{tenant="acme"} 2"#)
        .await;
    drop(sock);
    c.until_metric(r#"sluice_calls_in_flight{tenant="acme"} 0"#)
        .await;
    c.until_metric(r#"sluice_calls_total{tenant="acme",tool="sluice.sleep",status="cancelled"} 1"#)
        .await;
    c.until_metric(
        r#"sluice_calls_total{tenant="acme",tool="sluice.kv.incr",status="cancelled"} 1"#,
    )
    .await;
    // Nothing of it lingers: the next batch of the tenant runs at once, and its counter was
    // never bumped.
    let r = c
        .call("acme-secret", "sluice.kv.get", json!({"key": "n"}))
        .await;
    assert_eq!(r["output"]["value"], Value::Null);
}

/// Sends `head` then `body_len` bytes in 64 KiB writes (stopping quietly if the gateway closes)
/// and reads the whole answer.
fn send_big(addr: &str, head: &str, body_len: usize, chunked: bool) -> String {
    let mut sock = TcpStream::connect(addr).unwrap();
    sock.write_all(head.as_bytes()).unwrap();
    let chunk = vec![b'x'; 64 * 1024];
    let mut left = body_len;
    let mut sent_all = true;
    while left > 0 {
        let k = left.min(chunk.len());
        let written = if chunked {
            sock.write_all(format!("{k:x}\r\n").as_bytes())
                .and_then(|_| sock.write_all(&chunk[..k]))
                .and_then(|_| sock.write_all(b"\r\n"))
        } else {
            sock.write_all(&chunk[..k])
        };
        if written.is_err() {
            sent_all = false;
            break;
        }
        left -= k;
    }
    if chunked && sent_all {
        let _ = sock.write_all(b"0\r\n\r\n");
    }
    assert!(
        sent_all,
        "the gateway closed while the body was still coming"
    );
    let mut answer = String::new();
    sock.read_to_string(&mut answer).unwrap();
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_body_gets_its_413_while_the_client_still_sends() {
    let g = start(&["--max-body", "1000"]);
    let addr = g.base.strip_prefix("http://").unwrap().to_owned();
    let five_mb = 5 << 20;
    let (a, b) = {
        let addr2 = addr.clone();
        let sized = tokio::task::spawn_blocking(move || {
            send_big(
                &addr2,
                &format!(
                    "POST /v1/run HTTP/1.1\r\nHost: {addr2}\r\nContent-Type: application/json\r\n\
                     Content-Length: {five_mb}\r\n\r\n"
                ),
                five_mb,
                false,
            )
        });
        let addr3 = addr.clone();
        let chunked = tokio::task::spawn_blocking(move || {
            send_big(
                &addr3,
                &format!(
                    "POST /v1/run HTTP/1.1\r\nHost: {addr3}\r\nContent-Type: application/json\r\n\
                     Transfer-Encoding: chunked\r\n\r\n"
                ),
                five_mb,
                true,
            )
        });
        (sized.await.unwrap(), chunked.await.unwrap())
    };
    for answer in [a, b] {
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        assert!(answer.contains(r#""too-large""#), "{answer}");
    }
    // Python's urllib, the client of the report, reads the status too.
    let script = format!(
        "import urllib.request, urllib.error\n\
         req = urllib.request.Request('{}/v1/run', data=b'x' * {five_mb}, \
         headers={{'Content-Type': 'application/json'}})\n\
         try:\n    urllib.request.urlopen(req)\n    print('no error')\n\
         except urllib.error.HTTPError as e:\n    print(e.code)\n",
        g.base
    );
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .args(["-c", &script])
            .output()
            .expect("python3 runs (a Debian package on the test machine)")
    })
    .await
    .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        said.trim(),
        "413",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
