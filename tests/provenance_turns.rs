//! Provenance across turns (issue 16): lineage across batches and processes, the durability
//! promise on a real full file system and with an injected failing writer.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::path::Path;

use serde_json::{json, Value};
use sluice_kernel::provenance::{AccessRecord, CallRecord, Record};
use sluice_kernel::run::Kernel;
use sluice_kernel::transport::{handler, ToolContext, ToolError};
use sluice_kernel::{Batch, Call, Status};
use sluice_provenance::{read_records, verify_file, Durability, LogOptions, ProvenanceLog};
use support::{sluice, temp_dir, tool};

/// One `sluice run` process on `log`, with the fs tools rooted at `root`.
fn run(root: &Path, log: &Path, calls: Value) -> support::Run {
    let batch = json!({"tenant": "acme", "calls": calls});
    sluice(
        &[
            "run",
            "--batch",
            "-",
            "--root",
            root.to_str().unwrap(),
            "--provenance",
            log.to_str().unwrap(),
        ],
        Some(&batch.to_string()),
        None,
    )
}

/// The batch id of the call `call` whose record is the last one in the log.
fn batch_of(log: &Path, call: &str) -> String {
    read_records(log)
        .unwrap()
        .iter()
        .rev()
        .find_map(|r| match r {
            Record::Call(c) if c.call == call => Some(c.batch.clone()),
            _ => None,
        })
        .unwrap()
}

#[test]
fn a_later_process_reads_what_an_earlier_one_wrote_and_why_says_so() {
    let dir = temp_dir("turns");
    let log = dir.join("log.jsonl");
    let write = |id: &str, path: &str, text: &str| json!({"id": id, "tool": "sluice.fs.write", "input": {"path": path, "content": text}});
    let read =
        |id: &str, path: &str| json!({"id": id, "tool": "sluice.fs.read", "input": {"path": path}});

    // Turn 1 writes notes.md (and an unrelated file); turn 2, another process, writes it again;
    // turn 3 reads it: its ancestor is turn 2's write only (the later write supersedes).
    let r = run(
        &dir,
        &log,
        json!([write("w", "notes.md", "one"), write("x", "other.md", "x")]),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let turn1 = batch_of(&log, "w");
    let r = run(&dir, &log, json!([write("w2", "notes.md", "two")]));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let turn2 = batch_of(&log, "w2");
    assert_ne!(turn1, turn2);
    let r = run(&dir, &log, json!([read("r", "notes.md")]));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json()["results"][0]["output"]["content"], "two");
    assert_eq!(r.json()["results"][0]["recorded"], true);
    let turn3 = batch_of(&log, "r");

    let why = sluice(
        &["provenance", "why", log.to_str().unwrap(), "--call", "r"],
        None,
        None,
    );
    assert_eq!(why.code, 0, "{}", why.stderr);
    let v = why.json();
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert_eq!(v[0]["call"], json!({"batch": turn3, "call": "r"}));
    let ancestors = v[0]["ancestors"].as_array().unwrap();
    assert_eq!(ancestors.len(), 1, "{v}");
    let a = &ancestors[0];
    let keys: Vec<&str> = a.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["from", "from_batch", "kind", "resource", "to", "to_batch"]
    );
    assert_eq!(a["from_batch"], turn2);
    assert_eq!(a["from"], "w2");
    assert_eq!(a["to_batch"], turn3);
    assert_eq!(a["kind"], "read-after-write");
    assert!(a["resource"].as_str().unwrap().ends_with("notes.md"), "{a}");

    // A reader of both files, in turn 4, is explained by turn 2's write and turn 1's `x`.
    let r = run(
        &dir,
        &log,
        json!([read("both1", "notes.md"), read("both2", "other.md")]),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = sluice(
        &[
            "provenance",
            "why",
            log.to_str().unwrap(),
            "--call",
            "both2",
        ],
        None,
        None,
    )
    .json();
    assert_eq!(v[0]["ancestors"][0]["from"], "x");
    assert_eq!(v[0]["ancestors"][0]["from_batch"], turn1);

    // Lineage lists the writers and the cross-batch edges.
    let resource = format!("fs:{}", dir.join("notes.md").display());
    let l = sluice(
        &[
            "provenance",
            "lineage",
            log.to_str().unwrap(),
            "--resource",
            &resource,
        ],
        None,
        None,
    );
    assert_eq!(l.code, 0, "{}", l.stderr);
    let l = l.json();
    let writers: Vec<&str> = l["writers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["call"].as_str().unwrap())
        .collect();
    assert_eq!(writers, ["w", "w2"]);
    assert!(l["edges"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["from"] == "w2" && e["to"] == "r" && e["to_batch"] == turn3));

    // PROV-JSON: the read used the entity turn 2's write generated, not an initial version.
    let p = sluice(
        &[
            "provenance",
            "export",
            log.to_str().unwrap(),
            "--format",
            "prov-json",
        ],
        None,
        None,
    )
    .json();
    let activity = format!("sluice:call/{turn3}/r");
    let used: Vec<&str> = p["used"]
        .as_object()
        .unwrap()
        .values()
        .filter(|u| u["prov:activity"] == activity)
        .map(|u| u["prov:entity"].as_str().unwrap())
        .collect();
    assert_eq!(used.len(), 1, "{used:?}");
    assert!(used[0].ends_with(&format!("@{turn2}/w2")), "{used:?}");
    assert!(p["entity"].get(used[0]).is_some());
    let generated = p["wasGeneratedBy"]
        .as_object()
        .unwrap()
        .values()
        .any(|g| g["prov:entity"] == used[0]);
    assert!(
        generated,
        "the entity the read used was generated by the write"
    );
    assert_eq!(
        verify_file(&log).unwrap().records as usize,
        read_records(&log).unwrap().len()
    );
}

fn call_record(batch: &str, id: &str, mode: &str, resource: &str) -> Record {
    Record::Call(CallRecord {
        batch: batch.into(),
        tenant: "acme".into(),
        call: id.into(),
        tool: "t".into(),
        tool_version: Some("1.0.0".into()),
        input_sha256: "0".repeat(64),
        output_sha256: None,
        accesses: vec![AccessRecord {
            kind: if mode == "read" { "reads" } else { "writes" }.into(),
            resource: resource.into(),
            mode: mode.into(),
        }],
        decision: Some("allow".into()),
        decided_by: Some("default".into()),
        approver: None,
        started_at_ms: Some(1.0),
        ended_at_ms: Some(2.0),
        outcome: Status::Ok,
        error_code: None,
        error_message: None,
    })
}

#[tokio::test]
async fn the_last_writers_are_rebuilt_on_open_in_memory_per_resource_not_per_record() {
    let dir = temp_dir("rebuild");
    let path = dir.join("log.jsonl");
    let log = ProvenanceLog::open(&path, Durability::Buffered).unwrap();
    // 2,000 writes of 10 resources, then one wildcard write of half of them.
    for i in 0..2000 {
        drop(log.append(call_record(
            &format!("b{}", i / 10),
            &format!("c{i}"),
            "write",
            &format!("kv:k{}", i % 10),
        )));
    }
    drop(log.append(call_record("bw", "wild", "write", "kv:k1*")));
    log.flush().await.unwrap();
    log.close();

    let log = ProvenanceLog::open(&path, Durability::Durable).unwrap();
    assert_eq!(log.opened().records, 2001);
    // kv:k0, kv:k2..kv:k9 exactly, and the wildcard (which superseded kv:k1).
    assert_eq!(log.opened().resources, 10);
    let seq = log
        .append_group(vec![call_record("later", "r", "read", "kv:k*")])
        .await
        .unwrap()
        .unwrap();
    log.close();
    let records = read_records(&path).unwrap();
    assert_eq!(records.len() as u64, seq);
    let mut froms: Vec<String> = records
        .iter()
        .filter_map(|r| match r {
            Record::Edge(e) if e.to == "r" => Some(format!("{}/{}", e.from_batch, e.from)),
            _ => None,
        })
        .collect();
    froms.sort();
    let mut expected: Vec<String> = (1990..2000)
        .filter(|i| i % 10 != 1)
        .map(|i| format!("b{}/c{i}", i / 10))
        .collect();
    expected.push("bw/wild".into());
    expected.sort();
    assert_eq!(froms, expected);
    // The edges come right before the call that reads, in one group.
    assert!(matches!(records.last(), Some(Record::Call(c)) if c.call == "r"));
}

/// A kernel with one tool that writes `x:{key}`, recorded to `log`.
fn writing_kernel(log: std::sync::Arc<ProvenanceLog>) -> Kernel {
    Kernel::builder()
        .tool(tool(
            "t.put",
            json!([{"kind": "writes", "resource": "x:{key}"}]),
            true,
            handler(|_c: ToolContext, input: Value| async move {
                Ok::<_, ToolError>(json!({"put": input["key"]}))
            }),
        ))
        .provenance_arc(log)
        .build()
        .unwrap()
}

/// Closes a log shared with a kernel once the kernel (and every task that still holds it)
/// has let go: the file lock goes with the last holder.
async fn close_when_released(mut log: std::sync::Arc<ProvenanceLog>) {
    loop {
        match std::sync::Arc::try_unwrap(log) {
            Ok(l) => return l.close(),
            Err(shared) => {
                log = shared;
                tokio::task::yield_now().await;
            }
        }
    }
}

#[tokio::test]
async fn a_failing_writer_gives_recorded_false_and_leaves_the_log_verifiable() {
    let dir = temp_dir("failing-writer");
    let path = dir.join("log.jsonl");
    // Room for a few records, then every write fails as on a full disk.
    let log = ProvenanceLog::open_with(
        &path,
        LogOptions::new(Durability::Durable).with_fail_writes_after(3000),
    )
    .unwrap();
    let log = std::sync::Arc::new(log);
    let kernel = writing_kernel(log.clone());
    // One call per batch, each batch awaited (its result waits for its commit): commits one by
    // one, so the full disk comes in the middle.
    let mut results = Vec::new();
    for i in 0..12 {
        let call = Call::new(format!("c{i}"), "t.put", json!({"key": "k"}));
        let r = kernel
            .run(Batch::new("acme", vec![call]).unwrap())
            .await
            .unwrap();
        results.extend(r.results);
    }
    let result = sluice_kernel::BatchResult {
        batch_id: String::new(),
        tenant: "acme".into(),
        results,
        makespan: std::time::Duration::ZERO,
    };
    // The calls before the full disk ran and were kept; a call whose commit failed says its
    // records are not kept; after the failure, under `durable`, none runs: no tool runs
    // unrecorded.
    let kept: Vec<&str> = result
        .results
        .iter()
        .filter(|r| r.recorded == Some(true))
        .map(|r| r.id.as_str())
        .collect();
    let refused = result
        .results
        .iter()
        .filter(|r| r.recorded == Some(false))
        .count();
    assert!(
        !kept.is_empty() && refused > 0,
        "kept {kept:?}, refused {refused}"
    );
    assert_eq!(kept.len() + refused, 12);
    // The failure came with a call's commit (that call ran, unkept) or a batch record's (the
    // next call already finds the log failed): at most one call ran unkept.
    let ran = result
        .results
        .iter()
        .filter(|r| r.status == Status::Ok)
        .count();
    assert!(ran == kept.len() || ran == kept.len() + 1, "ran {ran}");
    assert!(ran < 12, "calls kept running after the log failed");
    for r in &result.results[ran..] {
        let e = r.error.as_ref().expect("refused");
        assert_eq!(e.code, "provenance-unavailable", "{r:?}");
        assert!(e.message.contains("No space left"), "{r:?}");
    }
    // Once refused, always refused (no gaps): the kept ones are a prefix of the chain.
    let prefix: Vec<String> = (0..kept.len()).map(|i| format!("c{i}")).collect();
    assert_eq!(kept, prefix);
    drop(kernel);
    close_when_released(log).await;

    // The file verifies (the partial write was cut back) and holds exactly the kept calls.
    let v = verify_file(&path).unwrap();
    let records = read_records(&path).unwrap();
    assert_eq!(v.records as usize, records.len());
    let recorded_calls: Vec<String> = records
        .iter()
        .filter_map(|r| match r {
            Record::Call(c) => Some(c.call.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(recorded_calls, prefix);
    // The next open takes records again.
    let log = ProvenanceLog::open(&path, Durability::Durable).unwrap();
    assert!(log.opened().repaired.is_none());
    assert!(log
        .append(call_record("b", "after", "write", "x:k"))
        .await
        .unwrap()
        .is_ok());
}

/// Runs `script` (sh) in a private mount namespace, where it may mount a small tmpfs: as root
/// (`unshare -m`) or, for anyone else, as root of a new user namespace (`unshare -rm`).
fn in_mount_namespace(script: &str, args: &[&str]) -> std::process::Output {
    let mut last = String::new();
    for flags in ["-m", "-rm"] {
        let out = std::process::Command::new("unshare")
            .arg(flags)
            .args(["sh", "-c", script, "sh"])
            .args(args)
            .output()
            .expect("unshare runs (util-linux)");
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !stderr.contains("unshare failed") && !stderr.contains("mount: ") {
            return out;
        }
        last = stderr.into_owned();
    }
    panic!(
        "this test needs a small tmpfs and could not mount one (neither as root nor in a user \
         namespace): {last}"
    );
}

#[test]
fn on_a_full_file_system_run_prints_the_whole_batch_exits_1_and_the_log_verifies() {
    let dir = temp_dir("full-fs");
    let root = dir.join("files");
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let batch = |name: &str, ids: std::ops::Range<usize>| {
        let calls: Vec<Value> = ids
            .map(|i| {
                json!({"id": format!("w{i}"), "tool": "sluice.fs.write",
                       "input": {"path": format!("f{i}.txt"), "content": "x"}})
            })
            .collect();
        let path = dir.join(name);
        std::fs::write(&path, json!({"tenant": "acme", "calls": calls}).to_string()).unwrap();
        path
    };
    let first = batch("first.json", 0..4);
    let second = batch("second.json", 4..34);
    // A 16 KiB tmpfs: the first turn's records fit, the second's 30 do not. What was written is
    // copied out before the namespace (and its mount) goes away.
    let script = r#"
        mount -t tmpfs -o size=16k tmpfs "$1" || exit 97
        "$2" run --batch "$3" --root "$5" --provenance "$1/log.jsonl" >"$6/out1.json" 2>"$6/err1.txt"
        echo $? >"$6/code1.txt"
        "$2" run --batch "$4" --root "$5" --provenance "$1/log.jsonl" >"$6/out.json" 2>"$6/err.txt"
        echo $? >"$6/code.txt"
        cp "$1/log.jsonl" "$6/log.jsonl"
    "#;
    let out = in_mount_namespace(
        script,
        &[
            mnt.to_str().unwrap(),
            env!("CARGO_BIN_EXE_sluice"),
            first.to_str().unwrap(),
            second.to_str().unwrap(),
            root.to_str().unwrap(),
            dir.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "the script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    assert_eq!(read("code1.txt").trim(), "0", "{}", read("err1.txt"));
    let stderr = read("err.txt");
    assert_eq!(read("code.txt").trim(), "1", "{stderr}");
    assert!(stderr.contains("could not be written"), "{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    // The whole batch is printed, and each result says whether its records are in the log.
    // Once the log failed (durable), no call started: each one either ran (its file is there)
    // or ended `provenance-unavailable` without running (its file is not).
    let v: Value = serde_json::from_str(&read("out.json")).unwrap();
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 30);
    // (Whether any is refused depends on how many started before the first failed commit; the
    // sequential test above pins that down.)
    for (i, r) in (4..34).zip(results) {
        let file = root.join(format!("f{i}.txt"));
        if r["status"] == "ok" {
            assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
        } else {
            assert_eq!(r["error"]["code"], "provenance-unavailable", "{r}");
            assert_eq!(r["recorded"], false, "{r}");
            assert!(!file.exists(), "{r}");
        }
    }
    for i in 0..4 {
        assert_eq!(
            std::fs::read_to_string(root.join(format!("f{i}.txt"))).unwrap(),
            "x"
        );
    }
    let kept: Vec<String> = results
        .iter()
        .filter(|r| r["recorded"] == true)
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    let refused: Vec<&str> = results
        .iter()
        .filter(|r| r["recorded"] == false)
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert!(!refused.is_empty(), "{v}");
    assert_eq!(kept.len() + refused.len(), 30);
    for id in &refused {
        assert!(stderr.contains(id), "{id} is named: {stderr}");
    }
    // (the ones that did not run were refused, too: nothing of them is in the log)
    // The log as the full disk left it verifies, and holds the first turn and exactly the calls
    // of the second said recorded.
    let log = dir.join("log.jsonl");
    let verified = sluice(&["provenance", "verify", log.to_str().unwrap()], None, None);
    assert_eq!(verified.code, 0, "{}", verified.stdout);
    let mut in_log: Vec<String> = read_records(&log)
        .unwrap()
        .iter()
        .filter_map(|r| match r {
            Record::Call(c) => Some(c.call.clone()),
            _ => None,
        })
        .collect();
    in_log.sort();
    let mut expected: Vec<String> = (0..4).map(|i| format!("w{i}")).chain(kept).collect();
    expected.sort();
    assert_eq!(in_log, expected);
}

#[tokio::test]
async fn a_call_and_its_edges_are_one_commit_all_or_nothing() {
    let dir = temp_dir("one-commit");
    let path = dir.join("log.jsonl");
    let edge = |to: &str| {
        Record::Edge(sluice_kernel::provenance::EdgeRecord {
            tenant: "acme".into(),
            from_batch: "b".into(),
            from: "w".into(),
            to_batch: "b".into(),
            to: to.into(),
            resource: "kv:k".into(),
            kind: "read-after-write".into(),
            causal: true,
        })
    };
    // Room for the first lines of the group, not all of them.
    let log = ProvenanceLog::open_with(
        &path,
        LogOptions::new(Durability::Durable).with_fail_writes_after(600),
    )
    .unwrap();
    let group = vec![edge("r"), edge("r"), call_record("b", "r", "read", "kv:k")];
    let refused = log.append_group(group).await.unwrap();
    let why = refused.unwrap_err();
    assert!(
        matches!(&why, sluice::kernel::Error::ProvenanceRefused { why } if why.contains("No space left")),
        "{why}"
    );
    log.close();
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        0,
        "nothing of it stays"
    );
    // Without the limit, the same group is three lines with consecutive seqs, in one answer.
    let log = ProvenanceLog::open(&path, Durability::Durable).unwrap();
    let group = vec![edge("r"), edge("r"), call_record("b", "r", "read", "kv:k")];
    assert_eq!(log.append_group(group).await.unwrap().unwrap(), 3);
    log.close();
    assert_eq!(verify_file(&path).unwrap().records, 3);
}

/// Durable first (issue 41, item 5): on a file system that fills up mid-batch, no write leaves a
/// file whose call is nowhere in the log. Each call's intent is on disk before its handler
/// starts, so every file that exists belongs to a call the log names (its record, or at least
/// its intent: outcome unknown), and a call whose intent could not be kept never ran.
#[test]
fn on_a_full_file_system_no_effect_is_left_without_its_record() {
    let dir = temp_dir("full-fs-intents");
    let root = dir.join("files");
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let calls: Vec<Value> = (0..30)
        .map(|i| {
            json!({"id": format!("w{i}"), "tool": "sluice.fs.write",
                   "input": {"path": format!("f{i}.txt"), "content": "x"}})
        })
        .collect();
    let batch = dir.join("batch.json");
    std::fs::write(
        &batch,
        json!({"tenant": "acme", "calls": calls}).to_string(),
    )
    .unwrap();
    // The issue's report: a 64 KiB tmpfs, 30 writes.
    let script = r#"
        mount -t tmpfs -o size=64k tmpfs "$1" || exit 97
        head -c 56000 /dev/zero > "$1/filler"
        "$2" run --batch "$3" --root "$4" --provenance "$1/log.jsonl" >"$5/out.json" 2>"$5/err.txt"
        echo $? >"$5/code.txt"
        cp "$1/log.jsonl" "$5/log.jsonl"
    "#;
    let out = in_mount_namespace(
        script,
        &[
            mnt.to_str().unwrap(),
            env!("CARGO_BIN_EXE_sluice"),
            batch.to_str().unwrap(),
            root.to_str().unwrap(),
            dir.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "the script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    let stderr = read("err.txt");
    assert_eq!(read("code.txt").trim(), "1", "the disk filled up: {stderr}");
    let log = read("log.jsonl");
    let named: Vec<(String, String)> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|l| {
            (
                l["record"]["type"].as_str().unwrap_or_default().to_owned(),
                l["record"]["call"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let v: Value = serde_json::from_str(&read("out.json")).unwrap();
    let results = v["results"].as_array().unwrap();
    let mut written = 0;
    for (i, r) in results.iter().enumerate() {
        let call = format!("w{i}");
        let file = root.join(format!("f{i}.txt"));
        if file.exists() {
            written += 1;
            assert!(
                named
                    .iter()
                    .any(|(t, c)| c == &call && (t == "intent" || t == "call")),
                "{call} wrote its file and the log names it nowhere: {r}"
            );
        } else {
            assert_ne!(r["status"], "ok", "{r}");
        }
        if r["status"] != "ok" {
            assert_eq!(r["error"]["code"], "provenance-unavailable", "{r}");
        }
    }
    // (How many ran depends on how the intents fell into group commits: all of one commit are
    // kept or none. Whatever the split, none ran unrecorded.)
    assert!(
        written < 30,
        "{written} of 30 written: the disk never filled up"
    );
}
