//! `sluice plan` against cli.md: the JSON, the text and dot views, and clean failures.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use serde_json::{json, Value};
use support::{fixture, sluice, temp_dir};

fn plan(batch: &Value, extra: &[&str]) -> support::Run {
    let dir = temp_dir("plan");
    let mut args = vec!["plan", "--batch", "-", "--root", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    sluice(&args, Some(&batch.to_string()), None)
}

#[test]
fn the_json_has_every_key_of_cli_md() {
    let batch = json!({"tenant": "acme", "calls": [
        {"id": "c1", "tool": "sluice.kv.get", "input": {"key": "users/42"}},
        {"id": "c2", "tool": "sluice.kv.get", "input": {"key": "users/7"}},
        {"id": "c3", "tool": "sluice.kv.put", "input": {"key": "users/42", "value": 1}},
        {"id": "c4", "tool": "sluice.echo", "input": {"x": 1}}
    ]});
    let run = plan(&batch, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v = run.json();
    assert_eq!(v["tenant"], "acme");
    assert_eq!(
        v["calls"][0],
        json!({"id": "c1", "tool": "sluice.kv.get", "version": "1.0.0", "read_only": true,
               "accesses": [{"kind": "reads", "resource": "kv:users/42", "mode": "read"}]})
    );
    assert_eq!(v["calls"][2]["read_only"], false);
    assert_eq!(v["calls"][3]["accesses"], json!([]));
    assert!(v["calls"][0].get("authorization").is_none());
    assert_eq!(
        v["edges"],
        json!([{"from": "c1", "to": "c3", "resource": "kv:users/42", "kind": "write-after-read"}])
    );
    assert_eq!(v["waves"], json!([["c1", "c2", "c4"], ["c3"]]));
    assert_eq!(v["critical_path"], json!(["c1", "c3"]));
}

#[test]
fn tools_from_files_and_wildcards_are_planned() {
    let tools = fixture("manifests/valid/array-of-two.json");
    let dir = temp_dir("plan-tools");
    let writer = json!({"id": "acme.purge", "description": "Purge a bucket", "version": "1.0.0",
        "input": {"type": "object", "properties": {"bucket": {"type": "string"}}},
        "output": {}, "effects": [{"kind": "deletes", "resource": "kv:{bucket}/*"}]});
    std::fs::write(dir.join("purge.json"), writer.to_string()).unwrap();
    let batch = json!({"tenant": "t", "calls": [
        {"id": "r", "tool": "sluice.kv.get", "input": {"key": "logs/1"}},
        {"id": "p", "tool": "acme.purge", "input": {"bucket": "logs"}},
        {"id": "a", "tool": "fixture.array-a", "input": {"key": "logs/2"}},
        {"id": "o", "tool": "sluice.kv.get", "input": {"key": "other/1"}}
    ]});
    let run = plan(
        &batch,
        &[
            "--tools",
            tools.to_str().unwrap(),
            "--tools",
            dir.to_str().unwrap(),
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v = run.json();
    assert_eq!(v["calls"][1]["accesses"][0]["resource"], "kv:logs/*");
    assert_eq!(
        v["edges"],
        json!([
            {"from": "r", "to": "p", "resource": "kv:logs/1", "kind": "write-after-read"},
            {"from": "p", "to": "a", "resource": "kv:logs/2", "kind": "read-after-write"}
        ])
    );
    assert_eq!(v["waves"], json!([["r", "o"], ["p"], ["a"]]));
}

#[test]
fn input_values_stay_literal_and_fs_paths_are_normalized() {
    let dir = temp_dir("plan-fs");
    let root = std::fs::canonicalize(&dir).unwrap();
    let batch = json!({"tenant": "t", "calls": [
        {"id": "star", "tool": "sluice.kv.put", "input": {"key": "*", "value": 1}},
        {"id": "other", "tool": "sluice.kv.get", "input": {"key": "x"}},
        {"id": "w", "tool": "sluice.fs.write", "input": {"path": "src/../notes.txt", "content": ""}},
        {"id": "r", "tool": "sluice.fs.read", "input": {"path": format!("{}/./notes.txt", root.display())}}
    ]});
    let run = sluice(
        &["plan", "--batch", "-", "--root", root.to_str().unwrap()],
        Some(&batch.to_string()),
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v = run.json();
    assert_eq!(v["calls"][0]["accesses"][0]["resource"], "kv:\\*");
    let file = format!("fs:{}/notes.txt", root.display());
    assert_eq!(v["calls"][2]["accesses"][0]["resource"], file.as_str());
    assert_eq!(v["calls"][3]["accesses"][0]["resource"], file.as_str());
    // A literal `*` key conflicts with nothing else; the two spellings of one file do.
    assert_eq!(
        v["edges"],
        json!([{"from": "w", "to": "r", "resource": file, "kind": "read-after-write"}])
    );
}

#[test]
fn text_and_dot_views() {
    let batch = json!({"tenant": "t", "calls": [
        {"id": "a", "tool": "sluice.kv.put", "input": {"key": "k", "value": 1}},
        {"id": "b", "tool": "sluice.kv.get", "input": {"key": "k"}}
    ]});
    let text = plan(&batch, &["--format", "text"]);
    assert_eq!(text.code, 0);
    assert!(
        text.stdout
            .contains("waits for a (read-after-write on kv:k)"),
        "{}",
        text.stdout
    );
    let dot = plan(&batch, &["--format", "dot"]);
    assert!(dot.stdout.starts_with("digraph"));
    assert!(dot
        .stdout
        .contains("\"a\" -> \"b\" [label=\"kv:k\\nread-after-write\"]"));
}

#[test]
fn bad_batches_fail_cleanly_naming_the_call() {
    let cases = [
        (
            json!({"tenant": "t", "calls": [{"id": "c9", "tool": "no.such", "input": {}}]}),
            vec!["c9", "no.such"],
        ),
        (
            json!({"tenant": "t", "calls": [{"id": "c1", "tool": "sluice.kv.get", "input": {"key": 5}}]}),
            vec!["c1", "/key"],
        ),
        (
            json!({"tenant": "t", "calls": [{"id": "d", "tool": "sluice.echo"}, {"id": "d", "tool": "sluice.echo"}]}),
            vec!["`d`", "/calls/1/id"],
        ),
        (json!({"tenant": "t", "calls": {}}), vec!["/calls"]),
        (json!([1]), vec!["batch"]),
    ];
    for (batch, needles) in cases {
        let run = plan(&batch, &[]);
        assert_eq!(run.code, 1, "{batch}: {}", run.stderr);
        for n in needles {
            assert!(
                run.stderr.contains(n),
                "{batch}: `{n}` missing from {}",
                run.stderr
            );
        }
        assert!(!run.stderr.contains("panicked"));
    }
    let run = sluice(&["plan", "--batch", "-"], Some("{not json"), None);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("line 1"));
    assert_eq!(
        sluice(&["plan", "--batch", "/no/such.json"], None, None).code,
        2
    );
    let bad_tool = fixture("manifests/invalid/bad-version.json");
    let run = sluice(
        &[
            "plan",
            "--tools",
            bad_tool.to_str().unwrap(),
            "--batch",
            "-",
        ],
        Some(r#"{"calls": []}"#),
        None,
    );
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("bad-version.json") && run.stderr.contains("/version"));
}
