//! Durable first (issue 41, item 5): under a durable log a call's intent is on disk before its
//! handler starts, so after a crash `provenance verify` and `why` name every call that started
//! and never finished; each call's idempotency key reaches the system it writes to.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{sluice, temp_dir};

fn records(log: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|l| l["record"].clone())
        .collect()
}

/// A process killed while a call runs: the log holds the call's intent, not its outcome, and
/// both `verify` and `why` say the call's effect is in doubt, with its idempotency key.
#[test]
fn after_a_crash_the_log_names_the_calls_in_doubt() {
    let dir = temp_dir("durable-crash");
    let log = dir.join("log.jsonl");
    let batch = dir.join("batch.json");
    std::fs::write(
        &batch,
        json!({"tenant": "acme", "calls": [
            {"id": "done", "tool": "sluice.kv.put", "input": {"key": "a", "value": 1}},
            {"id": "long", "tool": "sluice.sleep", "input": {"ms": 600000}}]})
        .to_string(),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--batch"])
        .arg(&batch)
        .arg("--provenance")
        .arg(&log)
        .args(["--durability", "durable"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let rs = records(&log);
        let started = rs
            .iter()
            .any(|r| r["type"] == "intent" && r["call"] == "long");
        let finished = rs
            .iter()
            .any(|r| r["type"] == "call" && r["call"] == "done");
        if started && finished {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the long call never started: {rs:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();

    let rs = records(&log);
    let intent = rs
        .iter()
        .find(|r| r["type"] == "intent" && r["call"] == "long")
        .unwrap()
        .clone();
    let key = intent["idempotency_key"].as_str().unwrap().to_owned();
    assert_eq!(key.len(), 32, "{intent}");
    assert_eq!(intent["tool"], "sluice.sleep");
    assert!(intent["input_sha256"].as_str().is_some(), "{intent}");

    let verify = sluice(&["provenance", "verify", log.to_str().unwrap()], None, None);
    assert_eq!(verify.code, 0, "{}", verify.stderr);
    assert!(
        verify.stdout.contains("1 calls started and never finished"),
        "{}",
        verify.stdout
    );
    assert!(verify.stdout.contains("--call long"), "{}", verify.stdout);
    assert!(verify.stdout.contains(&key), "{}", verify.stdout);
    assert!(!verify.stdout.contains("--call done"), "{}", verify.stdout);
    let json_verify = sluice(
        &[
            "provenance",
            "verify",
            log.to_str().unwrap(),
            "--format",
            "json",
        ],
        None,
        None,
    );
    let v = json_verify.json();
    assert_eq!(v["outcome_unknown"][0]["call"], "long", "{v}");
    assert_eq!(
        v["outcome_unknown"][0]["idempotency_key"],
        key.as_str(),
        "{v}"
    );

    let why = sluice(
        &["provenance", "why", log.to_str().unwrap(), "--call", "long"],
        None,
        None,
    );
    assert_eq!(why.code, 0, "{}", why.stderr);
    assert_eq!(why.json()[0]["outcome_unknown"], true, "{}", why.stdout);
    let why = sluice(
        &["provenance", "why", log.to_str().unwrap(), "--call", "done"],
        None,
        None,
    );
    assert!(
        why.json()[0].get("outcome_unknown").is_none(),
        "{}",
        why.stdout
    );
}

/// An HTTP tool's request carries the call's idempotency key, the one its intent records; two
/// calls (even with one id in two batches) have two keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_tool_gets_the_calls_idempotency_key() {
    let server = support::http_server::start().await;
    let dir = temp_dir("durable-key");
    let log = dir.join("log.jsonl");
    let tools = dir.join("tools.json");
    std::fs::write(
        &tools,
        json!([{"id": "svc.hit", "description": "hits the service", "version": "1.0.0",
                "input": {"type": "object"}, "output": {}, "mutating": true,
                "effects": [{"kind": "writes", "resource": "svc:x"},
                            {"kind": "network", "resource": "net:127.0.0.1"}],
                "network": {"kind": "allowlist", "hosts": ["127.0.0.1"]},
                "spec": {"kind": "http", "method": "POST", "urlTemplate": server.url("/hit")}}])
        .to_string(),
    )
    .unwrap();
    let batch = dir.join("batch.json");
    std::fs::write(
        &batch,
        json!({"tenant": "acme", "calls": [{"id": "1", "tool": "svc.hit", "input": {}}]})
            .to_string(),
    )
    .unwrap();
    for _ in 0..2 {
        let run = sluice(
            &[
                "run",
                "--tools",
                tools.to_str().unwrap(),
                "--batch",
                batch.to_str().unwrap(),
                "--provenance",
                log.to_str().unwrap(),
            ],
            None,
            None,
        );
        assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    }
    let sent: Vec<String> = server
        .requests()
        .iter()
        .map(|r| r.header("idempotency-key").unwrap_or_default().to_owned())
        .collect();
    let intended: Vec<String> = records(&log)
        .iter()
        .filter(|r| r["type"] == "intent")
        .map(|r| r["idempotency_key"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(sent, intended);
    assert_eq!(sent.len(), 2);
    assert_ne!(sent[0], sent[1], "two calls, two keys");
}

/// The same on the shared log in PostgreSQL: `verify` of every tenant's chain, and of one,
/// names the call a killed process left in doubt.
#[test]
fn after_a_crash_a_shared_log_names_the_calls_in_doubt() {
    let pg = support::postgres::Postgres::start();
    let dir = temp_dir("durable-crash-pg");
    let batch = dir.join("batch.json");
    std::fs::write(
        &batch,
        json!({"tenant": "acme", "calls": [
            {"id": "long", "tool": "sluice.sleep", "input": {"ms": 600000}}]})
        .to_string(),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--batch"])
        .arg(&batch)
        .args(["--provenance", &pg.url, "--durability", "durable"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let intents = pg
            .try_sql(
                "SELECT count(*) FROM sluice_provenance WHERE line LIKE '%\"type\":\"intent\"%'",
            )
            .unwrap_or_default();
        if intents.trim() == "1" {
            break;
        }
        assert!(Instant::now() < deadline, "the call never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    for args in [
        vec!["provenance", "verify", pg.url.as_str()],
        vec!["provenance", "verify", pg.url.as_str(), "--tenant", "acme"],
    ] {
        let verify = sluice(&args, None, None);
        assert_eq!(verify.code, 0, "{args:?}: {}", verify.stderr);
        assert!(
            verify.stdout.contains("1 calls started and never finished")
                && verify.stdout.contains("--call long"),
            "{args:?}: {}",
            verify.stdout
        );
    }
}
