//! `sluice run` against cli.md: the JSON, call-level failures, exit codes, flags.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use serde_json::{json, Value};
use support::{sluice, temp_dir};

fn run(batch: &Value, extra: &[&str]) -> support::Run {
    let dir = temp_dir("run");
    let mut args = vec!["run", "--batch", "-", "--root", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    sluice(&args, Some(&batch.to_string()), None)
}

#[test]
fn results_follow_cli_md_in_submission_order() {
    let batch = json!({"tenant": "acme", "calls": [
        {"id": "i1", "tool": "sluice.kv.incr", "input": {"key": "n", "delay_ms": 5}},
        {"id": "i2", "tool": "sluice.kv.incr", "input": {"key": "n", "delay_ms": 5}},
        {"id": "e", "tool": "sluice.echo", "input": {"hello": "world"}},
        {"id": "g", "tool": "sluice.kv.get", "input": {"key": "n"}},
        {"id": "bad", "tool": "sluice.kv.get", "input": {"key": 7}},
        {"id": "unk", "tool": "acme.nope", "input": {}}
    ]});
    let r = run(&batch, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = r.json();
    let results = v["results"].as_array().unwrap();
    let ids: Vec<&str> = results.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["i1", "i2", "e", "g", "bad", "unk"]);
    for r in results {
        for key in ["id", "status", "output", "error", "started_ms", "ended_ms"] {
            assert!(r.get(key).is_some(), "{key} missing in {r}");
        }
    }
    // Two incrs of one key never lose an update; the read sees both.
    assert_eq!(results[1]["output"]["value"], 2);
    assert_eq!(results[3]["output"], json!({"key": "n", "value": 2}));
    assert_eq!(results[2]["output"], json!({"hello": "world"}));
    assert_eq!(results[0]["error"], Value::Null);
    assert!(results[1]["started_ms"].as_f64().unwrap() >= results[0]["ended_ms"].as_f64().unwrap());
    // Bad calls fail alone, with the code cli.md names and the pointer in the message.
    assert_eq!(results[4]["status"], "error");
    assert_eq!(results[4]["error"]["code"], "invalid-input");
    assert!(results[4]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("/key"));
    assert_eq!(results[4]["started_ms"], Value::Null);
    assert_eq!(results[4]["ended_ms"], Value::Null);
    assert_eq!(results[5]["error"]["code"], "unknown-tool");
    let makespan = v["makespan_ms"].as_f64().unwrap();
    let last_end = results
        .iter()
        .filter_map(|r| r["ended_ms"].as_f64())
        .fold(0.0, f64::max);
    assert_eq!(makespan, last_end);
}

#[test]
fn skip_dependents_and_the_text_view() {
    let batch = json!({"tenant": "t", "calls": [
        {"id": "p", "tool": "sluice.kv.put", "input": {"key": "s", "value": "text"}},
        {"id": "x", "tool": "sluice.kv.incr", "input": {"key": "s"}},
        {"id": "y", "tool": "sluice.kv.get", "input": {"key": "s"}},
        {"id": "z", "tool": "sluice.kv.get", "input": {"key": "other"}}
    ]});
    let r = run(&batch, &["--on-failure", "skip-dependents"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = r.json();
    assert_eq!(v["results"][1]["status"], "error");
    assert_eq!(v["results"][1]["error"]["code"], "not-a-number");
    assert_eq!(v["results"][2]["status"], "skipped");
    assert!(v["results"][2]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("`x`"));
    assert_eq!(v["results"][3]["status"], "ok");
    let cont = run(&batch, &[]);
    assert_eq!(cont.json()["results"][2]["status"], "ok");

    let text = run(&batch, &["--format", "text", "--max-concurrency", "1"]);
    assert_eq!(text.code, 0);
    assert!(text.stdout.contains("makespan"), "{}", text.stdout);
    assert!(text.stdout.contains("not-a-number"));
}

#[test]
fn fs_tools_are_confined_to_their_root() {
    let dir = temp_dir("run-fs");
    let batch = json!({"tenant": "t", "calls": [
        {"id": "w", "tool": "sluice.fs.write", "input": {"path": "notes/../a.txt", "content": "hi"}},
        {"id": "r", "tool": "sluice.fs.read", "input": {"path": "a.txt"}},
        {"id": "out", "tool": "sluice.fs.read", "input": {"path": "../../etc/hostname"}},
        {"id": "abs", "tool": "sluice.fs.write", "input": {"path": "/tmp/elsewhere.txt", "content": "x"}}
    ]});
    let r = sluice(
        &["run", "--batch", "-", "--root", dir.to_str().unwrap()],
        Some(&batch.to_string()),
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = r.json();
    assert_eq!(v["results"][1]["output"]["content"], "hi");
    assert_eq!(v["results"][2]["error"]["code"], "path-escapes-root");
    assert_eq!(v["results"][3]["error"]["code"], "path-escapes-root");
    assert!(!std::path::Path::new("/tmp/elsewhere.txt").exists());
}

#[test]
fn batches_that_cannot_run_exit_1_and_unreadable_files_2() {
    let dup = json!({"tenant": "t", "calls": [{"id": "a", "tool": "sluice.echo"}, {"id": "a", "tool": "sluice.echo"}]});
    let r = run(&dup, &[]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("`a`"));
    let r = sluice(&["run", "--batch", "-"], Some("[]"), None);
    assert_eq!(r.code, 1);
    assert_eq!(
        sluice(&["run", "--batch", "/no/such/batch.json"], None, None).code,
        2
    );
    assert_eq!(
        sluice(
            &["run", "--batch", "-", "--on-failure", "explode"],
            Some("{}"),
            None
        )
        .code,
        2
    );
}
