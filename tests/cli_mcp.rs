//! `sluice mcp import` against the reference MCP server, and `sluice run` on one batch that mixes
//! native, HTTP and MCP tools.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use serde_json::{json, Value};
use support::http_server;
use support::mcp::everything_stdio;
use support::{read_json, sluice, temp_dir};

#[test]
fn import_writes_manifests_that_validate_and_keeps_edited_ones() {
    let e = everything_stdio("");
    let dir = temp_dir("mcp-import");
    let out = dir.to_str().unwrap();
    let r = sluice(
        &["mcp", "import", &e, "--prefix", "ev", "--out", out],
        None,
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let summary = r.json();
    assert_eq!(summary["prefix"], "ev");
    assert_eq!(summary["endpoint"], e.as_str());
    let tools = summary["tools"].as_array().unwrap();
    assert!(tools.len() >= 10, "{summary}");
    assert!(tools.iter().all(|t| t["written"] == true));

    let sum = read_json(&dir.join("ev.get-sum.json"));
    assert_eq!(sum["mcpEndpoint"], e.as_str());
    assert_eq!(sum["transport"], "mcp");
    assert_eq!(sum["mutating"], false);
    assert_eq!(sum["metadata"]["mcpTool"], "get-sum");

    let v = sluice(&["validate", out, "--format", "json"], None, None);
    assert_eq!(v.code, 0, "{}{}", v.stdout, v.stderr);

    // A person declares effects; importing again keeps the file unless --force.
    let edited = dir.join("ev.toggle-simulated-logging.json");
    let mut m = read_json(&edited);
    m["effects"] = json!([{"kind": "writes", "resource": "ev:logging"}]);
    std::fs::write(&edited, m.to_string()).unwrap();
    let again = sluice(
        &["mcp", "import", &e, "--prefix", "ev", "--out", out],
        None,
        None,
    );
    assert_eq!(again.code, 0, "{}", again.stderr);
    let kept = again.json()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "ev.toggle-simulated-logging")
        .cloned()
        .unwrap();
    assert_eq!(kept["written"], false);
    assert_eq!(read_json(&edited)["effects"][0]["resource"], "ev:logging");
    let forced = sluice(
        &[
            "mcp", "import", &e, "--prefix", "ev", "--out", out, "--force",
        ],
        None,
        None,
    );
    assert_eq!(forced.code, 0, "{}", forced.stderr);
    // The catalog's effects again (the person's belong in an overlay: docs/mcp-effects.md).
    assert_eq!(
        read_json(&edited)["effects"],
        json!([{"kind": "writes", "resource": "everything:logging"}])
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn import_without_out_prints_the_manifests() {
    let e = everything_stdio("");
    let r = sluice(&["mcp", "import", &e], None, None);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let manifests = r.json();
    let echo = manifests
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metadata"]["mcpTool"] == "echo")
        .cloned()
        .unwrap();
    assert_eq!(
        echo["id"], "everything.echo",
        "the default prefix is the server's name"
    );
}

#[test]
fn import_errors_say_what_failed() {
    let bad = sluice(&["mcp", "import", "mcp+ws://x"], None, None);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("mcp+ws://x"), "{}", bad.stderr);
    let unsplittable = sluice(&["mcp", "import", "mcp+stdio://'unclosed"], None, None);
    assert_eq!(unsplittable.code, 2, "{}", unsplittable.stderr);
    let prefix = sluice(
        &["mcp", "import", "mcp+stdio://x", "--prefix", "a:b"],
        None,
        None,
    );
    assert_eq!(prefix.code, 2, "{}", prefix.stderr);
    assert!(prefix.stderr.contains("--prefix"), "{}", prefix.stderr);
    let gone = sluice(
        &["mcp", "import", "mcp+stdio:///nonexistent/server"],
        None,
        None,
    );
    assert_eq!(gone.code, 1, "{}", gone.stderr);
    assert!(
        gone.stderr.contains("/nonexistent/server"),
        "{}",
        gone.stderr
    );
    assert!(!gone.stderr.contains("panicked"), "{}", gone.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_batch_mixes_native_http_and_mcp_tools() {
    let s = http_server::start().await;
    let e = everything_stdio("");
    let dir = temp_dir("mcp-mixed");
    let http = json!({"id": "acme.lookup", "description": "Look up", "version": "1.0.0",
        "input": {"type": "object", "properties": {"user": {"type": "string"}}}, "output": {},
        "mutating": false, "effects": [{"kind": "network", "resource": "net:127.0.0.1"}],
        "spec": {"kind": "http", "method": "GET", "urlTemplate": s.url("/echo/{user}")}});
    let sum = json!({"id": "ev.get-sum", "description": "Adds", "version": "1.0.0",
        "input": {"type": "object", "required": ["a", "b"]}, "output": {},
        "mcpEndpoint": e, "mutating": false, "effects": [{"kind": "reads", "resource": "ev:*"}]});
    std::fs::write(dir.join("lookup.json"), http.to_string()).unwrap();
    std::fs::write(dir.join("sum.json"), sum.to_string()).unwrap();
    let batch = json!({"tenant": "t", "calls": [
        {"id": "native", "tool": "sluice.kv.put", "input": {"key": "k", "value": 1}},
        {"id": "http", "tool": "acme.lookup", "input": {"user": "ada"}},
        {"id": "mcp", "tool": "ev.get-sum", "input": {"a": 20, "b": 22}},
        {"id": "bad", "tool": "ev.get-sum", "input": {"a": 1}}
    ]})
    .to_string();
    let tools = dir.to_str().unwrap().to_owned();
    let r = tokio::task::spawn_blocking(move || {
        sluice(
            &["run", "--tools", &tools, "--batch", "-", "--format", "json"],
            Some(&batch),
            None,
        )
    })
    .await
    .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: Value = r.json();
    let results = v["results"].as_array().unwrap();
    for r in &results[..3] {
        assert_eq!(r["status"], "ok", "{r}");
    }
    assert_eq!(results[1]["output"]["target"], "/echo/ada");
    assert_eq!(
        results[2]["output"][0]["text"],
        "The sum of 20 and 22 is 42."
    );
    // Invalid input never reaches the server: the kernel checks it against the schema.
    assert_eq!(results[3]["status"], "error");
    assert_eq!(
        results[3]["error"]["code"], "invalid-input",
        "{}",
        results[3]
    );
    assert!(r.stderr.is_empty(), "{}", r.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An MCP manifest with no `mcpEndpoint` (as the reference SDK's packs ship them).
fn unbound(id: &str, version: &str) -> Value {
    json!({"id": id, "description": "echo, endpoint bound at deployment", "version": version,
           "input": {"type": "object", "properties": {"message": {"type": "string"}}},
           "output": {}, "transport": "mcp", "mutating": false,
           "metadata": {"mcpTool": "echo"}})
}

#[test]
fn an_endpoint_bound_at_deployment_carries_a_tool_that_names_none() {
    let dir = temp_dir("mcp-bind");
    let tools = dir.join("tools.json");
    std::fs::write(
        &tools,
        json!([unbound("dep.echo", "1.0.0"), unbound("dep.echo", "2.0.0")]).to_string(),
    )
    .unwrap();
    let t = tools.to_str().unwrap();
    let batch = json!({"tenant": "t", "calls": [
        {"id": "new", "tool": "dep.echo", "input": {"message": "hi"}},
        {"id": "old", "tool": "dep.echo@1.0.0", "input": {"message": "ho"}}]})
    .to_string();

    // Valid without an endpoint, with a warning saying how to bind one.
    let v = sluice(&["validate", "--format", "json", t], None, None);
    assert_eq!(v.code, 0, "{}", v.stdout);
    let warnings = v.json()["manifests"][0]["warnings"].to_string();
    assert!(warnings.contains("--mcp-endpoint"), "{warnings}");

    // Unbound: the calls end `no-handler`, saying how to bind it; the batch still runs.
    let r = sluice(&["run", "--tools", t, "--batch", "-"], Some(&batch), None);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let out = r.json();
    for res in out["results"].as_array().unwrap() {
        assert_eq!(res["error"]["code"], "no-handler", "{res}");
        let msg = res["error"]["message"].as_str().unwrap();
        assert!(msg.contains("--mcp-endpoint"), "{msg}");
    }

    // Bound (every version of the id): both run on the reference server, each saying its version.
    let e = everything_stdio("");
    let binding = format!("dep.echo={e}");
    let r = sluice(
        &[
            "run",
            "--tools",
            t,
            "--mcp-endpoint",
            &binding,
            "--batch",
            "-",
        ],
        Some(&batch),
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let out = r.json();
    let results = out["results"].as_array().unwrap();
    assert!(results.iter().all(|r| r["status"] == "ok"), "{out}");
    assert_eq!(results[0]["version"], "2.0.0");
    assert_eq!(results[1]["version"], "1.0.0");
    assert!(results[1]["output"].to_string().contains("ho"), "{out}");

    // A binding of one version leaves the other unbound.
    let one = format!("dep.echo@1.0.0={e}");
    let r = sluice(
        &["run", "--tools", t, "--mcp-endpoint", &one, "--batch", "-"],
        Some(&batch),
        None,
    );
    let out = r.json();
    assert_eq!(out["results"][0]["error"]["code"], "no-handler", "{out}");
    assert_eq!(out["results"][1]["status"], "ok", "{out}");
}

#[test]
fn a_binding_that_cannot_apply_is_refused_saying_why() {
    let dir = temp_dir("mcp-bind-bad");
    let tools = dir.join("tools.json");
    let e = everything_stdio("");
    std::fs::write(
        &tools,
        json!([
            unbound("dep.echo", "1.0.0"),
            support::mcp::mcp_manifest("own.echo", &e, json!({}))
        ])
        .to_string(),
    )
    .unwrap();
    let t = tools.to_str().unwrap();
    let cases: [(String, i32, &str); 6] = [
        (format!("nobody={e}"), 1, "no tool of that name"),
        (format!("sluice.echo={e}"), 1, "not an MCP tool"),
        (format!("own.echo={e}"), 1, "names its own endpoint"),
        (
            "dep.echo=https://example.com/mcp".into(),
            1,
            "no known scheme",
        ),
        (
            "dep.echo=mcp+stdio://'unclosed".into(),
            1,
            "cannot be split",
        ),
        ("dep.echo".into(), 2, "expected ID=URI"),
    ];
    for (binding, code, why) in cases {
        for cmd in ["tools", "plan"] {
            let mut args = vec![cmd, "--tools", t, "--mcp-endpoint", &binding];
            if cmd == "plan" {
                args.extend(["--batch", "-"]);
            }
            let r = sluice(&args, Some(r#"{"calls": []}"#), None);
            assert_eq!(r.code, code, "{cmd} {binding}: {}", r.stderr);
            assert!(r.stderr.contains(why), "{cmd} {binding}: {}", r.stderr);
        }
    }
}
