//! The provenance log: records of real runs, tamper detection, crash repair, the single-writer
//! lock, secret redaction and the PROV-JSON export.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::io::{BufRead, BufReader};
use std::time::Duration;

use serde_json::{json, Value};
use sluice_kernel::authorize::{AuthRequest, Authorization, DecidedBy, Decision};
use sluice_kernel::provenance::Record;
use sluice_kernel::run::{Kernel, OnFailure};
use sluice_kernel::transport::{handler, ToolContext, ToolError};
use sluice_kernel::{Batch, Call, Status};
use sluice_provenance::{
    query, read_records, verify_file, Durability, ProvenanceError, ProvenanceLog,
};
use support::{sluice, temp_dir, tool, tool_with};

fn lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn write_lines(path: &std::path::Path, lines: &[String]) {
    std::fs::write(
        path,
        lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
}

/// A kernel whose calls end in every status, recorded to `log`.
async fn run_every_outcome(log: ProvenanceLog) -> sluice_kernel::BatchResult {
    let w = |id: &str| {
        tool(
            id,
            json!([{"kind": "writes", "resource": "x:{key}"}]),
            true,
            handler(|ctx: ToolContext, input: Value| async move {
                if input["secret"] == true {
                    let s = ctx
                        .resolve_secret("TOKEN")
                        .map_err(|e| ToolError::new("ctx", e.to_string()))?;
                    return Err(ToolError::new(
                        "leaky",
                        format!("upstream said no to token {s}"),
                    ));
                }
                if input["fail"] == true {
                    return Err(ToolError::new("broken", "failed on purpose"));
                }
                if input["hang"] == true {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
                Ok(json!({"done": input["key"]}))
            }),
        )
    };
    let slow = tool_with(
        json!({"id": "t.slow", "mutating": false, "effects": [],
        "limits": {"memMB": 8, "cpuMs": 30}}),
        handler(|_c: ToolContext, _i: Value| async move {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, ToolError>(json!({}))
        }),
    );
    let secretive = tool_with(
        json!({"id": "t.secret", "mutating": true,
        "effects": [{"kind": "writes", "resource": "x:secret"}],
        "needsSpec": {"secrets": {"TOKEN": {"type": "string"}}}}),
        w("unused").handler().unwrap().clone(),
    );
    let auth = |req: &AuthRequest<'_>| match req.call_id {
        "denied" => Authorization::new(Decision::Deny, DecidedBy::rule("no-way")),
        "rejected" => Authorization::new(Decision::Ask, DecidedBy::rule("ask-first")),
        _ => Authorization::new(Decision::Allow, DecidedBy::rule("ok-rule")),
    };
    let kernel = Kernel::builder()
        .tool(w("t.w"))
        .tool(slow)
        .tool(secretive)
        .authorizer(auth)
        .secrets(|_t: &str, _n: &str, _e: Option<&str>| Some("hunter2-s3cr3t".to_string()))
        .on_failure(OnFailure::SkipDependents)
        .provenance(log)
        .build()
        .unwrap();
    let batch = Batch::new(
        "acme",
        vec![
            Call::new("ok", "t.w", json!({"key": "a"})),
            Call::new("reader", "t.w", json!({"key": ["a", "z"]})),
            Call::new("error", "t.w", json!({"key": "b", "fail": true})),
            Call::new("skipped", "t.w", json!({"key": "b"})),
            Call::new("timeout", "t.slow", json!({})),
            Call::new("denied", "t.w", json!({"key": "c"})),
            Call::new("rejected", "t.w", json!({"key": "d"})),
            Call::new("secret", "t.secret", json!({"secret": true})),
            Call::new("hang", "t.w", json!({"key": "h", "hang": true})),
            Call::new("cancelled", "t.w", json!({"key": "h"})),
        ],
    )
    .unwrap();
    let mut handle = kernel.submit(batch).unwrap();
    // Every call but `hang` (which never ends) and `cancelled` (which waits for it) completes on
    // its own; once those eight have, the batch is cancelled.
    let mut done = 0;
    while done < 8 {
        handle.next_completion().await.unwrap();
        done += 1;
    }
    handle.cancel();
    handle.finish().await
}

#[tokio::test]
async fn every_outcome_leaves_a_complete_record() {
    let dir = temp_dir("prov-outcomes");
    let path = dir.join("log.jsonl");
    let log = ProvenanceLog::open(&path, Durability::Durable).unwrap();
    let result = run_every_outcome(log).await;
    let status: Vec<(String, Status)> = result
        .results
        .iter()
        .map(|r| (r.id.clone(), r.status))
        .collect();
    assert_eq!(
        status.iter().map(|s| s.1).collect::<Vec<_>>(),
        [
            Status::Ok,
            Status::Ok,
            Status::Error,
            Status::Skipped,
            Status::Timeout,
            Status::Denied,
            Status::Rejected,
            Status::Error,
            Status::Cancelled,
            Status::Cancelled
        ],
        "{status:?}"
    );

    let records = read_records(&path).unwrap();
    let calls: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            Record::Call(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 10);
    for c in &calls {
        assert_eq!(c.batch, result.batch_id);
        assert_eq!(c.tenant, "acme");
        assert_eq!(c.input_sha256.len(), 64);
        let expected = result.get(&c.call).unwrap();
        assert_eq!(c.outcome, expected.status, "{}", c.call);
        assert_eq!(c.tool_version.as_deref(), Some("1.0.0"));
        assert_eq!(
            c.error_code.is_some(),
            c.outcome != Status::Ok,
            "{}",
            c.call
        );
        assert_eq!(
            c.output_sha256.is_some(),
            c.outcome == Status::Ok,
            "{}",
            c.call
        );
        match c.call.as_str() {
            "ok" => {
                assert_eq!(c.decision.as_deref(), Some("allow"));
                assert_eq!(c.decided_by.as_deref(), Some("ok-rule"));
                assert_eq!(c.accesses[0].resource, "x:a");
                assert_eq!(c.accesses[0].mode, "write");
                assert!(c.started_at_ms.unwrap() <= c.ended_at_ms.unwrap());
                assert_eq!(
                    c.output_sha256.as_deref(),
                    Some(sluice_kernel::provenance::sha256_json(&json!({"done": "a"})).as_str())
                );
            }
            "denied" => {
                assert_eq!(
                    (c.decision.as_deref(), c.decided_by.as_deref()),
                    (Some("deny"), Some("no-way"))
                );
                assert_eq!(c.started_at_ms, None);
            }
            "rejected" => {
                assert_eq!(c.decision.as_deref(), Some("ask"));
                assert_eq!(c.approver.as_deref(), Some("no-approver"));
            }
            "skipped" => assert!(c.error_message.as_deref().unwrap().contains("`error`")),
            "timeout" => assert_eq!(c.error_code.as_deref(), Some("timeout")),
            "cancelled" | "hang" => assert_eq!(c.error_code.as_deref(), Some("cancelled")),
            _ => {}
        }
    }
    // No secret value anywhere in the log.
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains("hunter2"), "a secret reached the log");
    let secret = calls.iter().find(|c| c.call == "secret").unwrap();
    assert!(secret
        .error_message
        .as_deref()
        .unwrap()
        .contains("[redacted]"));
    // Edges, with kinds, and the batch record.
    let edges: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            Record::Edge(e) => Some(e),
            _ => None,
        })
        .collect();
    assert!(edges
        .iter()
        .any(|e| e.from == "ok" && e.to == "reader" && e.kind == "write-after-write"));
    assert!(edges.iter().any(|e| e.from == "error" && e.to == "skipped"));
    let batch = records
        .iter()
        .find_map(|r| match r {
            Record::Batch(b) => Some(b),
            _ => None,
        })
        .unwrap();
    assert_eq!(batch.calls.len(), 10);
}

fn sample_log(dir: &std::path::Path, n: usize) -> std::path::PathBuf {
    let path = dir.join("sample.jsonl");
    let log = ProvenanceLog::open(&path, Durability::Buffered).unwrap();
    for i in 0..n {
        // Buffered: queued now, written by the log's thread; `close` waits for it.
        drop(
            log.append(Record::Batch(sluice_kernel::provenance::BatchRecord {
                batch: format!("b{i}"),
                tenant: "t".into(),
                calls: vec![],
                started_at_ms: 0.0,
                ended_at_ms: 1.0,
                origin: None,
            })),
        );
    }
    log.close();
    path
}

fn damaged_line(path: &std::path::Path) -> usize {
    match verify_file(path) {
        Err(ProvenanceError::Damaged { line, .. }) => line,
        other => panic!("expected damage, got {other:?}"),
    }
}

#[test]
fn verify_names_an_edited_deleted_inserted_or_reordered_line() {
    let dir = temp_dir("prov-tamper");
    let path = sample_log(&dir, 6);
    let original = lines(&path);
    assert_eq!(verify_file(&path).unwrap().records, 6);

    let mut edited = original.clone();
    edited[2] = edited[2].replace("\"tenant\":\"t\"", "\"tenant\":\"x\"");
    write_lines(&path, &edited);
    assert_eq!(damaged_line(&path), 3);

    let mut deleted = original.clone();
    deleted.remove(3);
    write_lines(&path, &deleted);
    assert_eq!(damaged_line(&path), 4);

    let mut inserted = original.clone();
    inserted.insert(1, original[4].clone());
    write_lines(&path, &inserted);
    assert_eq!(damaged_line(&path), 2);

    let mut reordered = original.clone();
    reordered.swap(1, 2);
    write_lines(&path, &reordered);
    assert_eq!(damaged_line(&path), 2);

    // White space added anywhere in a line — the last one too, where no later `prev` would
    // notice — is a change: the hash covers the bytes as written (issue 22, finding 5).
    for (at, what) in [(75, " "), (80, "\t"), (0, " ")] {
        let mut spaced = original.clone();
        spaced[5].insert_str(at, what);
        write_lines(&path, &spaced);
        assert_eq!(damaged_line(&path), 6, "{what:?} at {at}");
    }

    // The CLI names the line and exits 1; a cut tail is caught by --head.
    write_lines(&path, &edited);
    let run = sluice(
        &["provenance", "verify", path.to_str().unwrap()],
        None,
        None,
    );
    assert_eq!(run.code, 1);
    assert!(run.stdout.contains("line 3"), "{}", run.stdout);
    write_lines(&path, &original);
    let ok = sluice(
        &[
            "provenance",
            "verify",
            "--format",
            "json",
            path.to_str().unwrap(),
        ],
        None,
        None,
    );
    assert_eq!(ok.code, 0);
    let head = ok.json()["head"].as_str().unwrap().to_owned();
    assert_eq!(ok.json()["records"], 6);
    write_lines(&path, &original[..5]);
    assert_eq!(
        sluice(
            &["provenance", "verify", path.to_str().unwrap()],
            None,
            None
        )
        .code,
        0
    );
    let cut = sluice(
        &[
            "provenance",
            "verify",
            "--head",
            &head,
            path.to_str().unwrap(),
        ],
        None,
        None,
    );
    assert_eq!(cut.code, 1);
    assert_eq!(
        sluice(&["provenance", "verify", "/no/such/log"], None, None).code,
        2
    );
}

#[test]
fn a_torn_tail_is_reported_then_repaired_on_open() {
    let dir = temp_dir("prov-torn");
    let path = sample_log(&dir, 3);
    let full = std::fs::read(&path).unwrap();
    // A whole last line without its newline: kept.
    std::fs::write(&path, &full[..full.len() - 1]).unwrap();
    let run = sluice(
        &["provenance", "verify", path.to_str().unwrap()],
        None,
        None,
    );
    assert_eq!(run.code, 1);
    assert!(
        run.stdout.contains("line 3") && run.stdout.contains("repairs it"),
        "{}",
        run.stdout
    );
    let log = ProvenanceLog::open(&path, Durability::Durable).unwrap();
    assert_eq!(log.opened().records, 3);
    assert!(log.opened().repaired.is_some());
    log.close();
    assert_eq!(verify_file(&path).unwrap().records, 3);
    // Half a line: cut.
    std::fs::write(&path, &full[..full.len() - 40]).unwrap();
    let log = ProvenanceLog::open(&path, Durability::Durable).unwrap();
    assert_eq!(log.opened().records, 2);
    log.close();
    assert_eq!(verify_file(&path).unwrap().records, 2);
    // Damage before the tail is refused on open, naming the line.
    let mut l = lines(&path);
    l[0] = l[0].replace("\"b0\"", "\"bX\"");
    write_lines(&path, &l);
    match ProvenanceLog::open(&path, Durability::Durable) {
        Err(ProvenanceError::Damaged { line, .. }) => assert_eq!(line, 1),
        other => panic!("expected damage, got {other:?}"),
    }
}

#[test]
fn one_writer_at_a_time() {
    let dir = temp_dir("prov-lock");
    let path = dir.join("log.jsonl");
    let first = ProvenanceLog::open(&path, Durability::Durable).unwrap();
    assert!(matches!(
        ProvenanceLog::open(&path, Durability::Durable),
        Err(ProvenanceError::Locked { .. })
    ));
    // Another process is refused too, with a clear error.
    let batch = json!({"tenant": "t", "calls": [{"id": "e", "tool": "sluice.echo", "input": {}}]});
    let run = sluice(
        &[
            "run",
            "--batch",
            "-",
            "--provenance",
            path.to_str().unwrap(),
        ],
        Some(&batch.to_string()),
        None,
    );
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("already open for writing"),
        "{}",
        run.stderr
    );
    drop(first);
    let run = sluice(
        &[
            "run",
            "--batch",
            "-",
            "--provenance",
            path.to_str().unwrap(),
        ],
        Some(&batch.to_string()),
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    // Durable (the CLI's default): the call's intent, then its record, then the batch's.
    assert_eq!(verify_file(&path).unwrap().records, 3);
}

#[test]
fn a_writer_killed_mid_append_loses_no_durable_record() {
    let dir = temp_dir("prov-crash");
    let path = dir.join("log.jsonl");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["provenance", "soak", path.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut acked = 0u64;
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while acked < 3000 {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 {
            break;
        }
        acked = line.trim().parse().unwrap();
    }
    child.kill().unwrap(); // SIGKILL, in the middle of heavy appending
    child.wait().unwrap();
    assert!(
        acked >= 3000,
        "the writer acknowledged only {acked} records"
    );
    let log = ProvenanceLog::open(&path, Durability::Durable).unwrap();
    let kept = log.opened().records;
    log.close();
    let v = verify_file(&path).unwrap();
    assert_eq!(v.records, kept);
    assert!(
        kept >= acked,
        "acknowledged {acked} durable records, {kept} survived"
    );
    let ok = sluice(
        &["provenance", "verify", path.to_str().unwrap()],
        None,
        None,
    );
    assert_eq!(ok.code, 0, "{}", ok.stdout);
}

#[tokio::test]
async fn lineage_why_and_prov_json() {
    let dir = temp_dir("prov-query");
    let path = dir.join("log.jsonl");
    let log = ProvenanceLog::open(&path, Durability::Durable).unwrap();
    let kv = sluice_kernel::builtin::KvStore::new();
    let kernel = Kernel::builder()
        .tools(
            sluice_kernel::builtin::registry(
                sluice_kernel::builtin::BuiltinConfig::new(dir.clone()).with_kv(kv),
            )
            .unwrap(),
        )
        .provenance(log)
        .approver(sluice_kernel::authorize::ApproveAll)
        .authorizer(|req: &AuthRequest<'_>| {
            if req.call_id == "w2" {
                Authorization::new(Decision::Ask, DecidedBy::rule("careful"))
            } else {
                Authorization::new(Decision::Allow, DecidedBy::rule("ok"))
            }
        })
        .build()
        .unwrap();
    kernel
        .run(
            Batch::new(
                "acme",
                vec![
                    Call::new("w1", "sluice.kv.put", json!({"key": "doc", "value": 1})),
                    Call::new("r1", "sluice.kv.get", json!({"key": "doc"})),
                    Call::new("w2", "sluice.kv.incr", json!({"key": "doc"})),
                    Call::new("r2", "sluice.kv.get", json!({"key": "doc"})),
                    Call::new(
                        "other",
                        "sluice.kv.put",
                        json!({"key": "elsewhere", "value": 0}),
                    ),
                ],
            )
            .unwrap(),
        )
        .await
        .unwrap();
    drop(kernel);
    let records = read_records(&path).unwrap();
    let l = query::lineage(
        &records,
        &sluice_kernel::access::Pattern::parse("kv:d*").unwrap(),
    );
    let writers: Vec<&str> = l
        .writers
        .iter()
        .map(|w| w["call"].as_str().unwrap())
        .collect();
    assert_eq!(writers, ["w1", "w2"]);
    let why = query::why(&records, "r2", None);
    let ancestors: Vec<&str> = why[0].ancestors.iter().map(|e| e.from.as_str()).collect();
    assert_eq!(ancestors, ["w2", "w1"], "r2 saw w2, which read w1's write");

    let prov = query::prov_json(&records);
    for key in [
        "prefix",
        "activity",
        "entity",
        "agent",
        "used",
        "wasGeneratedBy",
        "wasInformedBy",
        "wasAssociatedWith",
    ] {
        assert!(prov.get(key).is_some(), "{key} missing");
    }
    let acts = prov["activity"].as_object().unwrap();
    assert_eq!(acts.len(), 5);
    assert!(acts
        .values()
        .all(|a| a["prov:startTime"].as_str().unwrap().ends_with('Z')));
    let informed: Vec<(&str, &str)> = prov["wasInformedBy"]
        .as_object()
        .unwrap()
        .values()
        .map(|r| {
            (
                r["prov:informed"].as_str().unwrap(),
                r["prov:informant"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(informed
        .iter()
        .any(|(a, b)| a.ends_with("/r2") && b.ends_with("/w2")));
    assert!(prov["agent"]
        .as_object()
        .unwrap()
        .contains_key("sluice:approver/auto-approve"));
    // Every relation names ids that exist.
    for (rel, a_key, e_key) in [
        ("used", "prov:activity", "prov:entity"),
        ("wasGeneratedBy", "prov:activity", "prov:entity"),
    ] {
        for r in prov[rel].as_object().unwrap().values() {
            assert!(acts.contains_key(r[a_key].as_str().unwrap()));
            assert!(
                prov["entity"]
                    .as_object()
                    .unwrap()
                    .contains_key(r[e_key].as_str().unwrap()),
                "{r}"
            );
        }
    }
    // The CLI answers the same questions.
    let p = path.to_str().unwrap();
    let why = sluice(&["provenance", "why", p, "--call", "r2"], None, None);
    assert_eq!(why.code, 0);
    assert_eq!(why.json()[0]["ancestors"][0]["from"], "w2");
    assert_eq!(
        sluice(&["provenance", "why", p, "--call", "nobody"], None, None).code,
        1
    );
    let lin = sluice(
        &["provenance", "lineage", p, "--resource", "kv:elsewhere"],
        None,
        None,
    );
    assert_eq!(lin.json()["writers"][0]["call"], "other");
    let export = sluice(
        &["provenance", "export", p, "--format", "prov-json"],
        None,
        None,
    );
    assert_eq!(export.json(), prov);
}

/// A record with a non-finite time is written so that the log still verifies and opens: the log
/// never holds what its reader refuses (issue 22, finding 4).
#[tokio::test]
async fn non_finite_times_never_make_a_log_unreadable() {
    let dir = temp_dir("prov-nan");
    let path = dir.join("log.jsonl");
    let log = ProvenanceLog::open(&path, Durability::Durable).unwrap();
    let batch = |s: f64, e: f64| {
        Record::Batch(sluice_kernel::provenance::BatchRecord {
            batch: "b".into(),
            tenant: "t".into(),
            calls: vec![],
            started_at_ms: s,
            ended_at_ms: e,
            origin: None,
        })
    };
    for (s, e) in [(f64::NAN, 1.0), (f64::INFINITY, f64::NEG_INFINITY)] {
        assert!(log.append(batch(s, e)).await.unwrap().is_ok());
    }
    log.close();
    assert_eq!(verify_file(&path).unwrap().records, 2);
    let records = read_records(&path).unwrap();
    assert!(
        matches!(&records[0], Record::Batch(b) if b.started_at_ms.is_nan() && b.ended_at_ms == 1.0)
    );
    let log = ProvenanceLog::open(&path, Durability::Durable).unwrap();
    assert_eq!(log.opened().records, 2);
}
