//! `sluice serve` against what an attacker or a broken client does to a server (issue 40):
//! idle and slow sockets under a lowered descriptor limit, one peer taking every place,
//! duplicate JSON-RPC ids in one session, a flood of initializes past `--max-sessions`, and
//! clients without sessions told apart in the provenance log.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use support::gateway::{listening, start, Gateway};
use support::temp_dir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Tokens for tenant `acme` (`acme-secret`) and an operator (`ops-secret`).
fn tokens(dir: &Path) -> PathBuf {
    let f = dir.join("tokens.json");
    let h = sluice::serve::token_hash;
    std::fs::write(
        &f,
        json!({"tokens": [
            {"sha256": h("acme-secret"), "tenant": "acme"},
            {"sha256": h("ops-secret"), "operator": true}]})
        .to_string(),
    )
    .unwrap();
    f
}

fn addr(g: &Gateway) -> SocketAddr {
    g.base.strip_prefix("http://").unwrap().parse().unwrap()
}

/// A client that waits at most `secs` for any answer: a bound on the test, not a measure.
fn client(secs: u64) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(secs))
        .build()
        .unwrap()
}

/// A TCP connection to the gateway from `from` (another loopback address is another peer).
async fn connect_from(from: &str, to: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(format!("{from}:0").parse().unwrap())?;
    socket.connect(to).await
}

/// Whether the server closed `sock` (EOF or reset) within `secs`.
async fn closed_within(sock: &mut tokio::net::TcpStream, secs: u64) -> bool {
    let mut buf = [0u8; 4096];
    let read = async {
        loop {
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(secs), read)
        .await
        .unwrap_or(false)
}

async fn run(c: &reqwest::Client, g: &Gateway, token: Option<&str>, batch: &Value) -> (u16, Value) {
    let mut r = c
        .post(format!("{}/v1/run", g.base))
        .header("content-type", "application/json")
        .body(batch.to_string());
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn operator_metric(c: &reqwest::Client, g: &Gateway, name: &str) -> f64 {
    let text = c
        .get(format!("{}/metrics", g.base))
        .bearer_auth("ops-secret")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// The issue's report, with the descriptor limit lowered to 256: 1,100 sockets from one
/// address each send half a request line and stop. The cap (below the limit) and that peer's
/// share keep places free, so `/healthz` and a tenant's `/v1/run` from another address still
/// answer, and the sockets past the share are closed at accept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sockets_under_a_low_descriptor_limit_leave_the_gateway_answering() {
    // The test's own process holds 1,100 sockets.
    sluice::serve::descriptor_limit();
    let dir = temp_dir("hardening-flood");
    let mut cmd = Command::new("bash");
    cmd.args(["-c", r#"ulimit -n 256 && exec "$0" "$@""#])
        .arg(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--listen", "127.0.0.1:0", "--tokens"])
        .arg(tokens(&dir))
        // The idle sockets would hold their places for the whole test.
        .args(["--header-read-timeout", "600", "--idle-timeout", "600"]);
    let (child, base) = listening(&mut cmd);
    let g = Gateway { child, base };
    let to = addr(&g);
    let mut idle = Vec::new();
    for _ in 0..1100 {
        if let Ok(mut s) = connect_from("127.0.0.2", to).await {
            let _ = s.write_all(b"GET /heal").await;
            idle.push(s);
        }
    }
    assert!(idle.len() > 1000, "{} sockets connected", idle.len());
    let c = client(30);
    let health = c.get(format!("{}/healthz", g.base)).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let (status, v) = run(
        &c,
        &g,
        Some("acme-secret"),
        &json!({"calls": [{"id": "1", "tool": "sluice.kv.incr", "input": {"key": "n"}}]}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["results"][0]["output"]["value"], 1, "{v}");
    let refused = operator_metric(&c, &g, "sluice_http_refused_connections_total").await;
    assert!(refused > 0.0, "sockets past the peer's share are refused");
    // The held ones are still open, and the gateway still runs.
    let mut g = g;
    assert!(g.child.try_wait().unwrap().is_none());
    drop(idle);
}

/// A header sent one byte at a time, a keep-alive connection left idle, a body that never
/// arrives: each is cut by its own limit; a connection waiting on a long call is not idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_idle_connections_and_slow_bodies_are_cut() {
    let dir = temp_dir("hardening-timeouts");
    let g = start(&[
        "--tokens",
        tokens(&dir).to_str().unwrap(),
        "--header-read-timeout",
        "1",
        "--idle-timeout",
        "2",
        "--body-read-timeout",
        "1",
    ]);
    let to = addr(&g);

    // A header byte every 300 ms: the connection is closed before the header is complete.
    let mut trickle = connect_from("127.0.0.1", to).await.unwrap();
    let header =
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let mut cut_before_the_end = false;
    for byte in header.iter() {
        if trickle.write_all(&[*byte]).await.is_err() {
            cut_before_the_end = true;
            break;
        }
        let mut buf = [0u8; 64];
        match tokio::time::timeout(Duration::from_millis(300), trickle.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                cut_before_the_end = true;
                break;
            }
            Ok(Ok(_)) => panic!("an answer to a header that never finished"),
            Err(_) => {}
        }
    }
    assert!(cut_before_the_end, "the trickled header was never cut");

    // A keep-alive connection that answered once, then sits idle, is closed.
    let mut idle = connect_from("127.0.0.1", to).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = idle.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    assert!(
        closed_within(&mut idle, 60).await,
        "the idle connection stays open"
    );

    // A body that stops arriving: 408, and the connection closes.
    let mut slow = connect_from("127.0.0.1", to).await.unwrap();
    slow.write_all(
        b"POST /v1/run HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer acme-secret\r\n\
          Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"calls\": ",
    )
    .await
    .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(60), slow.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("body-timeout"), "{answer}");

    // A call that runs longer than the idle limit keeps its connection.
    let c = client(60);
    let (status, v) = run(
        &c,
        &g,
        Some("acme-secret"),
        &json!({"calls": [{"id": "s", "tool": "sluice.sleep", "input": {"ms": 3500}}]}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["results"][0]["status"], "ok", "{v}");
    let timed_out = operator_metric(&c, &g, "sluice_http_timed_out_connections_total").await;
    assert!(timed_out >= 2.0, "{timed_out}");
}

/// `--max-connections-per-peer`: one address holds its share and no more; other addresses
/// still get in until the cap, and past the cap every connection is closed at accept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_peer_cannot_take_every_place() {
    let g = start(&[
        "--max-connections",
        "6",
        "--max-connections-per-peer",
        "2",
        "--header-read-timeout",
        "600",
        "--idle-timeout",
        "600",
    ]);
    let to = addr(&g);
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(connect_from("127.0.0.2", to).await.unwrap());
    }
    let mut third = connect_from("127.0.0.2", to).await.unwrap();
    assert!(
        closed_within(&mut third, 30).await,
        "a third socket from one peer is closed"
    );
    // Another peer gets in.
    let c = client(30);
    assert_eq!(
        c.get(format!("{}/healthz", g.base))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    drop(c);
    // Fill the cap from two more peers; then even a new peer is closed at accept.
    for peer in ["127.0.0.3", "127.0.0.4"] {
        for _ in 0..2 {
            held.push(connect_from(peer, to).await.unwrap());
        }
    }
    // The places are taken once the gateway has accepted them: wait until a probe is refused.
    let mut refused = false;
    for _ in 0..100 {
        let mut probe = connect_from("127.0.0.5", to).await.unwrap();
        if closed_within(&mut probe, 1).await {
            refused = true;
            break;
        }
    }
    assert!(refused, "past the cap a new connection is closed");
    // Closing a held connection frees its place.
    held.truncate(5);
    let mut answered = false;
    for _ in 0..100 {
        let mut probe = connect_from("127.0.0.5", to).await.unwrap();
        probe
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(1), probe.read(&mut buf)).await
        {
            if String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200") {
                answered = true;
                break;
            }
        }
    }
    assert!(answered, "a freed place is taken again");
}

/// A raw MCP request over streamable HTTP: status, session id and body text.
async fn mcp(
    c: &reqwest::Client,
    base: &str,
    session: Option<&str>,
    body: &Value,
) -> (u16, Option<String>, String) {
    let mut r = c
        .post(format!("{base}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .body(body.to_string());
    if let Some(s) = session {
        r = r.header("mcp-session-id", s);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let id = r
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, id, r.text().await.unwrap_or_default())
}

/// The JSON-RPC message with `"id": id` in an answer (SSE `data:` lines, or plain JSON).
fn message(text: &str, id: &Value) -> Option<Value> {
    if let Ok(m) = serde_json::from_str::<Value>(text) {
        return (m["id"] == *id).then_some(m);
    }
    text.lines()
        .map(|l| l.strip_prefix("data:").unwrap_or(l).trim())
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|m| m["id"] == *id)
}

async fn initialize(c: &reqwest::Client, g: &Gateway, name: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": name, "version": "1.0.0"}}});
    let (status, session, text) = mcp(c, &g.base, None, &init).await;
    assert_eq!(status, 200, "{text}");
    let session = session.expect("a session id");
    let (status, _, _) = mcp(
        c,
        &g.base,
        Some(&session),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(status, 202);
    session
}

fn tools_call(id: Value, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": arguments}})
}

/// Two concurrent `tools/call` with one id in one session: the second gets a JSON-RPC error at
/// once, the first its result; the id is free again once answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_id_already_in_flight_in_its_session_is_refused() {
    let dir = temp_dir("hardening-ids");
    let log = dir.join("log.jsonl");
    let g = start(&["--provenance", log.to_str().unwrap()]);
    let c = client(60);
    let session = initialize(&c, &g, "dup-test").await;
    let first = {
        let (c, base, session) = (c.clone(), g.base.clone(), session.clone());
        tokio::spawn(async move {
            mcp(
                &c,
                &base,
                Some(&session),
                &tools_call(
                    json!(5),
                    "sluice.kv.incr",
                    json!({"key": "n", "delay_ms": 1500}),
                ),
            )
            .await
        })
    };
    // Wait until the first call is running.
    loop {
        let m = c
            .get(format!("{}/metrics", g.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if m.lines()
            .any(|l| l == r#"sluice_calls_in_flight{tenant="default"} 1"#)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, _, text) = mcp(
        &c,
        &g.base,
        Some(&session),
        &tools_call(json!(5), "sluice.kv.incr", json!({"key": "n"})),
    )
    .await;
    assert_eq!(status, 409, "{text}");
    let err = message(&text, &json!(5)).unwrap_or_else(|| panic!("{text}"));
    assert_eq!(err["error"]["code"], -32600, "{err}");
    assert_eq!(
        err["error"]["data"]["code"], "duplicate-request-id",
        "{err}"
    );
    // The string id "5" is another id.
    let (status, _, text) = mcp(
        &c,
        &g.base,
        Some(&session),
        &tools_call(json!("5"), "sluice.echo", json!({"x": 1})),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(
        message(&text, &json!("5")).unwrap()["result"].is_object(),
        "{text}"
    );
    let (status, _, text) = first.await.unwrap();
    assert_eq!(status, 200);
    let answer = message(&text, &json!(5)).unwrap_or_else(|| panic!("{text}"));
    assert_eq!(
        answer["result"]["structuredContent"]["value"], 1,
        "{answer}"
    );
    // Answered: id 5 may be used again, and the refused one never ran.
    let (status, _, text) = mcp(
        &c,
        &g.base,
        Some(&session),
        &tools_call(json!(5), "sluice.kv.incr", json!({"key": "n"})),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let answer = message(&text, &json!(5)).unwrap();
    assert_eq!(
        answer["result"]["structuredContent"]["value"], 2,
        "{answer}"
    );
}

/// 60 initializes at once against `--max-sessions 5`, three times: exactly five sessions open
/// each time, every other initialize gets 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn max_sessions_holds_under_simultaneous_initializes() {
    for round in 0..3 {
        let g = start(&["--max-sessions", "5"]);
        let c = client(60);
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "flood", "version": "1.0.0"}}});
        let tries = (0..60).map(|_| {
            let (c, init) = (c.clone(), init.clone());
            let url = format!("{}/mcp", g.base);
            tokio::spawn(async move {
                let r = c
                    .post(url)
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream")
                    .body(init.to_string())
                    .send()
                    .await
                    .unwrap();
                (
                    r.status().as_u16(),
                    r.headers().contains_key("mcp-session-id"),
                )
            })
        });
        let answers = futures::future::join_all(tries).await;
        let opened = answers
            .iter()
            .filter(|a| matches!(a, Ok((200, true))))
            .count();
        let refused = answers.iter().filter(|a| matches!(a, Ok((503, _)))).count();
        assert_eq!(opened, 5, "round {round}: {answers:?}");
        assert_eq!(refused, 55, "round {round}: {answers:?}");
    }
}

/// Two clients without sessions (the batch API; MCP 2026-07-28 clients likewise) send batches
/// with the same call ids: their origins differ by connection and request, and
/// `provenance why --call` refuses the ambiguous id, listing both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessionless_clients_are_told_apart_and_an_ambiguous_call_is_refused() {
    let dir = temp_dir("hardening-origin");
    let log = dir.join("log.jsonl");
    let g = start(&["--provenance", log.to_str().unwrap()]);
    let batch = json!({"calls": [
        {"id": "1", "tool": "sluice.kv.put", "input": {"key": "doc", "value": 1}},
        {"id": "2", "tool": "sluice.kv.get", "input": {"key": "doc"}}]});
    for _ in 0..2 {
        // A client of its own: a connection of its own.
        let (status, v) = run(&client(30), &g, None, &batch).await;
        assert_eq!(status, 200, "{v}");
    }
    // An MCP session's call names its request's JSON-RPC id too.
    let c = client(30);
    let session = initialize(&c, &g, "origin-test").await;
    let (status, _, _) = mcp(
        &c,
        &g.base,
        Some(&session),
        &tools_call(json!(9), "sluice.kv.get", json!({"key": "doc"})),
    )
    .await;
    assert_eq!(status, 200);
    support::gateway::terminate(&g);
    let mut g = g;
    g.child.wait().unwrap();

    let batches: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["record"].clone())
        .filter(|r| r["type"] == "batch")
        .collect();
    assert_eq!(batches.len(), 3, "{batches:?}");
    let origin = |i: usize| batches[i]["origin"].clone();
    assert_eq!(origin(0)["transport"], "http");
    assert_ne!(origin(0)["connection"], origin(1)["connection"]);
    for i in 0..2 {
        assert!(origin(i)["connection"].as_str().unwrap().contains('/'));
        assert!(origin(i)["peer"]
            .as_str()
            .unwrap()
            .starts_with("127.0.0.1:"));
        assert_eq!(origin(i)["request"], "1");
    }
    assert_eq!(origin(2)["transport"], "mcp");
    assert_eq!(origin(2)["client"], "origin-test");
    assert!(
        origin(2)["request"].as_str().unwrap().ends_with("id=9"),
        "{}",
        origin(2)
    );

    let why = support::sluice(
        &["provenance", "why", log.to_str().unwrap(), "--call", "2"],
        None,
        None,
    );
    assert_eq!(why.code, 1, "{}", why.stdout);
    for b in &batches[..2] {
        let named = format!("--batch {}", b["batch"].as_str().unwrap());
        assert!(why.stderr.contains(&named), "{}", why.stderr);
        assert!(
            why.stderr
                .contains(b["origin"]["connection"].as_str().unwrap()),
            "{}",
            why.stderr
        );
    }
    let first = batches[0]["batch"].as_str().unwrap();
    let why = support::sluice(
        &[
            "provenance",
            "why",
            log.to_str().unwrap(),
            "--call",
            "2",
            "--batch",
            first,
        ],
        None,
        None,
    );
    assert_eq!(why.code, 0, "{}", why.stderr);
    let answer: Value = serde_json::from_str(&why.stdout).unwrap();
    assert_eq!(answer[0]["ancestors"][0]["from"], "1", "{answer}");
    assert_eq!(answer[0]["ancestors"][0]["from_batch"], first, "{answer}");
}
