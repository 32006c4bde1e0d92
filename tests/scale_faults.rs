//! The shared domain and provenance under real faults (docs/scale.md, "Faults"): against a real
//! PostgreSQL server (tests/support/postgres.rs) that the tests stop, restart, cut off and
//! tamper with, and processes they pause. Each case failed before the change that made it hold.
//!
//! No timing assertions: where a test waits for something to happen (a reconnect, a reap) it
//! polls with a generous bound that only a hang would exceed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice::kernel::run::Kernel;
use sluice::kernel::transport::{handler, ToolContext};
use sluice::kernel::{Batch, Call, CallResult, Status};
use sluice::postgres::{PgDomain, PgOptions, PgProvenance};
use sluice::provenance::Durability;
use support::http_server;
use support::postgres::Postgres;
use support::scale::{recorder_tools, sluice_run};

/// What the handlers saw: (call id, key, start, end).
type Spans = Arc<Mutex<Vec<(String, String, Instant, Instant)>>>;

/// Gates that `t.held` calls wait on, by key: a call holds its key until the test opens it.
type Gates = Arc<Mutex<Vec<(String, Arc<tokio::sync::Semaphore>)>>>;

fn gate(gates: &Gates, key: &str) -> Arc<tokio::sync::Semaphore> {
    let mut g = gates.lock().unwrap();
    if let Some((_, s)) = g.iter().find(|(k, _)| k == key) {
        return s.clone();
    }
    let s = Arc::new(tokio::sync::Semaphore::new(0));
    g.push((key.to_owned(), s.clone()));
    s
}

/// `t.write` writes `x:{key}` (3 ms), `t.held` writes `x:{key}` until its key's gate opens;
/// both record their spans.
fn kernel(domain: Arc<PgDomain>, spans: &Spans, gates: &Gates) -> Kernel {
    let tool = |id: &str, held: bool| {
        let (spans, gates) = (spans.clone(), gates.clone());
        support::tool(
            id,
            json!([{"kind": "writes", "resource": "x:{key}"}]),
            true,
            handler(move |ctx: ToolContext, input: Value| {
                let (spans, gates) = (spans.clone(), gates.clone());
                async move {
                    let start = Instant::now();
                    let key = input["key"].as_str().unwrap_or_default().to_owned();
                    if held {
                        let g = gate(&gates, &key);
                        let _ = g.acquire().await.map(|p| p.forget());
                    } else {
                        tokio::time::sleep(Duration::from_millis(3)).await;
                    }
                    spans.lock().unwrap().push((
                        ctx.call_id().to_owned(),
                        key,
                        start,
                        Instant::now(),
                    ));
                    Ok(json!({}))
                }
            }),
        )
    };
    Kernel::builder()
        .tool(tool("t.write", false))
        .tool(tool("t.held", true))
        .shared_domain(domain)
        .build()
        .unwrap()
}

fn write(id: &str, key: &str) -> Call {
    Call::new(id, "t.write", json!({"key": key}))
}

/// Runs one batch of `acme`, failing the test (not hanging it) if it takes over a minute.
async fn run(k: &Kernel, calls: Vec<Call>) -> Vec<CallResult> {
    tokio::time::timeout(
        Duration::from_secs(60),
        k.run(Batch::new("acme", calls).unwrap()),
    )
    .await
    .expect("the batch ended (a wedged domain never ends it)")
    .unwrap()
    .results
}

/// Polls `cond` every 50 ms for up to a minute; panics naming `what` if it never holds.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn code(r: &CallResult) -> &str {
    r.error.as_ref().map(|e| e.code.as_str()).unwrap_or("")
}

/// A call's state in `sluice_calls` (empty until a process has migrated the schema and admitted
/// it).
fn call_state(pg: &Postgres, call: &str) -> String {
    pg.try_sql(&format!(
        "SELECT state FROM sluice_calls WHERE call = '{call}'"
    ))
    .unwrap_or_default()
    .trim()
    .to_owned()
}

fn admitted(pg: &Postgres) -> String {
    pg.sql("SELECT count(*) FROM sluice_calls WHERE state = 'admitted'")
        .trim()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_id_of_any_size_releases_and_a_nul_fails_alone() {
    let pg = Postgres::start();
    let (spans, gates) = (Spans::default(), Gates::default());
    let d = PgDomain::connect(&pg.url, Duration::from_secs(3))
        .await
        .unwrap();
    let k = kernel(d.clone(), &spans, &gates);
    // A release used to announce the call id: at 8,000 bytes PostgreSQL refused the
    // notification, the release rolled back, and the next write of the key waited forever.
    let long = "L".repeat(9000);
    let r = run(&k, vec![write(&long, "a"), write("next", "a")]).await;
    assert!(r.iter().all(|r| r.status == Status::Ok), "{r:?}");
    // A NUL fails its own call (`invalid-input`), not the calls admitted with it.
    let r = run(
        &k,
        vec![
            write("before", "b"),
            write("bad\u{0}id", "b"),
            write("beside", "c"),
            Call::new("nul-key", "t.write", json!({"key": "k\u{0}"})),
            write("after", "b"),
        ],
    )
    .await;
    let by = |id: &str| r.iter().find(|r| r.id == id).unwrap();
    for id in ["before", "beside", "after"] {
        assert_eq!(by(id).status, Status::Ok, "{id}: {:?}", by(id));
    }
    for id in ["bad\u{0}id", "nul-key"] {
        assert_eq!(code(by(id)), "invalid-input", "{:?}", by(id));
        assert!(
            by(id).error.as_ref().unwrap().message.contains("NUL"),
            "{:?}",
            by(id)
        );
    }
    eventually("every call released", || admitted(&pg) == "0").await;
    d.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_process_is_judged_by_its_own_lease() {
    let pg = Postgres::start();
    let (spans, gates) = (Spans::default(), Gates::default());
    let long = PgDomain::connect(&pg.url, Duration::from_secs(30))
        .await
        .unwrap();
    let short = PgDomain::connect(&pg.url, PgOptions::MIN_LEASE)
        .await
        .unwrap();
    let (k_long, k_short) = (
        kernel(long.clone(), &spans, &gates),
        kernel(short.clone(), &spans, &gates),
    );
    let held = tokio::spawn({
        let k = k_long.clone();
        async move { run(&k, vec![Call::new("held", "t.held", json!({"key": "k"}))]).await }
    });
    eventually("the held call started", || {
        pg.sql("SELECT count(*) FROM sluice_calls WHERE call = 'held'")
            .trim()
            == "1"
    })
    .await;
    // The short-leased process heartbeats and reaps every 100 ms; the long-leased one every
    // 10 s. Many of the short one's reaps later, the long one's call is still its own.
    let waiting = tokio::spawn({
        let k = k_short.clone();
        async move { run(&k, vec![write("after", "k")]).await }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        pg.sql("SELECT state FROM sluice_calls WHERE call = 'held'")
            .trim(),
        "admitted",
        "a short lease reaped a live process with a long one"
    );
    assert!(
        spans.lock().unwrap().is_empty(),
        "the conflicting call ran while the held one held its key"
    );
    gate(&gates, "k").add_permits(1);
    let (a, b) = (held.await.unwrap(), waiting.await.unwrap());
    assert_eq!(a[0].status, Status::Ok, "{a:?}");
    assert_eq!(b[0].status, Status::Ok, "{b:?}");
    let spans = spans.lock().unwrap().clone();
    let (h, w) = (&spans[0], &spans[1]);
    assert_eq!((h.0.as_str(), w.0.as_str()), ("held", "after"));
    assert!(h.3 <= w.2, "the two calls overlapped");
    long.close().await;
    short.close().await;
}

#[test]
fn a_lease_too_short_to_heartbeat_is_refused_by_the_crate() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let e = rt
        .block_on(PgDomain::connect(
            "postgres://u:pw@127.0.0.1:1/db",
            Duration::from_millis(10),
        ))
        .unwrap_err()
        .to_string();
    assert!(e.contains("too short") && !e.contains("pw"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_domain_survives_cut_connections_and_a_stopped_server() {
    let pg = Postgres::start();
    let (spans, gates) = (Spans::default(), Gates::default());
    let options = PgOptions::new(Duration::from_secs(3)).unavailable_after(Duration::from_secs(1));
    let d = PgDomain::connect_with(&pg.url, options).await.unwrap();
    let k = kernel(d.clone(), &spans, &gates);
    assert_eq!(
        run(&k, vec![write("first", "a")]).await[0].status,
        Status::Ok
    );

    // Every connection cut while one call holds `a` and another waits for it: the domain
    // reconnects, and the waiter (registered before the cut, its wake-up lost with the
    // listener) still runs once the holder ends.
    let held = tokio::spawn({
        let k = k.clone();
        async move {
            run(
                &k,
                vec![
                    Call::new("holder", "t.held", json!({"key": "a"})),
                    write("waiter", "a"),
                ],
            )
            .await
        }
    });
    eventually("both calls admitted", || admitted(&pg) == "2").await;
    assert!(pg.terminate_backends() >= 3);
    eventually("reconnected", || {
        d.health().is_ok()
            && pg
                .sql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND query LIKE 'LISTEN%'")
                .trim()
                == "1"
    })
    .await;
    gate(&gates, "a").add_permits(1);
    let r = held.await.unwrap();
    assert!(r.iter().all(|r| r.status == Status::Ok), "{r:?}");

    // The server stops: calls end `domain-unavailable` (within the bounded wait), and the
    // health check says why, naming the database.
    pg.stop();
    let r = run(&k, vec![write("down", "b")]).await;
    assert_eq!(code(&r[0]), "domain-unavailable", "{r:?}");
    eventually("unhealthy", || d.health().is_err()).await;
    let why = d.health().unwrap_err();
    assert!(
        matches!(&why, sluice_kernel::Error::SharedDomainFailed { why } if why.contains(&format!("127.0.0.1:{}", pg.port))),
        "{why}"
    );

    // It comes back: the same process admits again, no restart.
    pg.start_again();
    eventually("healthy again", || d.health().is_ok()).await;
    let r = run(&k, vec![write("again", "b"), write("again2", "b")]).await;
    assert!(r.iter().all(|r| r.status == Status::Ok), "{r:?}");
    eventually("nothing left admitted", || admitted(&pg) == "0").await;
    d.close().await;
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

fn output(child: Child) -> Value {
    let out = child.wait_with_output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "no results: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_paused_past_its_lease_runs_none_of_the_calls_it_lost() {
    let pg = Postgres::start();
    let server = http_server::start().await;
    let dir = support::temp_dir("faults-pause");
    recorder_tools(&dir, &server);
    let lease = ["--domain", pg.url.as_str(), "--lease", "2"];
    let state = |call: &str| call_state(&pg, call);
    // A: a write of rec:x that holds the recorder 600 ms, then another that waits for it.
    let a = sluice_run(
        &dir,
        &json!({"tenant": "acme", "calls": [
            {"id": "a1", "tool": "rec.wait", "input": {"key": "x", "ms": 600}},
            {"id": "a2", "tool": "rec.hold", "input": {"key": "x"}}]}),
        &lease,
    );
    // Paused once both are admitted (the first ends at the recorder well inside the lease;
    // the second waits).
    eventually("A's calls admitted", || {
        state("a1") == "admitted" && state("a2") == "admitted"
    })
    .await;
    signal(&a, "-STOP");
    // B's long write of rec:x runs once A's lease is out and A's calls are marked lost.
    let b = sluice_run(
        &dir,
        &json!({"tenant": "acme", "calls": [
            {"id": "b1", "tool": "rec.wait", "input": {"key": "x", "ms": 2000}}]}),
        &lease,
    );
    eventually("A's calls marked lost", || state("a2") == "lost").await;
    eventually("B's write admitted", || state("b1") == "admitted").await;
    // A wakes while B holds rec:x: its waiting call must not run.
    signal(&a, "-CONT");
    let (a, b) = tokio::task::spawn_blocking(move || (output(a), output(b)))
        .await
        .unwrap();
    assert_eq!(b["results"][0]["status"], "ok", "{b}");
    let a2 = &a["results"][1];
    assert_eq!(a2["status"], "error", "{a}");
    assert_eq!(a2["error"]["code"], "domain-unavailable", "{a}");
    assert!(
        a2["error"]["message"].as_str().unwrap().contains("lapsed"),
        "{a}"
    );
    // By the recorder's clock, no two writes of rec:x overlapped, and A's second never came.
    let spans: Vec<_> = server.requests();
    assert!(!spans.iter().any(|r| r.target == "/hold/x"), "{spans:?}");
    for (i, p) in spans.iter().enumerate() {
        for q in &spans[i + 1..] {
            assert!(
                p.answered <= q.arrived || q.answered <= p.arrived,
                "{} and {} overlapped",
                p.target,
                q.target
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_reports_its_database_on_healthz_and_recovers() {
    let pg = Postgres::start();
    let g = support::gateway::start(&["--domain", &pg.url, "--db-timeout", "1"]);
    let http = reqwest::Client::new();
    let health = || async {
        let r = http
            .get(format!("{}/healthz", g.base))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    };
    let call = || async {
        let r = http
            .post(format!("{}/v1/run", g.base))
            .header("content-type", "application/json")
            .body(
                json!({"calls": [{"id": "p", "tool": "sluice.kv.incr", "input": {"key": "n"}}]})
                    .to_string(),
            )
            .send()
            .await
            .unwrap();
        r.json::<Value>().await.unwrap()["results"][0].clone()
    };
    assert_eq!(health().await.0, 200);
    assert_eq!(call().await["status"], "ok");
    pg.stop();
    let deadline = Instant::now() + Duration::from_secs(60);
    let (status, body) = loop {
        let (s, b) = health().await;
        if s == 503 || Instant::now() > deadline {
            break (s, b);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("shared conflict domain") && body.contains(&pg.port.to_string()),
        "{body}"
    );
    let r = call().await;
    assert_eq!(r["error"]["code"], "domain-unavailable", "{r}");
    pg.start_again();
    let deadline = Instant::now() + Duration::from_secs(60);
    while health().await.0 != 200 {
        assert!(Instant::now() < deadline, "the gateway never recovered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = call().await;
    assert_eq!(r["status"], "ok", "{r}");
    assert_eq!(r["output"]["value"], 2, "{r}");
}

/// A kernel recording to `log`, with `t.count` (writes `c:n`) counting its runs.
fn counting(log: Arc<PgProvenance>, runs: &Arc<AtomicUsize>) -> Kernel {
    let runs = runs.clone();
    Kernel::builder()
        .tool(support::tool(
            "t.count",
            json!([{"kind": "writes", "resource": "c:{key}"}, {"kind": "reads", "resource": "c:{key}"}]),
            true,
            handler(move |_ctx: ToolContext, _input: Value| {
                let runs = runs.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok(json!({}))
                }
            }),
        ))
        .provenance_arc(log)
        .build()
        .unwrap()
}

async fn count_in(k: &Kernel, tenant: &str, id: &str) -> CallResult {
    let b = Batch::new(tenant, vec![Call::new(id, "t.count", json!({"key": "n"}))]).unwrap();
    tokio::time::timeout(Duration::from_secs(60), k.run(b))
        .await
        .expect("the call ended")
        .unwrap()
        .results
        .remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_call_runs_unrecorded_under_durable_and_recording_resumes() {
    let pg = Postgres::start();
    let runs = Arc::new(AtomicUsize::new(0));
    let log = PgProvenance::connect(&pg.url, Durability::Durable)
        .await
        .unwrap();
    let k = counting(log.clone(), &runs);
    let r = count_in(&k, "acme", "c1").await;
    assert_eq!((r.status, r.recorded), (Status::Ok, Some(true)), "{r:?}");

    // The database stops mid-traffic. A call already past the check may run and report
    // `recorded: false`; from the first failed commit on, none runs.
    pg.stop();
    let mut refused = None;
    for i in 0..20 {
        let before = runs.load(Ordering::SeqCst);
        let r = count_in(&k, "acme", &format!("down{i}")).await;
        if code(&r) == "provenance-unavailable" {
            assert_eq!(runs.load(Ordering::SeqCst), before, "it ran: {r:?}");
            refused = Some(r);
            break;
        }
        assert_eq!(
            r.recorded,
            Some(false),
            "a call reported success silently: {r:?}"
        );
    }
    let refused = refused.expect("calls kept running with nothing recorded");
    assert!(
        refused
            .error
            .as_ref()
            .unwrap()
            .message
            .contains(&pg.port.to_string()),
        "{refused:?}"
    );
    assert!(log.health().is_err());

    // Back: the writer reconnects on its own, and the chain goes on where it was.
    pg.start_again();
    eventually("the log is writable again", || log.health().is_ok()).await;
    let r = count_in(&k, "acme", "c2").await;
    assert_eq!((r.status, r.recorded), (Status::Ok, Some(true)), "{r:?}");
    let r = count_in(&k, "zeta", "z1").await;
    assert_eq!((r.status, r.recorded), (Status::Ok, Some(true)), "{r:?}");
    log.close().await;
    for tenant in ["acme", "zeta"] {
        let v = support::sluice(
            &["provenance", "verify", &pg.url, "--tenant", tenant],
            None,
            None,
        );
        assert_eq!(v.code, 0, "{tenant}: {}{}", v.stdout, v.stderr);
    }

    // acme's chain is damaged (its last row changed behind the triggers' back): a new
    // process refuses acme's records, and after the first failure its calls, but zeta is
    // still recorded.
    pg.sql(
        "ALTER TABLE sluice_provenance DISABLE TRIGGER USER; \
         UPDATE sluice_provenance SET line = replace(line, '\"c2\"', '\"cX\"') \
           WHERE tenant = 'acme' AND seq = (SELECT max(seq) FROM sluice_provenance WHERE tenant = 'acme'); \
         ALTER TABLE sluice_provenance ENABLE TRIGGER USER;",
    );
    let log = PgProvenance::connect(&pg.url, Durability::Durable)
        .await
        .unwrap();
    let k = counting(log.clone(), &runs);
    let first = count_in(&k, "acme", "c3").await;
    assert_eq!(first.recorded, Some(false), "{first:?}");
    let second = count_in(&k, "acme", "c4").await;
    assert_eq!(code(&second), "provenance-unavailable", "{second:?}");
    assert!(
        second.error.as_ref().unwrap().message.contains("damaged"),
        "{second:?}"
    );
    let z = count_in(&k, "zeta", "z2").await;
    assert_eq!((z.status, z.recorded), (Status::Ok, Some(true)), "{z:?}");
    log.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_process_links_to_writers_before_it_without_reading_the_chain() {
    let pg = Postgres::start();
    let dir = support::temp_dir("faults-head");
    let batch = |name: &str, calls: Value| {
        let f = dir.join(format!("{name}.json"));
        std::fs::write(&f, json!({"tenant": "acme", "calls": calls}).to_string()).unwrap();
        f
    };
    let turn = |f: &std::path::Path| {
        let r = support::sluice(
            &[
                "run",
                "--batch",
                f.to_str().unwrap(),
                "--provenance",
                &pg.url,
            ],
            None,
            None,
        );
        assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    };
    let why = |call: &str| {
        let r = support::sluice(
            &[
                "provenance",
                "why",
                &pg.url,
                "--tenant",
                "acme",
                "--call",
                call,
            ],
            None,
            None,
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stdout
    };
    // Turn 1 writes `doc` among 30 other writes; turn 2, another process, reads it.
    let mut calls: Vec<Value> = (0..30)
        .map(|i| json!({"id": format!("w{i}"), "tool": "sluice.kv.put", "input": {"key": format!("k{i}"), "value": i}}))
        .collect();
    calls.push(
        json!({"id": "doc-writer", "tool": "sluice.kv.put", "input": {"key": "doc", "value": 1}}),
    );
    turn(&batch("t1", Value::Array(calls)));
    // The index holds one row per written key, and one saying it is complete.
    assert_eq!(
        pg.sql("SELECT count(*) FROM sluice_last_writers WHERE tenant = 'acme'")
            .trim(),
        "32"
    );
    turn(&batch(
        "t2",
        json!([{"id": "reader", "tool": "sluice.kv.get", "input": {"key": "doc"}}]),
    ));
    assert!(
        why("reader").contains(r#""from": "doc-writer""#),
        "{}",
        why("reader")
    );

    // A chain written before the index existed (no index rows): indexed once, by one full read.
    pg.sql("DELETE FROM sluice_last_writers WHERE tenant = 'acme'");
    turn(&batch(
        "t3",
        json!([{"id": "reader2", "tool": "sluice.kv.get", "input": {"key": "doc"}}]),
    ));
    assert!(
        why("reader2").contains(r#""from": "doc-writer""#),
        "{}",
        why("reader2")
    );
    assert_eq!(
        pg.sql("SELECT count(*) FROM sluice_last_writers WHERE tenant = 'acme'")
            .trim(),
        "32"
    );
    let v = support::sluice(
        &["provenance", "verify", &pg.url, "--tenant", "acme"],
        None,
        None,
    );
    assert_eq!(v.code, 0, "{}{}", v.stdout, v.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_deployments_in_two_schemas_neither_wait_for_nor_wake_each_other() {
    let pg = Postgres::start();
    pg.sql("CREATE SCHEMA team_a; CREATE SCHEMA team_b;");
    let url = |schema: &str| format!("{}?options=-c%20search_path%3D{schema}", pg.url);
    let (spans, gates) = (Spans::default(), Gates::default());
    let da = PgDomain::connect(&url("team_a"), Duration::from_secs(3))
        .await
        .unwrap();
    let db = PgDomain::connect(&url("team_b"), Duration::from_secs(3))
        .await
        .unwrap();
    let (ka, kb) = (
        kernel(da.clone(), &spans, &gates),
        kernel(db.clone(), &spans, &gates),
    );
    // Each schema has its own tables.
    for schema in ["team_a", "team_b"] {
        assert_eq!(
            pg.sql(&format!(
                "SELECT count(*) FROM pg_tables WHERE schemaname = '{schema}' AND tablename = 'sluice_calls'"
            ))
            .trim(),
            "1"
        );
    }
    // team_a holds x:k; team_b's write of the same key, same tenant, runs meanwhile.
    let held = tokio::spawn({
        let k = ka.clone();
        async move { run(&k, vec![Call::new("held", "t.held", json!({"key": "k"}))]).await }
    });
    eventually("team_a's call started", || {
        pg.sql("SELECT count(*) FROM team_a.sluice_calls WHERE state = 'admitted'")
            .trim()
            == "1"
    })
    .await;
    let r = run(&kb, vec![write("other-deployment", "k")]).await;
    assert_eq!(r[0].status, Status::Ok);
    // Their wake-ups go on different channels.
    let listening =
        pg.sql("SELECT count(DISTINCT query) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'");
    assert_eq!(listening.trim(), "2");
    gate(&gates, "k").add_permits(1);
    assert_eq!(held.await.unwrap()[0].status, Status::Ok);
    da.close().await;
    db.close().await;
}

/// Runs `openssl` in `dir`; panics with its error.
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs (Debian's openssl package)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_require_speaks_tls_and_checks_the_server() {
    let pg = Postgres::start();
    let dir = pg.data().to_path_buf();
    // A CA, a server certificate for 127.0.0.1 signed by it, and a CA that signed nothing.
    let subj = |cn: &str| format!("/CN={cn}");
    for ca in ["ca", "other-ca"] {
        openssl(
            &dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.pem"),
                "-subj",
                &subj(ca),
            ],
        );
    }
    openssl(
        &dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            &subj("127.0.0.1"),
        ],
    );
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(
        &dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            "server.crt",
            "-extfile",
            "san.ext",
        ],
    );
    let _ = Command::new("chown")
        .args(["postgres:postgres", "server.key", "server.crt"])
        .current_dir(&dir)
        .status();
    std::fs::set_permissions(
        dir.join("server.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    // One statement each: ALTER SYSTEM does not run in psql's implicit transaction.
    for setting in [
        format!("ssl_cert_file = '{}'", dir.join("server.crt").display()),
        format!("ssl_key_file = '{}'", dir.join("server.key").display()),
        "ssl = on".to_owned(),
    ] {
        pg.sql(&format!("ALTER SYSTEM SET {setting}"));
    }
    pg.sql("SELECT pg_reload_conf()");
    eventually("the server speaks TLS", || {
        pg.sql("SHOW ssl").trim() == "on"
    })
    .await;

    let url = format!(
        "{}?sslmode=require&sslrootcert={}",
        pg.url,
        dir.join("ca.pem").display()
    );
    let d = PgDomain::connect(&url, Duration::from_secs(3))
        .await
        .unwrap();
    let (spans, gates) = (Spans::default(), Gates::default());
    let k = kernel(d.clone(), &spans, &gates);
    assert_eq!(run(&k, vec![write("tls", "a")]).await[0].status, Status::Ok);
    // Its connections are encrypted (psql's own, without sslmode, is not counted).
    let encrypted = pg.sql(
        "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE s.ssl AND a.backend_type = 'client backend'",
    );
    assert!(encrypted.trim().parse::<u32>().unwrap() >= 3, "{encrypted}");
    d.close().await;

    // A server whose certificate the given root did not sign is refused, saying why.
    let wrong = format!(
        "{}?sslmode=require&sslrootcert={}",
        pg.url,
        dir.join("other-ca.pem").display()
    );
    let e = PgDomain::connect(&wrong, Duration::from_secs(3))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.to_lowercase().contains("certificate"), "{e}");
}

/// Issue 41, item 1: a call admitted by a gateway with `--max-concurrency 1` waits for the
/// permit after its shared-domain wait has resolved. The gateway is paused past its lease while
/// the call waits; another process runs a conflicting write; the gateway resumes: the call is
/// fenced at the moment its handler would start, and never reaches the recorder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_waited_for_a_permit_past_its_lease_does_not_start() {
    let pg = Postgres::start();
    let server = http_server::start().await;
    let dir = support::temp_dir("faults-permit");
    recorder_tools(&dir, &server);
    let lease = ["--domain", pg.url.as_str(), "--lease", "2"];
    let state = |call: &str| call_state(&pg, call);
    let tools = dir.join("rec.json");
    let mut args = vec!["--tools", tools.to_str().unwrap(), "--max-concurrency", "1"];
    args.extend(lease);
    let g = support::gateway::start(&args);
    let post = |id: &'static str, key: &'static str, ms: u64| {
        let base = g.base.clone();
        tokio::spawn(async move {
            let r = reqwest::Client::new()
                .post(format!("{base}/v1/run"))
                .header("content-type", "application/json")
                .body(
                    json!({"calls": [{"id": id, "tool": "rec.wait",
                                      "input": {"key": key, "ms": ms}}]})
                    .to_string(),
                )
                .send()
                .await
                .unwrap();
            r.json::<Value>().await.unwrap()["results"][0].clone()
        })
    };
    // a0 takes the one permit and is at the recorder; then a1 (rec:x, no predecessor) is
    // admitted and waits for the permit.
    let a0 = post("a0", "y", 1500);
    eventually("a0 at the recorder", || server.connection_count() == 1).await;
    let a1 = post("a1", "x", 77);
    eventually("a1 admitted", || state("a1") == "admitted").await;
    signal(&g.child, "-STOP");
    let b = sluice_run(
        &dir,
        &json!({"tenant": "default", "calls": [
            {"id": "b1", "tool": "rec.wait", "input": {"key": "x", "ms": 2000}}]}),
        &lease,
    );
    eventually("the gateway's calls marked lost", || state("a1") == "lost").await;
    eventually("B's write admitted", || state("b1") == "admitted").await;
    signal(&g.child, "-CONT");
    let b = tokio::task::spawn_blocking(move || output(b))
        .await
        .unwrap();
    assert_eq!(b["results"][0]["status"], "ok", "{b}");
    let a1 = a1.await.unwrap();
    assert_eq!(a1["error"]["code"], "domain-unavailable", "{a1}");
    assert!(
        a1["error"]["message"].as_str().unwrap().contains("lapsed"),
        "{a1}"
    );
    let _ = a0.await;
    let spans = server.requests();
    assert!(!spans.iter().any(|r| r.target == "/slow/77"), "{spans:?}");
}

/// Issue 41, item 2: a process stopped inside its admission transaction (caught there by the
/// fault-injection pause) holds its tenant's advisory lock and its owner row. The server ends
/// that transaction, so another process's call of the same tenant is admitted, and the reaper
/// still reaps a SIGKILLed process of another tenant, whose successor runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_stopped_inside_its_admission_holds_no_one() {
    let pg = Postgres::start();
    let server = http_server::start().await;
    let dir = support::temp_dir("faults-in-tx");
    recorder_tools(&dir, &server);
    let flags = [
        "--domain",
        pg.url.as_str(),
        "--lease",
        "2",
        "--db-timeout",
        "2",
    ];
    let state = |call: &str| call_state(&pg, call);
    // Migrate first, so that A's first transaction is its admission.
    let migrated = support::sluice(&["db", "migrate", &pg.url], None, None);
    assert_eq!(migrated.code, 0, "{}", migrated.stderr);
    let in_tx = || {
        pg.sql(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE state = 'idle in transaction' AND backend_type = 'client backend'",
        )
        .trim()
        .to_owned()
    };
    let a = support::scale::sluice_run_env(
        &dir,
        &json!({"tenant": "acme", "calls": [
            {"id": "a1", "tool": "rec.wait", "input": {"key": "x", "ms": 10}}]}),
        &flags,
        &[("SLUICE_FAULT_PAUSE_IN_ADMISSION_MS", "600000")],
    );
    eventually("A inside its admission transaction", || in_tx() == "1").await;
    signal(&a, "-STOP");
    // C (another tenant) holds rec:z and dies.
    let mut c = sluice_run(
        &dir,
        &json!({"tenant": "zeta", "calls": [
            {"id": "c1", "tool": "rec.wait", "input": {"key": "z", "ms": 600000}}]}),
        &flags,
    );
    eventually("C's write admitted", || state("c1") == "admitted").await;
    c.kill().unwrap();
    c.wait().unwrap();
    // B: acme again, while A's transaction held acme's lock when it stopped.
    let b = sluice_run(
        &dir,
        &json!({"tenant": "acme", "calls": [
            {"id": "b1", "tool": "rec.wait", "input": {"key": "y", "ms": 10}}]}),
        &flags,
    );
    // D: C's successor, run once the reaper has marked C's call lost.
    let d = sluice_run(
        &dir,
        &json!({"tenant": "zeta", "calls": [
            {"id": "d1", "tool": "rec.wait", "input": {"key": "z", "ms": 10}}]}),
        &flags,
    );
    let (b, d) = tokio::task::spawn_blocking(move || (output(b), output(d)))
        .await
        .unwrap();
    assert_eq!(b["results"][0]["status"], "ok", "{b}");
    assert_eq!(d["results"][0]["status"], "ok", "{d}");
    assert_eq!(state("c1"), "lost");
    // The server ended the stopped process's transaction.
    assert_eq!(in_tx(), "0");
    signal(&a, "-CONT");
    let mut a = a;
    let _ = a.kill();
    let _ = a.wait();
}

/// Issue 41, item 3: a write of a 9,000-character resource keeps its record, and so do the other
/// calls committed with it; a later process links a read of it to that write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_resource_keeps_its_record_and_its_group_too() {
    let pg = Postgres::start();
    let dir = support::temp_dir("faults-long");
    // Random-looking text, so that the server cannot compress it under its index-row limit.
    let long: String = (0u32..141)
        .map(|i| {
            use sha2::Digest;
            hex::encode(sha2::Sha256::digest(i.to_le_bytes()))
        })
        .collect::<String>()[..9000]
        .to_owned();
    let flags = [
        "--domain",
        pg.url.as_str(),
        "--provenance",
        pg.url.as_str(),
        "--durability",
        "durable",
    ];
    let batch = dir.join("long.json");
    std::fs::write(
        &batch,
        json!({"tenant": "acme", "calls": [
            {"id": "w", "tool": "sluice.kv.put", "input": {"key": long, "value": 1}},
            {"id": "s", "tool": "sluice.kv.put", "input": {"key": "short", "value": 2}},
            {"id": "r", "tool": "sluice.kv.get", "input": {"key": "short"}}]})
        .to_string(),
    )
    .unwrap();
    let mut args = vec!["run", "--batch", batch.to_str().unwrap()];
    args.extend(flags);
    let run = support::sluice(&args, None, None);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let v = run.json();
    for r in v["results"].as_array().unwrap() {
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["recorded"], true, "{r}");
    }
    // The digest is the key, the text is kept.
    let kept = pg.sql(&format!(
        "SELECT count(*) FROM sluice_last_writers WHERE tenant = 'acme' AND resource = 'kv:{long}'"
    ));
    assert_eq!(kept.trim(), "1");
    // Another process reads the long key: its read links to that write.
    let later = dir.join("later.json");
    std::fs::write(
        &later,
        json!({"tenant": "acme", "calls": [
            {"id": "g", "tool": "sluice.kv.get", "input": {"key": long}}]})
        .to_string(),
    )
    .unwrap();
    let mut args = vec!["run", "--batch", later.to_str().unwrap()];
    args.extend(flags);
    let run = support::sluice(&args, None, None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let why = support::sluice(
        &[
            "provenance",
            "why",
            &pg.url,
            "--tenant",
            "acme",
            "--call",
            "g",
        ],
        None,
        None,
    );
    assert_eq!(why.code, 0, "{}", why.stderr);
    assert_eq!(why.json()[0]["ancestors"][0]["from"], "w", "{}", why.stdout);
    let verify = support::sluice(
        &["provenance", "verify", &pg.url, "--tenant", "acme"],
        None,
        None,
    );
    assert_eq!(verify.code, 0, "{}", verify.stderr);
}

/// Issue 41, item 4: every backend of a gateway terminated. The provenance writer learns of it
/// from its connection at once (not from the next call's failed commit) and reconnects, so two
/// seconds later the next call is recorded — never run and reported `recorded: false`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_connection_is_found_before_the_next_call() {
    let pg = Postgres::start();
    let g = support::gateway::start(&[
        "--domain",
        &pg.url,
        "--provenance",
        &pg.url,
        "--durability",
        "durable",
    ]);
    let http = reqwest::Client::new();
    let call = |id: &'static str| {
        let http = http.clone();
        let base = g.base.clone();
        async move {
            let r = http
                .post(format!("{base}/v1/run"))
                .header("content-type", "application/json")
                .body(
                    json!({"calls": [{"id": id, "tool": "sluice.kv.incr", "input": {"key": "n"}}]})
                        .to_string(),
                )
                .send()
                .await
                .unwrap();
            r.json::<Value>().await.unwrap()["results"][0].clone()
        }
    };
    let first = call("1").await;
    assert_eq!(first["recorded"], true, "{first}");
    assert!(pg.terminate_backends() >= 4);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let next = call("2").await;
    assert_eq!(next["status"], "ok", "{next}");
    assert_eq!(next["recorded"], true, "{next}");
}
