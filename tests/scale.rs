//! Past one machine (docs/scale.md): processes that share a PostgreSQL database share each
//! tenant's conflict domain. Against a real server (tests/support/postgres.rs), started on
//! loopback in a temporary directory.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice::kernel::run::Kernel;
use sluice::kernel::transport::{handler, ToolContext};
use sluice::kernel::{Batch, Call, Status};
use sluice::postgres::PgDomain;
use support::http_server;
use support::postgres::Postgres;
use support::scale::{recorder_tools, sluice_run};

/// What a handler saw: (key, start, end, fencing token).
type Spans = Arc<Mutex<Vec<(String, Instant, Instant, Option<u64>)>>>;

/// `t.write` writes `x:{key}`, `t.sweep` writes `x:*` (a glob: it conflicts with every key);
/// both record their own start and end.
fn kernel(domain: Arc<PgDomain>, spans: &Spans) -> Kernel {
    let tool = |id: &str, resource: &str| {
        let spans = spans.clone();
        support::tool(
            id,
            json!([{"kind": "writes", "resource": resource}]),
            true,
            handler(move |ctx: ToolContext, input: Value| {
                let spans = spans.clone();
                async move {
                    let start = Instant::now();
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    let key = input["key"].as_str().unwrap_or("*").to_owned();
                    spans
                        .lock()
                        .unwrap()
                        .push((key, start, Instant::now(), ctx.fencing_token()));
                    Ok(json!({}))
                }
            }),
        )
    };
    Kernel::builder()
        .tool(tool("t.write", "x:{key}"))
        .tool(tool("t.sweep", "x:*"))
        .shared_domain(domain)
        .build()
        .unwrap()
}

fn overlaps(spans: &[(String, Instant, Instant, Option<u64>)]) -> Vec<String> {
    let mut bad = Vec::new();
    for (i, a) in spans.iter().enumerate() {
        for b in &spans[i + 1..] {
            let conflict = a.0 == b.0 || a.0 == "*" || b.0 == "*";
            if conflict && a.1 < b.2 && b.1 < a.2 {
                bad.push(format!("{} and {} overlap", a.0, b.0));
            }
        }
    }
    bad
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_domains_on_one_database_never_run_conflicting_calls_together() {
    let pg = Postgres::start();
    let spans: Spans = Arc::default();
    let d1 = PgDomain::connect(&pg.url, Duration::from_secs(3))
        .await
        .unwrap();
    let d2 = PgDomain::connect(&pg.url, Duration::from_secs(3))
        .await
        .unwrap();
    assert_ne!(d1.owner(), d2.owner());
    let (k1, k2) = (kernel(d1.clone(), &spans), kernel(d2.clone(), &spans));
    let batch = |prefix: &str| {
        let calls = (0..24)
            .map(|i| {
                if i % 8 == 7 {
                    Call::new(format!("{prefix}{i}"), "t.sweep", json!({}))
                } else {
                    let key = ["a", "b", "c"][i % 3];
                    Call::new(format!("{prefix}{i}"), "t.write", json!({"key": key}))
                }
            })
            .collect();
        Batch::new("acme", calls).unwrap()
    };
    let (r1, r2) = tokio::join!(k1.run(batch("p")), k2.run(batch("q")));
    for r in r1.unwrap().results.iter().chain(r2.unwrap().results.iter()) {
        assert_eq!(r.status, Status::Ok, "{r:?}");
    }
    let spans = spans.lock().unwrap().clone();
    assert_eq!(spans.len(), 48);
    assert_eq!(overlaps(&spans), Vec::<String>::new());
    // Every handler saw its admission number, and no two saw the same.
    let mut tokens: Vec<u64> = spans
        .iter()
        .map(|s| s.3.expect("a fencing token"))
        .collect();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 48);
    // Another tenant never waits for this one (it has nothing unfinished to wait for).
    let other = k1
        .run(Batch::new("globex", vec![Call::new("g", "t.sweep", json!({}))]).unwrap())
        .await
        .unwrap();
    assert_eq!(other.results[0].status, Status::Ok);
    d1.close().await;
    d2.close().await;
    // A closed domain admits nothing: the call is refused, naming the database.
    let after = k1
        .run(
            Batch::new(
                "acme",
                vec![Call::new("late", "t.write", json!({"key": "a"}))],
            )
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(after.results[0].status, Status::Error);
    let message = &after.results[0].error.as_ref().expect("why").message;
    assert!(
        message.contains("closed") && message.contains("127.0.0.1"),
        "{message}"
    );
}

/// Threads of one process submitting conflicting calls at once: each call enters the local
/// domain and the database in one order, or two calls would each wait for the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_submitted_from_many_threads_enter_both_domains_in_one_order() {
    let pg = Postgres::start();
    let spans: Spans = Arc::default();
    let d = PgDomain::connect(&pg.url, Duration::from_secs(3))
        .await
        .unwrap();
    let k = kernel(d.clone(), &spans);
    let batches = (0..16).map(|b| {
        let k = k.clone();
        tokio::spawn(async move {
            let calls = (0..6)
                .map(|i| {
                    let key = ["a", "b"][(b + i) % 2];
                    Call::new(format!("b{b}c{i}"), "t.write", json!({"key": key}))
                })
                .collect();
            k.run(Batch::new("acme", calls).unwrap()).await.unwrap()
        })
    });
    let all = futures::future::join_all(batches);
    let done = tokio::time::timeout(Duration::from_secs(120), all)
        .await
        .expect("every batch ends (no call waits for one that waits for it)");
    for r in done {
        for c in r.unwrap().results {
            assert_eq!(c.status, Status::Ok, "{c:?}");
        }
    }
    assert_eq!(overlaps(&spans.lock().unwrap()), Vec::<String>::new());
    k.shared_settled().await;
    d.close().await;
}

fn results(child: Child) -> Value {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Posts a Sluice batch to a gateway's `/v1/run` and reads the JSON answer.
async fn gateway_run(base: &str, batch: &Value) -> Value {
    let response = reqwest::Client::new()
        .post(format!("{base}/v1/run"))
        .header("content-type", "application/json")
        .body(batch.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json::<Value>().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_and_a_gateway_share_the_conflict_domain_as_the_recorder_sees_it() {
    let pg = Postgres::start();
    let server = http_server::start().await;
    let dir = support::temp_dir("scale-three");
    recorder_tools(&dir, &server);
    // The schema, explicitly (a process would make it on first use too); twice is a no-op.
    let first = support::sluice(&["db", "migrate", &pg.url], None, None);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert!(
        first.stdout.contains("from version 0 to 5"),
        "{}",
        first.stdout
    );
    let again = support::sluice(&["db", "migrate", &pg.url], None, None);
    assert!(again.stdout.contains("nothing to do"), "{}", again.stdout);

    let batch = |p: usize| {
        let calls: Vec<Value> = (0..10)
            .map(|i| {
                if i == 5 {
                    json!({"id": format!("p{p}-{i}"), "tool": "rec.sweep", "input": {}})
                } else {
                    let key = format!("k{}", (i + p) % 3);
                    json!({"id": format!("p{p}-{i}"), "tool": "rec.hold", "input": {"key": key}})
                }
            })
            .collect();
        json!({"tenant": "acme", "calls": calls})
    };
    // Three processes, one database for the domain and the provenance: a gateway (the tenant
    // is its default) and two `sluice run`, all started before any batch goes in.
    let rec = dir.join("rec.json");
    let shared = ["--domain", pg.url.as_str(), "--provenance", pg.url.as_str()];
    let gateway = support::gateway::start(
        &[
            &["--tools", rec.to_str().unwrap(), "--tenant", "acme"][..],
            &shared[..],
        ]
        .concat(),
    );
    let children: Vec<Child> = (0..2)
        .map(|p| sluice_run(&dir, &batch(p), &shared))
        .collect();
    let served = gateway_run(&gateway.base, &batch(2)).await;
    let mut outs =
        tokio::task::spawn_blocking(move || children.into_iter().map(results).collect::<Vec<_>>())
            .await
            .unwrap();
    outs.push(served);
    for v in &outs {
        assert_eq!(v["results"].as_array().unwrap().len(), 10, "{v}");
        for r in v["results"].as_array().unwrap() {
            assert_eq!(r["status"], "ok", "{r}");
        }
    }
    // The recorder's own clock: no two requests of one key, nor a sweep and anything, overlap.
    let seen = server.requests();
    assert_eq!(seen.len(), 30);
    for (i, a) in seen.iter().enumerate() {
        for b in &seen[i + 1..] {
            let conflict =
                a.target == b.target || a.target == "/hold/sweep" || b.target == "/hold/sweep";
            assert!(
                !(conflict && a.arrived < b.answered && b.arrived < a.answered),
                "{} and {} overlapped",
                a.target,
                b.target
            );
        }
    }
    // The gateway stops (SIGTERM: it flushes and closes its log), then the provenance of all
    // three verifies as one chain for the tenant: 30 call records and 3 batch records.
    support::gateway::terminate(&gateway);
    let mut gateway = gateway;
    assert!(gateway.child.wait().unwrap().success());
    let all = support::sluice(&["provenance", "verify", &pg.url], None, None);
    assert_eq!(all.code, 0, "{}{}", all.stdout, all.stderr);
    let one = support::sluice(
        &[
            "provenance",
            "verify",
            &pg.url,
            "--tenant",
            "acme",
            "--format",
            "json",
        ],
        None,
        None,
    );
    assert_eq!(one.code, 0, "{}", one.stderr);
    let v: Value = serde_json::from_str(&one.stdout).unwrap();
    assert_eq!(v["valid"], true, "{v}");
    let export = support::sluice(
        &[
            "provenance",
            "export",
            &pg.url,
            "--tenant",
            "acme",
            "--format",
            "prov-json",
        ],
        None,
        None,
    );
    assert_eq!(export.code, 0, "{}", export.stderr);
    let prov: Value = serde_json::from_str(&export.stdout).unwrap();
    let calls: Vec<&String> = prov["activity"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, a)| a["prov:type"] == "sluice:call")
        .map(|(id, _)| id)
        .collect();
    assert_eq!(calls.len(), 30, "{calls:?}");
    for p in 0..3 {
        assert!(
            calls.iter().any(|id| id.ends_with(&format!("p{p}-0"))),
            "process {p}'s calls are in the tenant's chain: {calls:?}"
        );
    }
}

/// Runs `sluice provenance ARGS…` on the database and returns (exit code, stdout, stderr).
fn provenance(pg: &Postgres, args: &[&str]) -> (i32, String, String) {
    let (command, rest) = args.split_first().unwrap();
    let out = support::sluice(
        &[&["provenance", command, pg.url.as_str()][..], rest].concat(),
        None,
        None,
    );
    (out.code, out.stdout, out.stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_provenance_links_processes_and_catches_a_changed_deleted_or_reordered_row() {
    let pg = Postgres::start();
    let server = http_server::start().await;
    let dir = support::temp_dir("scale-provenance");
    recorder_tools(&dir, &server);
    let shared = ["--domain", pg.url.as_str(), "--provenance", pg.url.as_str()];
    let run = |tenant: &str, calls: Value| {
        results(sluice_run(
            &dir,
            &json!({"tenant": tenant, "calls": calls}),
            &shared,
        ))
    };
    // One process writes rec:x; another, later, reads it: the read's lineage is the write.
    run(
        "acme",
        json!([{"id": "w", "tool": "rec.hold", "input": {"key": "x"}}]),
    );
    run(
        "acme",
        json!([{"id": "r", "tool": "rec.read", "input": {"key": "x"}}]),
    );
    let (code, out, err) = provenance(&pg, &["why", "--tenant", "acme", "--call", "r"]);
    assert_eq!(code, 0, "{err}");
    let why: Value = serde_json::from_str(&out).unwrap();
    let edges = why[0]["edges"].to_string();
    assert!(
        out.contains("\"from\": \"w\""),
        "the read in one process links to the write of another: {edges} in {out}"
    );
    let (code, out, err) = provenance(&pg, &["lineage", "--tenant", "acme", "--resource", "rec:x"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"w\"") && out.contains("\"r\""), "{out}");
    // Another tenant's chain is its own: the question about `r` has no answer there.
    let (code, _, _) = provenance(&pg, &["why", "--tenant", "globex", "--call", "r"]);
    assert_ne!(code, 0);

    // A signed checkpoint of the tenant's chain verifies while the chain is untouched.
    let key = dir.join("ops.key");
    let keygen = support::sluice(
        &[
            "provenance",
            "keygen",
            "--name",
            "ops",
            "--out",
            key.to_str().unwrap(),
        ],
        None,
        None,
    );
    assert_eq!(keygen.code, 0, "{}", keygen.stderr);
    let (code, signed, err) = provenance(
        &pg,
        &[
            "checkpoint",
            "--tenant",
            "acme",
            "--key",
            key.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let checkpoint = dir.join("acme.checkpoint");
    std::fs::write(&checkpoint, &signed).unwrap();
    let vkey = keygen.stdout.trim().to_owned();
    let checked = [
        "verify",
        "--tenant",
        "acme",
        "--checkpoint",
        checkpoint.to_str().unwrap(),
        "--verifier",
        vkey.as_str(),
    ];
    let (code, out, err) = provenance(&pg, &checked);
    assert_eq!(code, 0, "{out}{err}");

    // Three more tenants, three calls each: one row of each is tampered with below.
    for t in ["changed", "deleted", "reordered"] {
        run(
            t,
            json!([{"id": "a", "tool": "rec.hold", "input": {"key": "a"}},
                   {"id": "b", "tool": "rec.hold", "input": {"key": "b"}},
                   {"id": "c", "tool": "rec.hold", "input": {"key": "c"}}]),
        );
    }
    let (code, out, err) = provenance(&pg, &["verify"]);
    assert_eq!(code, 0, "{out}{err}");
    // The table refuses a change, a deletion and a truncation from anyone who keeps its triggers.
    for sql in [
        "UPDATE sluice_provenance SET line = line WHERE tenant = 'changed'",
        "DELETE FROM sluice_provenance WHERE tenant = 'deleted'",
        "TRUNCATE sluice_provenance",
    ] {
        let refused = pg.try_sql(sql).expect_err(sql);
        assert!(refused.contains("append-only"), "{sql}: {refused}");
    }
    // Someone who bypasses them (a superuser in replica mode) is caught by verify.
    let bypass = "SET session_replication_role = replica;";
    pg.sql(&format!(
        "{bypass} UPDATE sluice_provenance SET line = replace(line, '\"a\"', '\"z\"') \
         WHERE tenant = 'changed' AND position('\"a\"' in line) > 0"
    ));
    pg.sql(&format!(
        "{bypass} DELETE FROM sluice_provenance WHERE tenant = 'deleted' AND seq = 2"
    ));
    pg.sql(&format!(
        "{bypass} UPDATE sluice_provenance SET seq = 1000 WHERE tenant = 'reordered' AND seq = 2;
         UPDATE sluice_provenance SET seq = 2 WHERE tenant = 'reordered' AND seq = 3;
         UPDATE sluice_provenance SET seq = 3 WHERE tenant = 'reordered' AND seq = 1000"
    ));
    for t in ["changed", "deleted", "reordered"] {
        let (code, out, err) = provenance(&pg, &["verify", "--tenant", t]);
        assert_eq!(code, 1, "{t}: {out}{err}");
        assert!(
            out.contains(&format!("`{t}`")) && out.contains("record "),
            "{t}: the report names the tenant's chain: {out}{err}"
        );
    }
    // The whole database does not verify, and says which chains broke; acme's still does,
    // against its checkpoint too.
    let (code, out, err) = provenance(&pg, &["verify"]);
    assert_eq!(code, 1, "{out}{err}");
    for t in ["changed", "deleted", "reordered"] {
        assert!(format!("{out}{err}").contains(t), "{t}: {out}{err}");
    }
    let (code, out, err) = provenance(&pg, &checked);
    assert_eq!(code, 0, "{out}{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_process_stops_blocking_others_when_its_lease_runs_out() {
    let pg = Postgres::start();
    let server = http_server::start().await;
    let dir = support::temp_dir("scale-kill");
    recorder_tools(&dir, &server);
    let lease = ["--domain", pg.url.as_str(), "--lease", "1"];
    // A holds rec:x for a minute; B's write of rec:x waits for it.
    let mut a = sluice_run(
        &dir,
        &json!({"tenant": "acme", "calls": [{"id": "a", "tool": "rec.wait",
                                            "input": {"key": "x", "ms": 60000}}]}),
        &lease,
    );
    while server.requests().is_empty() && server.connection_count() == 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let b = sluice_run(
        &dir,
        &json!({"tenant": "acme", "calls": [{"id": "b", "tool": "rec.hold", "input": {"key": "x"}}]}),
        &lease,
    );
    // A dies in the middle of its write (SIGKILL); B runs once A's lease is out.
    let killed = Instant::now();
    a.kill().unwrap();
    a.wait().unwrap();
    let v = tokio::task::spawn_blocking(move || results(b))
        .await
        .unwrap();
    assert_eq!(v["results"][0]["status"], "ok", "{v}");
    // B's write reached the recorder while A's minute-long request was still unanswered: B was
    // released by A's lease, not by A's write ending.
    let seen = server.requests();
    let hold = seen
        .iter()
        .find(|r| r.target == "/hold/x")
        .expect("B's write");
    assert!(hold.arrived > killed, "B did not wait for A while A lived");
    assert!(
        !seen.iter().any(|r| r.target.starts_with("/slow/")),
        "{seen:?}"
    );
}

#[test]
fn without_its_database_a_process_admits_nothing() {
    let dir = support::temp_dir("scale-down");
    let batch = dir.join("b.json");
    std::fs::write(
        &batch,
        json!({"calls": [{"id": "e", "tool": "sluice.echo", "input": {"x": 1}}]}).to_string(),
    )
    .unwrap();
    let url = "postgres://sluice:pw@127.0.0.1:1/nowhere";
    let run = support::sluice(
        &["run", "--batch", batch.to_str().unwrap(), "--domain", url],
        None,
        None,
    );
    assert_eq!(run.code, 2, "{}", run.stdout);
    assert!(
        run.stderr.contains("postgres://sluice@127.0.0.1:1/nowhere"),
        "{}",
        run.stderr
    );
    assert!(
        !run.stderr.contains("pw"),
        "the password stays out: {}",
        run.stderr
    );
    let migrate = support::sluice(&["db", "migrate", url], None, None);
    assert_eq!(migrate.code, 2);
    // Nor does it run calls whose records it could not keep, and it says where.
    let logged = support::sluice(
        &[
            "run",
            "--batch",
            batch.to_str().unwrap(),
            "--provenance",
            url,
        ],
        None,
        None,
    );
    assert_eq!(logged.code, 2, "{}", logged.stdout);
    assert!(
        logged.stderr.contains("--provenance")
            && logged
                .stderr
                .contains("postgres://sluice@127.0.0.1:1/nowhere")
            && !logged.stderr.contains("pw"),
        "{}",
        logged.stderr
    );
    assert!(logged.stdout.is_empty(), "nothing ran: {}", logged.stdout);
    // Checkpoints every N records are written beside a log file; a database chain is signed
    // with `provenance checkpoint`, which the refusal names.
    let every = support::sluice(
        &[
            "run",
            "--batch",
            batch.to_str().unwrap(),
            "--provenance",
            url,
            "--checkpoint-every",
            "5",
            "--key",
            dir.join("absent.key").to_str().unwrap(),
        ],
        None,
        None,
    );
    assert_eq!(every.code, 2, "{}", every.stdout);
    assert!(
        every.stderr.contains("--checkpoint-every")
            && every
                .stderr
                .contains("sluice provenance checkpoint postgres://"),
        "{}",
        every.stderr
    );
    // Reading an unreachable database's chain is a failure to read (2), not a broken chain (1).
    let verify = support::sluice(
        &["provenance", "verify", url, "--tenant", "acme"],
        None,
        None,
    );
    assert_eq!(verify.code, 2, "{}{}", verify.stdout, verify.stderr);
    assert!(
        verify.stderr.contains("127.0.0.1:1") && !verify.stderr.contains("pw"),
        "{}",
        verify.stderr
    );
}
