//! A real coding agent through `sluice serve`: OpenAI's Codex CLI (npm, pinned), driven by a
//! scripted model on loopback (`tests/sdk/scripted_model.py`, the Responses API with streaming
//! events), pointed at the gateway over streamable HTTP and over stdio. The model's first answer
//! holds, in one response, two writes of one file, two increments of one counter, a read, an
//! unrelated sleep and a delete the policy denies; its second answer ends the turn. The same
//! turn then runs against a plain MCP server of the same tools (`tests/sdk/plain_mcp_server.py`,
//! the official Python SDK), and both wall times are printed (docs/serve.md has one run's).
//!
//! Needs the machine's npm (Codex installs into `target/codex-<version>`) and python3 with pip
//! (the MCP SDK, as the other gateway tests): without them the test fails, saying so.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice::kernel::provenance::Record;

const CODEX: &str = "0.169.1";

/// The Codex CLI, installed first when missing.
fn codex() -> PathBuf {
    let marker = "node_modules/.bin/codex";
    support::mcp::npm_package(
        &format!("codex-{CODEX}"),
        &format!("@openai/codex@{CODEX}"),
        marker,
    )
    .join(marker)
}

fn sdk(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/sdk")
        .join(file)
}

/// A process killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The scripted model: (process, its base URL for Codex, the file it logs requests to).
fn model(dir: &Path) -> (Running, String, PathBuf) {
    let log = dir.join("model.jsonl");
    let mut cmd = Command::new("python3");
    cmd.arg(sdk("scripted_model.py")).arg(&log);
    let (child, base) = support::gateway::listening(&mut cmd);
    (Running(child), format!("{base}/v1"), log)
}

/// A `CODEX_HOME` whose config points Codex at the scripted model and at one MCP server
/// (`server` is the body of its `[mcp_servers.<name>]` table).
fn codex_home(dir: &Path, model: &str, name: &str, server: &str) -> PathBuf {
    let home = dir.join(format!("codex-home-{name}"));
    std::fs::create_dir_all(&home).unwrap();
    let config = format!(
        r#"model = "scripted-model"
model_provider = "scripted"
approval_policy = "never"
sandbox_mode = "read-only"

[model_providers.scripted]
name = "scripted"
base_url = "{model}"
env_key = "SCRIPTED_API_KEY"
wire_api = "responses"

[mcp_servers.{name}]
{server}
# Sluice asks its own policy; Codex's per-call prompt has nobody to answer in `exec`.
default_tools_approval_mode = "approve"
# Codex runs an MCP server's calls one at a time unless told the server takes them at once.
supports_parallel_tool_calls = true
startup_timeout_sec = 30
"#
    );
    std::fs::write(home.join("config.toml"), config).unwrap();
    home
}

/// Runs `codex exec` on the turn; its wall time. Codex must exit 0.
fn run_codex(home: &Path, work: &Path) -> Duration {
    std::fs::create_dir_all(work).unwrap();
    let start = Instant::now();
    let out = Command::new(codex())
        .args(["exec", "--skip-git-repo-check", "do the turn"])
        .current_dir(work)
        .env("CODEX_HOME", home)
        .env("SCRIPTED_API_KEY", "not-a-real-key")
        .stdin(Stdio::null())
        .output()
        .expect("codex runs");
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "codex exec failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

/// What the scripted model saw: the tool names the first request offered in `namespace`, and
/// each call's output text as Codex sent it back.
struct Seen {
    offered: Vec<String>,
    outputs: HashMap<String, String>,
}

fn seen(log: &Path, namespace: &str) -> Seen {
    let requests: Vec<Value> = std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["body"].clone())
        .collect();
    assert!(
        requests.len() >= 2,
        "the turn has two model requests: {requests:?}"
    );
    let offered = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["type"] == "namespace" && t["name"] == namespace)
        .flat_map(|t| t["tools"].as_array().unwrap().iter())
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    let last = requests.last().unwrap();
    let outputs = last["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .map(|i| {
            let text = match &i["output"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|p| p["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n"),
                other => other.to_string(),
            };
            let call = i["call_id"].as_str().unwrap();
            (call.trim_start_matches("call_").to_owned(), text)
        })
        .collect();
    Seen { offered, outputs }
}

/// The gateway's flags for the turn: the files under `root`, the policy denying deletes, asks
/// approved (Codex's own approval setting is the human in the loop here), a provenance log.
fn gateway_args(dir: &Path) -> Vec<String> {
    let policy = dir.join("policy.json");
    std::fs::write(
        &policy,
        json!({"tenants": {"default": {"default": "allow", "rules": [
            {"id": "no-deletes", "decision": "deny", "effects": ["deletes"]}]}}})
        .to_string(),
    )
    .unwrap();
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    [
        "--root",
        root.to_str().unwrap(),
        "--policy",
        policy.to_str().unwrap(),
        "--approve",
        "all",
        "--provenance",
        dir.join("log.jsonl").to_str().unwrap(),
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Every check of one turn through Sluice.
fn check_sluice_turn(dir: &Path, log: &Path) {
    let seen = seen(log, "mcp__sluice");
    // Codex took every tool Sluice offers, each name within its limits.
    let listed = support::sluice(&["tools", "--format", "mcp"], None, None).json();
    let listed: Vec<&str> = listed
        .as_array()
        .or_else(|| listed["tools"].as_array())
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(seen.offered.len(), listed.len(), "{:?}", seen.offered);
    for name in &listed {
        let as_codex = name.replace('.', "_");
        assert!(
            seen.offered.contains(&as_codex),
            "{name}: {:?}",
            seen.offered
        );
    }
    for name in &seen.offered {
        assert!(name.len() <= 64, "{name}");
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{name}"
        );
    }

    // What the model read back: every call ran; the increments counted 1 and 2; the denied
    // call's error text reached the model.
    let out = |id: &str| {
        seen.outputs
            .get(id)
            .unwrap_or_else(|| panic!("no output for {id}: {:?}", seen.outputs))
            .clone()
    };
    assert!(out("w1").contains("\"bytes\""), "{}", out("w1"));
    assert!(out("w2").contains("\"bytes\""), "{}", out("w2"));
    let mut counts: Vec<String> = ["i1", "i2"]
        .iter()
        .map(|i| {
            let text = out(i);
            let at = text.find("\"value\":").expect("a value");
            text[at + 8..]
                .trim_start()
                .chars()
                .take_while(char::is_ascii_digit)
                .collect()
        })
        .collect();
    counts.sort();
    assert_eq!(counts, ["1", "2"], "{:?}", seen.outputs);
    assert!(out("r1").contains("\"value\""), "{}", out("r1"));
    assert!(out("s1").contains("slept_ms"), "{}", out("s1"));
    assert!(
        out("d1").contains("denied (no-deletes)"),
        "the model is shown the refusal: {}",
        out("d1")
    );
    let file = std::fs::read_to_string(dir.join("root/notes.txt")).unwrap();
    assert!(file == "first\n" || file == "second\n", "{file:?}");

    // The gateway's log: it verifies, and the conflicting calls ran one after the other with
    // their edges, while the others waited for nothing.
    let provenance = dir.join("log.jsonl");
    let v = support::sluice(
        &["provenance", "verify", provenance.to_str().unwrap()],
        None,
        None,
    );
    assert_eq!(v.code, 0, "{}{}", v.stdout, v.stderr);
    let records = sluice::provenance::read_records(&provenance).unwrap();
    let calls: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            Record::Call(c) => Some(c),
            _ => None,
        })
        .collect();
    let edges: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            Record::Edge(e) => Some(e),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 7, "{calls:?}");
    let batches: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            Record::Batch(b) => Some(b),
            _ => None,
        })
        .collect();
    let of = |tool: &str| -> Vec<_> { calls.iter().filter(|c| c.tool == tool).collect() };
    for (tool, kind) in [
        ("sluice.fs.write", "write-after-write"),
        ("sluice.kv.incr", "read-after-write"),
    ] {
        let mut pair = of(tool);
        assert_eq!(pair.len(), 2, "{tool}");
        pair.sort_by(|a, b| a.started_at_ms.partial_cmp(&b.started_at_ms).unwrap());
        let (a, b) = (pair[0], pair[1]);
        assert!(
            a.ended_at_ms.unwrap() <= b.started_at_ms.unwrap(),
            "{tool}: the two calls overlapped"
        );
        // The later one arrived while the earlier ran, and waited for it (an edge); or it
        // arrived after (nothing to wait for). A read after a write is linked either way.
        let arrived = batches
            .iter()
            .find(|x| x.batch == b.batch)
            .map(|x| x.started_at_ms)
            .unwrap();
        let waited = edges
            .iter()
            .any(|e| e.from == a.call && e.to == b.call && e.kind == kind);
        if arrived < a.ended_at_ms.unwrap() || kind == "read-after-write" {
            assert!(
                waited,
                "{tool}: no {kind} edge {} -> {}: {edges:?}",
                a.call, b.call
            );
        }
        println!(
            "{tool}: the second arrived {} the first ended",
            if arrived < a.ended_at_ms.unwrap() {
                "before"
            } else {
                "after"
            }
        );
    }
    let later_incr = {
        let mut pair = of("sluice.kv.incr");
        pair.sort_by(|a, b| a.started_at_ms.partial_cmp(&b.started_at_ms).unwrap());
        pair[1].call.clone()
    };
    let why = support::sluice(
        &[
            "provenance",
            "why",
            provenance.to_str().unwrap(),
            "--call",
            &later_incr,
        ],
        None,
        None,
    );
    assert!(why.stdout.contains("read-after-write"), "{}", why.stdout);
    for tool in ["sluice.sleep", "sluice.kv.get"] {
        let c = of(tool)[0];
        assert!(
            !edges
                .iter()
                .any(|e| e.to == c.call && e.to_batch == c.batch),
            "{tool} waited for something"
        );
    }
    assert_eq!(of("sluice.kv.delete")[0].outcome.as_str(), "denied");
    // Each call was its own MCP request, from Codex's MCP client.
    assert_eq!(batches.len(), 7);
    for b in &batches {
        let origin = b.origin.as_ref().expect("an origin");
        assert_eq!(origin.transport, "mcp");
        assert!(
            origin.client.as_deref().unwrap_or("").contains("codex"),
            "{origin:?}"
        );
    }
}

#[test]
fn codex_drives_the_gateway_over_http_and_the_same_turn_runs_against_a_plain_server() {
    let dir = support::temp_dir("codex-http");
    let (_model, model_base, model_log) = model(&dir);
    let args = gateway_args(&dir);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gateway = support::gateway::start(&args);
    let home = codex_home(
        &dir,
        &model_base,
        "sluice",
        &format!(r#"url = "{}/mcp""#, gateway.base),
    );
    let through_sluice = run_codex(&home, &dir.join("work"));
    drop(gateway); // the log is flushed and closed
    check_sluice_turn(&dir, &model_log);

    // The same turn, the same agent, against a plain MCP server of the same tools.
    let plain = support::temp_dir("codex-plain");
    let (_model2, model_base2, model_log2) = model(&plain);
    let root = plain.join("root");
    std::fs::create_dir_all(&root).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let py = support::python::packages("mcp-python", "mcp-requirements.txt");
    let _server = Running(
        Command::new("python3")
            .arg(sdk("plain_mcp_server.py"))
            .arg(&root)
            .arg(port.to_string())
            .env("PYTHONPATH", &py)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the plain server never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    let home = codex_home(
        &plain,
        &model_base2,
        "plain",
        &format!(r#"url = "http://127.0.0.1:{port}/mcp""#),
    );
    let without = run_codex(&home, &plain.join("work"));
    let seen = seen(&model_log2, "mcp__plain");
    for id in ["w1", "w2", "i1", "i2", "r1", "s1", "d1"] {
        assert!(seen.outputs.contains_key(id), "{id}: {:?}", seen.outputs);
    }
    let lost = ["i1", "i2"].iter().all(|i| {
        seen.outputs[*i].contains("\"value\": 1") || seen.outputs[*i].contains("\"value\":1")
    });
    println!(
        "codex {CODEX}, one turn: through sluice serve {:.0} ms; a plain MCP server {:.0} ms \
         (ratio {:.2}); the plain server lost the counter's update: {}",
        through_sluice.as_secs_f64() * 1e3,
        without.as_secs_f64() * 1e3,
        through_sluice.as_secs_f64() / without.as_secs_f64(),
        if lost { "yes" } else { "no" }
    );
}

#[test]
fn codex_drives_the_gateway_over_stdio() {
    let dir = support::temp_dir("codex-stdio");
    let (_model, model_base, model_log) = model(&dir);
    let mut args = vec!["serve".to_owned(), "--stdio".to_owned()];
    args.extend(gateway_args(&dir));
    let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    let home = codex_home(
        &dir,
        &model_base,
        "sluice",
        &format!(
            "command = {:?}\nargs = [{}]",
            env!("CARGO_BIN_EXE_sluice"),
            args.join(", ")
        ),
    );
    run_codex(&home, &dir.join("work"));
    // Codex ends the server's session when it exits; each batch record follows its call's.
    let log = dir.join("log.jsonl");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let batches = sluice::provenance::read_records(&log)
            .map(|r| r.iter().filter(|r| matches!(r, Record::Batch(_))).count())
            .unwrap_or(0);
        if batches >= 7 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the log never held the turn's 7 batches"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    check_sluice_turn(&dir, &model_log);
}
