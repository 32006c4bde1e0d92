//! The kernel's embedding API: each behaviour of the dispatch pipeline and scheduler that an
//! agent loop relies on, through the public API.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use sluice_kernel::authorize::{
    ApprovalOutcome, ApprovalRequest, ApproveAll, AuthRequest, Authorization, DecidedBy, Decision,
};
use sluice_kernel::provenance::Record;
use sluice_kernel::run::{Kernel, OnFailure};
use sluice_kernel::transport::{handler, ToolContext, ToolError};
use sluice_kernel::{Batch, Call, Status};
use support::{tool, tool_with, writer};

fn call(id: &str, tool: &str, input: Value) -> Call {
    Call::new(id, tool, input)
}

#[tokio::test]
async fn results_come_back_in_submission_order_with_times() {
    let k = Kernel::builder().tool(writer("t.w")).build().unwrap();
    let b = Batch::new(
        "t",
        vec![
            call("slow", "t.w", json!({"key": "a", "ms": 20})),
            call("fast", "t.w", json!({"key": "b"})),
        ],
    )
    .unwrap();
    let r = k.run(b).await.unwrap();
    assert_eq!(
        r.results.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["slow", "fast"]
    );
    assert!(r
        .results
        .iter()
        .all(|r| r.started.is_some() && r.ended.is_some()));
    assert_eq!(
        r.makespan,
        r.results.iter().filter_map(|r| r.ended).max().unwrap()
    );
}

#[tokio::test]
async fn continue_runs_dependents_and_skip_dependents_skips_them_transitively() {
    for (mode, expect) in [
        (
            OnFailure::Continue,
            [Status::Error, Status::Ok, Status::Ok, Status::Ok],
        ),
        (
            OnFailure::SkipDependents,
            [Status::Error, Status::Skipped, Status::Skipped, Status::Ok],
        ),
    ] {
        let k = Kernel::builder()
            .tool(writer("t.w"))
            .on_failure(mode)
            .build()
            .unwrap();
        let b = Batch::new(
            "t",
            vec![
                call("a", "t.w", json!({"key": "1", "fail": true})),
                call("b", "t.w", json!({"key": "1"})), // depends on a
                call("c", "t.w", json!({"key": ["1", "2"]})), // depends on b, so on a
                call("d", "t.w", json!({"key": "3"})), // independent
            ],
        )
        .unwrap();
        let r = k.run(b).await.unwrap();
        let statuses: Vec<Status> = r.results.iter().map(|r| r.status).collect();
        assert_eq!(statuses, expect, "{mode:?}");
        if mode == OnFailure::SkipDependents {
            let e = r.results[2].error.as_ref().unwrap();
            assert_eq!(e.code, "skipped");
            assert!(
                e.message.contains("`b`") || e.message.contains("`a`"),
                "{}",
                e.message
            );
        }
    }
}

fn deny_writes_to(
    resource: &'static str,
) -> impl Fn(&AuthRequest<'_>) -> Authorization + Send + Sync {
    move |req: &AuthRequest<'_>| {
        if req
            .accesses
            .iter()
            .any(|a| a.resource.to_text() == resource)
        {
            Authorization::new(Decision::Deny, DecidedBy::rule("no-x1"))
        } else if req.call_id.starts_with("ask") {
            Authorization::new(Decision::Ask, DecidedBy::rule("ask-rule"))
        } else {
            Authorization::new(Decision::Allow, DecidedBy::Default)
        }
    }
}

#[tokio::test]
async fn a_denied_or_rejected_call_does_not_run_and_its_dependents_do() {
    let ran = Arc::new(AtomicUsize::new(0));
    let r2 = ran.clone();
    let counted = tool(
        "t.c",
        json!([{"kind": "writes", "resource": "x:{key}"}]),
        true,
        handler(move |_c: ToolContext, _i: Value| {
            let r = r2.clone();
            async move {
                r.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>(json!({}))
            }
        }),
    );
    let k = Kernel::builder()
        .tool(counted)
        .authorizer(deny_writes_to("x:1"))
        .on_failure(OnFailure::SkipDependents)
        .build()
        .unwrap();
    let b = Batch::new(
        "t",
        vec![
            call("denied", "t.c", json!({"key": "1"})),
            call("ask-me", "t.c", json!({"key": "2"})),
            call("after-ask", "t.c", json!({"key": "2"})),
        ],
    )
    .unwrap();
    let r = k.run(b).await.unwrap();
    assert_eq!(r.results[0].status, Status::Denied);
    let e = r.results[0].error.as_ref().unwrap();
    assert_eq!(e.code, "denied");
    assert!(e.message.contains("no-x1"), "{}", e.message);
    assert_eq!(r.results[0].started, None);
    assert_eq!(r.results[1].status, Status::Rejected);
    assert!(r.results[1]
        .error
        .as_ref()
        .unwrap()
        .message
        .contains("no-approver"));
    assert_eq!(
        r.results[2].status,
        Status::Ok,
        "a rejected call changes nothing: its dependent runs"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

type BoxedApprover = Box<
    dyn Fn(
            ApprovalRequest,
        )
            -> futures::future::BoxFuture<'static, Result<ApprovalOutcome, sluice_kernel::Error>>
        + Send
        + Sync,
>;

#[tokio::test]
async fn approvals_run_the_call_and_failures_of_the_approver_reject_it() {
    let mk = |approver: BoxedApprover| {
        Kernel::builder()
            .tool(writer("t.w"))
            .authorizer(deny_writes_to("none"))
            .approver(move |r: ApprovalRequest| approver(r))
            .approval_timeout(Duration::from_millis(50))
            .build()
            .unwrap()
    };
    let cases: Vec<(BoxedApprover, Status, &str)> = vec![
        (
            Box::new(|r: ApprovalRequest| {
                Box::pin(async move {
                    assert_eq!(r.authorization.by, DecidedBy::rule("ask-rule"));
                    assert_eq!(r.accesses[0].resource.to_text(), "x:k");
                    Ok(ApprovalOutcome::Approved { by: "alice".into() })
                })
            }),
            Status::Ok,
            "alice",
        ),
        (
            Box::new(|_r| {
                Box::pin(async {
                    Err(sluice_kernel::Error::ApproverFailed {
                        why: "the pager is down".to_string(),
                    })
                })
            }),
            Status::Rejected,
            "approver-error",
        ),
        (
            Box::new(|_r| Box::pin(async { std::future::pending().await })),
            Status::Rejected,
            "approval-timeout",
        ),
        (
            Box::new(|_r| {
                Box::pin(async {
                    Ok(ApprovalOutcome::Rejected {
                        by: "bob".into(),
                        reason: "no".into(),
                    })
                })
            }),
            Status::Rejected,
            "bob",
        ),
    ];
    for (approver, status, by) in cases {
        let k = mk(approver);
        let r = k
            .run(Batch::new("t", vec![call("ask-1", "t.w", json!({"key": "k"}))]).unwrap())
            .await
            .unwrap();
        assert_eq!(r.results[0].status, status, "{by}");
        assert_eq!(r.results[0].approver.as_deref(), Some(by));
    }
}

#[tokio::test]
async fn concurrent_first_uses_of_a_tool_ask_once_and_the_approval_is_remembered() {
    struct FirstUse(Mutex<Vec<(String, String)>>);
    impl sluice_kernel::authorize::Authorizer for FirstUse {
        fn authorize(&self, req: &AuthRequest<'_>) -> Authorization {
            let seen = self
                .0
                .lock()
                .unwrap()
                .contains(&(req.tenant.into(), req.tool.id.to_string()));
            if seen {
                Authorization::new(Decision::Allow, DecidedBy::Default)
            } else {
                let mut a = Authorization::new(Decision::Ask, DecidedBy::mode("ask_on_first_use"));
                a.first_use = true;
                a
            }
        }
        fn remember_approval(&self, tenant: &str, tool: &str) {
            self.0.lock().unwrap().push((tenant.into(), tool.into()));
        }
    }
    let asks = Arc::new(AtomicUsize::new(0));
    let a2 = asks.clone();
    let k = Kernel::builder()
        .tool(writer("t.w"))
        .authorizer(FirstUse(Mutex::new(Vec::new())))
        .approver(move |_r: ApprovalRequest| {
            let a = a2.clone();
            async move {
                a.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok(ApprovalOutcome::Approved { by: "alice".into() })
            }
        })
        .build()
        .unwrap();
    let calls = (0..5)
        .map(|i| call(&format!("c{i}"), "t.w", json!({"key": i})))
        .collect();
    let r = k.run(Batch::new("t", calls).unwrap()).await.unwrap();
    assert!(r.results.iter().all(|r| r.status == Status::Ok));
    assert_eq!(
        asks.load(Ordering::SeqCst),
        1,
        "concurrent first uses ask once"
    );
    let r = k
        .run(Batch::new("t", vec![call("again", "t.w", json!({"key": 9}))]).unwrap())
        .await
        .unwrap();
    assert_eq!(r.results[0].status, Status::Ok);
    assert_eq!(asks.load(Ordering::SeqCst), 1, "the approval is remembered");
}

#[tokio::test]
async fn the_concurrency_cap_holds_and_ready_calls_start_in_submission_order() {
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let order = Arc::new(Mutex::new(Vec::new()));
    let (r2, p2, o2) = (running.clone(), peak.clone(), order.clone());
    let t = tool(
        "t.n",
        json!([]),
        false,
        handler(move |ctx: ToolContext, _i: Value| {
            let (r, p, o) = (r2.clone(), p2.clone(), o2.clone());
            async move {
                o.lock().unwrap().push(ctx.call_id().to_owned());
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(3)).await;
                r.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, ToolError>(json!({}))
            }
        }),
    );
    let k = Kernel::builder()
        .tool(t)
        .max_concurrency(2)
        .build()
        .unwrap();
    let calls = (0..8)
        .map(|i| call(&format!("c{i}"), "t.n", json!({})))
        .collect();
    let r = k.run(Batch::new("t", calls).unwrap()).await.unwrap();
    assert!(r.results.iter().all(|r| r.status == Status::Ok));
    assert!(peak.load(Ordering::SeqCst) <= 2);
    let started = order.lock().unwrap().clone();
    assert_eq!(started, (0..8).map(|i| format!("c{i}")).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_per_tool_cap_lets_other_tools_pass() {
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (r2, p2) = (running.clone(), peak.clone());
    let capped = tool(
        "t.capped",
        json!([]),
        false,
        handler(move |_c: ToolContext, _i: Value| {
            let (r, p) = (r2.clone(), p2.clone());
            async move {
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(3)).await;
                r.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, ToolError>(json!({}))
            }
        }),
    );
    let k = Kernel::builder()
        .tool(capped)
        .tool(writer("t.w"))
        .tool_concurrency("t.capped", 1)
        .build()
        .unwrap();
    let mut calls: Vec<Call> = (0..4)
        .map(|i| call(&format!("c{i}"), "t.capped", json!({})))
        .collect();
    calls.push(call("other", "t.w", json!({"key": "z"})));
    let r = k.run(Batch::new("t", calls).unwrap()).await.unwrap();
    assert!(r.results.iter().all(|r| r.status == Status::Ok));
    assert_eq!(peak.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn deadlines_panics_and_bad_outputs_fail_only_their_call() {
    let sleepy = tool_with(
        json!({"id": "t.sleepy", "mutating": false, "effects": [],
        "limits": {"memMB": 16, "cpuMs": 20}}),
        handler(|_c: ToolContext, _i: Value| async move {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, ToolError>(json!({}))
        }),
    );
    let panicky = tool(
        "t.panic",
        json!([]),
        false,
        handler(|_c: ToolContext, _i: Value| async move {
            if true {
                panic!("the handler broke");
            }
            Ok::<_, ToolError>(json!({}))
        }),
    );
    let liar = tool_with(
        json!({"id": "t.liar", "mutating": false, "effects": [],
        "output": {"type": "object", "required": ["n"]}}),
        handler(|_c: ToolContext, _i: Value| async move { Ok::<_, ToolError>(json!({"m": 1})) }),
    );
    let k = Kernel::builder()
        .tool(sleepy)
        .tool(panicky)
        .tool(liar)
        .tool(writer("t.w"))
        .build()
        .unwrap();
    let r = k
        .run(
            Batch::new(
                "t",
                vec![
                    call("slow", "t.sleepy", json!({})),
                    call("boom", "t.panic", json!({})),
                    call("lie", "t.liar", json!({})),
                    call("fine", "t.w", json!({"key": "a"})),
                ],
            )
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(r.results[0].status, Status::Timeout);
    assert!(r.results[0]
        .error
        .as_ref()
        .unwrap()
        .message
        .contains("20 ms"));
    assert_eq!(r.results[1].status, Status::Error);
    assert_eq!(r.results[1].error.as_ref().unwrap().code, "panic");
    assert!(r.results[1]
        .error
        .as_ref()
        .unwrap()
        .message
        .contains("the handler broke"));
    assert_eq!(r.results[2].error.as_ref().unwrap().code, "invalid-output");
    assert!(r.results[2]
        .error
        .as_ref()
        .unwrap()
        .message
        .contains("\"n\""));
    assert_eq!(r.results[3].status, Status::Ok);
}

#[tokio::test]
async fn needs_are_checked_before_the_handler_and_isolation_confines_it() {
    let t = ctx_tool();
    let secrets =
        |_t: &str, name: &str, _e: Option<&str>| (name == "API_KEY").then(|| "s3cret".to_string());
    let full = Kernel::builder()
        .tool(t)
        .need("db", Db("main"))
        .env("MODE", "fast")
        .env("HOME", "/root")
        .secrets(secrets)
        .grant_capability("net")
        .build()
        .unwrap();
    let r = full
        .run(Batch::new("t", vec![call("c", "t.ctx", json!({}))]).unwrap())
        .await
        .unwrap();
    assert_eq!(r.results[0].status, Status::Ok, "{:?}", r.results[0].error);
    let out = r.results[0].output.as_ref().unwrap();
    assert_eq!(out["db"], "main");
    assert_eq!(out["region"], "eu");
    assert_eq!(out["mode"], "fast");
    assert!(out["undeclared"]
        .as_str()
        .unwrap()
        .contains("did not declare the secret `OTHER`"));

    // The same tool without its capability, or without its need slot: it fails before the
    // handler runs.
    let lacking = Kernel::builder()
        .tool(ctx_tool())
        .need("db", Db("main"))
        .env("MODE", "fast")
        .secrets(secrets)
        .build()
        .unwrap();
    let r = lacking
        .run(Batch::new("t", vec![call("c", "t.ctx", json!({}))]).unwrap())
        .await
        .unwrap();
    assert_eq!(r.results[0].error.as_ref().unwrap().code, "missing-need");
    assert!(r.results[0]
        .error
        .as_ref()
        .unwrap()
        .message
        .contains("capability `net`"));
    let no_db = Kernel::builder()
        .tool(ctx_tool())
        .env("MODE", "fast")
        .secrets(secrets)
        .grant_capability("net")
        .build()
        .unwrap();
    let r = no_db
        .run(Batch::new("t", vec![call("c", "t.ctx", json!({}))]).unwrap())
        .await
        .unwrap();
    assert!(r.results[0]
        .error
        .as_ref()
        .unwrap()
        .message
        .contains("need `db`"));
}

#[derive(Debug)]
struct Db(&'static str);

fn ctx_tool() -> sluice_kernel::transport::Tool {
    tool_with(
        json!({"id": "t.ctx", "mutating": false, "effects": [],
        "sandbox": "context-isolated",
        "needs": [{"name": "db"}, {"name": "cache", "optional": true}],
        "needsSpec": {"env": {"REGION": {"type": "string", "default": "eu"}, "MODE": {"type": "string"}},
                      "secrets": {"API_KEY": {"type": "string"}}, "capabilities": ["net"]}}),
        handler(|ctx: ToolContext, _i: Value| async move {
            let db = ctx
                .need::<Db>("db")
                .map_err(|e| ToolError::new("ctx", e.to_string()))?;
            let undeclared = ctx.resolve_secret("OTHER").unwrap_err().to_string();
            let key = ctx
                .resolve_secret("API_KEY")
                .map_err(|e| ToolError::new("ctx", e.to_string()))?;
            if ctx.env("HOME").is_ok() {
                return Err(ToolError::new("leak", "HOME reached"));
            }
            Ok(
                json!({"db": db.0, "region": ctx.env("REGION").unwrap(), "mode": ctx.env("MODE").unwrap(),
                      "key_len": key.len(), "undeclared": undeclared}),
            )
        }),
    )
}

#[tokio::test]
async fn calls_stream_in_one_at_a_time_and_complete_as_they_finish() {
    // `a` holds until the test lets it go, so `b` finishing first is a matter of order, not speed.
    let gate = Arc::new(tokio::sync::Notify::new());
    let g = gate.clone();
    let held = tool(
        "t.held",
        json!([{"kind": "writes", "resource": "x:{key}"}]),
        true,
        handler(move |_c: ToolContext, _i: Value| {
            let g = g.clone();
            async move {
                g.notified().await;
                Ok::<_, ToolError>(json!({}))
            }
        }),
    );
    let k = Kernel::builder()
        .tool(held)
        .tool(writer("t.w"))
        .build()
        .unwrap();
    let mut h = k.open("t").unwrap();
    h.submit(call("a", "t.held", json!({"key": "1"}))).unwrap();
    // `b` arrives while `a` runs, and does not wait for it.
    h.submit(call("b", "t.w", json!({"key": "2"}))).unwrap();
    let first = h.next_completion().await.unwrap();
    assert_eq!(first.id, "b");
    h.submit(call("c", "t.w", json!({"key": "1"}))).unwrap(); // waits for `a`
    assert!(matches!(
        h.submit(call("c", "t.w", json!({}))),
        Err(sluice_kernel::Error::DuplicateCallId { .. })
    ));
    h.close();
    gate.notify_one();
    let rest: Vec<String> = (&mut h).map(|r| r.id).collect().await;
    assert_eq!(rest, ["a", "c"]);
    let r = h.finish().await;
    assert_eq!(r.results.len(), 3);
    assert!(r.results[2].started.unwrap() >= r.results[0].ended.unwrap());
}

#[tokio::test]
async fn overlapping_batches_of_a_tenant_are_ordered_and_tenants_never_wait_for_each_other() {
    let gate = Arc::new(tokio::sync::Notify::new());
    let g = gate.clone();
    let blocker = tool(
        "t.block",
        json!([{"kind": "writes", "resource": "x:{key}"}]),
        true,
        handler(move |_c: ToolContext, _i: Value| {
            let g = g.clone();
            async move {
                g.notified().await;
                Ok::<_, ToolError>(json!({}))
            }
        }),
    );
    let k = Kernel::builder()
        .tool(blocker)
        .tool(writer("t.w"))
        .build()
        .unwrap();
    let first = k
        .submit(Batch::new("acme", vec![call("hold", "t.block", json!({"key": "k"}))]).unwrap())
        .unwrap();
    // Another tenant touching the same resource is not held back.
    let other = k
        .run(Batch::new("globex", vec![call("w", "t.w", json!({"key": "k"}))]).unwrap())
        .await
        .unwrap();
    assert_eq!(other.results[0].status, Status::Ok);
    // The same tenant's next batch waits for the first batch's conflicting call.
    let mut second = k
        .submit(
            Batch::new(
                "acme",
                vec![
                    call("after", "t.w", json!({"key": "k"})),
                    call("free", "t.w", json!({"key": "other"})),
                ],
            )
            .unwrap(),
        )
        .unwrap();
    let done = second.next_completion().await.unwrap();
    assert_eq!(done.id, "free");
    gate.notify_one();
    let r1 = first.finish().await;
    let r2 = second.finish().await;
    assert!(r2.get("after").unwrap().started.is_some());
    assert_eq!(r2.get("after").unwrap().status, Status::Ok);
    assert_eq!(r1.results[0].status, Status::Ok);
    // Memory is bounded: an idle tenant holds nothing.
    assert_eq!(k.tenant_load("acme"), (0, 0));
}

#[tokio::test]
async fn the_sink_receives_every_call_edge_and_batch() {
    let records = Arc::new(Mutex::new(Vec::new()));
    let r2 = records.clone();
    let k = Kernel::builder()
        .tool(writer("t.w"))
        .authorizer(deny_writes_to("x:denied"))
        .provenance(move |r: Record| r2.lock().unwrap().push(r))
        .build()
        .unwrap();
    let r = k
        .run(
            Batch::new(
                "t",
                vec![
                    call("a", "t.w", json!({"key": "1"})),
                    call("b", "t.w", json!({"key": "1"})),
                    call("c", "t.w", json!({"key": "denied"})),
                    call("d", "no.such.tool", json!({})),
                ],
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let recs = records.lock().unwrap().clone();
    let calls: Vec<_> = recs
        .iter()
        .filter_map(|r| match r {
            Record::Call(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 4);
    let b = calls.iter().find(|c| c.call == "b").unwrap();
    assert_eq!(b.decision.as_deref(), Some("allow"));
    assert_eq!(b.decided_by.as_deref(), Some("default"));
    assert_eq!(b.input_sha256.len(), 64);
    assert!(b.output_sha256.is_some());
    assert_eq!(b.accesses[0].resource, "x:1");
    assert!(b.started_at_ms.unwrap() <= b.ended_at_ms.unwrap());
    let c = calls.iter().find(|c| c.call == "c").unwrap();
    assert_eq!(c.outcome, Status::Denied);
    assert_eq!(c.decided_by.as_deref(), Some("no-x1"));
    assert_eq!(c.started_at_ms, None);
    let d = calls.iter().find(|c| c.call == "d").unwrap();
    assert_eq!(d.error_code.as_deref(), Some("unknown-tool"));
    assert_eq!(d.tool_version, None);
    let edges: Vec<_> = recs
        .iter()
        .filter_map(|r| match r {
            Record::Edge(e) => Some(e),
            _ => None,
        })
        .collect();
    assert_eq!(edges.len(), 1);
    assert_eq!(
        (
            edges[0].from.as_str(),
            edges[0].to.as_str(),
            edges[0].kind.as_str()
        ),
        ("a", "b", "write-after-write")
    );
    assert!(!edges[0].causal);
    let batch = recs
        .iter()
        .find_map(|r| match r {
            Record::Batch(b) => Some(b),
            _ => None,
        })
        .unwrap();
    assert_eq!(batch.calls, ["a", "b", "c", "d"]);
    assert_eq!(batch.batch, r.batch_id);
}

#[tokio::test]
async fn tools_without_a_handler_are_refused_at_build_or_fail_alone() {
    let m = sluice_kernel::model::Manifest::from_value(json!({"id": "t.none", "description": "d",
        "version": "1.0.0", "input": {"type": "object"}, "output": {}, "mutating": false}))
    .unwrap();
    let t = || {
        sluice_kernel::transport::Tool::new(
            m.clone(),
            sluice_kernel::model::ManifestSource::built_in(),
            None,
        )
        .unwrap()
    };
    let err = Kernel::builder().tool(t()).build().unwrap_err();
    assert!(err.to_string().contains("t.none"), "{err}");
    let k = Kernel::builder()
        .tool(t())
        .allow_unrunnable_tools(true)
        .build()
        .unwrap();
    let r = k
        .run(Batch::new("t", vec![call("x", "t.none", json!({}))]).unwrap())
        .await
        .unwrap();
    let err = r.results[0].error.as_ref().unwrap();
    assert_eq!(err.code, "no-handler");
    assert!(err.message.contains("no `mcpEndpoint`"), "{}", err.message);
}

#[tokio::test]
async fn approve_all_approves() {
    let k = Kernel::builder()
        .tool(writer("t.w"))
        .authorizer(deny_writes_to("none"))
        .approver(ApproveAll)
        .build()
        .unwrap();
    let r = k
        .run(Batch::new("t", vec![call("ask-x", "t.w", json!({"key": "q"}))]).unwrap())
        .await
        .unwrap();
    assert_eq!(r.results[0].status, Status::Ok);
    assert_eq!(r.results[0].approver.as_deref(), Some("auto-approve"));
}

#[test]
fn the_kernel_refuses_to_run_outside_a_runtime() {
    let k = Kernel::builder().build().unwrap();
    assert!(matches!(k.open("t"), Err(sluice_kernel::Error::NoRuntime)));
}

#[tokio::test]
async fn cancelling_does_not_wait_for_a_person_who_never_answers() {
    let k = Kernel::builder()
        .tool(writer("t.w"))
        .authorizer(deny_writes_to("none"))
        .approver(|_r: ApprovalRequest| async { std::future::pending().await })
        .build()
        .unwrap();
    let mut handle = k
        .submit(
            Batch::new(
                "t",
                vec![
                    call("ask-forever", "t.w", json!({"key": "k"})),
                    call("free", "t.w", json!({"key": "f"})),
                ],
            )
            .unwrap(),
        )
        .unwrap();
    assert_eq!(handle.next_completion().await.unwrap().id, "free");
    handle.cancel();
    let r = tokio::time::timeout(Duration::from_secs(30), handle.finish())
        .await
        .expect("the batch ends");
    assert_eq!(r.results[0].status, Status::Cancelled);
    assert!(r.results[0]
        .error
        .as_ref()
        .unwrap()
        .message
        .contains("approval"));
}

/// `skip-dependents` with a batch streamed call by call: a dependent submitted after the call it
/// depends on has already failed is skipped too (the failure was forgotten once the failed call
/// had released; under load the CLI's batch hit it).
#[tokio::test]
async fn a_dependent_submitted_after_its_failed_predecessor_finished_is_skipped() {
    let k = Kernel::builder()
        .tool(writer("t.w"))
        .on_failure(OnFailure::SkipDependents)
        .build()
        .unwrap();
    let mut h = k.open("t").unwrap();
    h.submit(call("fails", "t.w", json!({"key": "1", "fail": true})))
        .unwrap();
    let first = h.next_completion().await.unwrap();
    assert_eq!(first.status, Status::Error);
    h.submit(call("after", "t.w", json!({"key": "1"}))).unwrap();
    h.submit(call("elsewhere", "t.w", json!({"key": "2"})))
        .unwrap();
    h.close();
    let r = h.finish().await;
    assert_eq!(r.results[1].status, Status::Skipped, "{:?}", r.results[1]);
    assert!(r.results[1]
        .error
        .as_ref()
        .unwrap()
        .message
        .contains("`fails`"));
    assert_eq!(r.results[2].status, Status::Ok);
}

/// Records what a batch observer is told, as text.
#[derive(Default)]
struct Watch {
    events: Mutex<Vec<String>>,
    panics: bool,
}

impl sluice_kernel::run::CallObserver for Watch {
    fn mark(&self, call: &Call) -> Option<sluice_kernel::run::CallMark> {
        if self.panics {
            panic!("the observer panics on purpose");
        }
        Some(Arc::new(format!("mark of {}", call.id)))
    }

    fn waiting(&self, call: &Call, w: &sluice_kernel::run::Waiting<'_>) {
        let names: Vec<String> = w
            .calls
            .iter()
            .map(|c| {
                let mark = c.mark.as_ref().and_then(|m| m.downcast_ref::<String>());
                format!(
                    "{} ({}) {} {} [{}]",
                    c.call,
                    c.tool.as_deref().unwrap_or("?"),
                    c.kind,
                    c.resource,
                    mark.map(String::as_str).unwrap_or("-")
                )
            })
            .collect();
        let approval = w.approval.map(|a| a.by.to_string());
        self.events.lock().unwrap().push(format!(
            "{} waits for {:?} unnamed {} approval {:?}",
            call.id, names, w.unnamed, approval
        ));
    }

    fn started(&self, call: &Call) {
        if self.panics {
            panic!("the observer panics on purpose");
        }
        self.events
            .lock()
            .unwrap()
            .push(format!("{} started", call.id));
    }
}

#[tokio::test(start_paused = true)]
async fn a_batch_observer_is_told_what_each_call_waits_for_and_when_it_starts() {
    let k = Kernel::builder()
        .tool(writer("t.w"))
        .authorizer(deny_writes_to("none"))
        .build()
        .unwrap();
    // An unobserved batch holds x:a; an observed one holds x:b.
    let mut quiet = k.open("t").unwrap();
    quiet
        .submit(call("q", "t.w", json!({"key": "a", "ms": 60})))
        .unwrap();
    let first = Arc::new(Watch::default());
    let mut seen = k
        .open_with(
            "t",
            sluice_kernel::run::BatchOptions::default().with_observer(first.clone()),
        )
        .unwrap();
    seen.submit(call("s", "t.w", json!({"key": "b", "ms": 50})))
        .unwrap();
    // `ask-1` waits for `s` and for approval (its id starts with `ask`), `u` for the unobserved
    // `q`, `free` for `ask-1`. This batch approves through its own approver, not the kernel's
    // (which rejects: none is configured).
    let watch = Arc::new(Watch::default());
    let approver = |_r: ApprovalRequest| {
        Box::pin(async {
            Ok(ApprovalOutcome::Approved {
                by: "the-session".into(),
            })
        }) as sluice_kernel::authorize::ApprovalFuture
    };
    let options = sluice_kernel::run::BatchOptions::default()
        .with_observer(watch.clone())
        .with_approver(Arc::new(approver));
    let mut h = k.open_with("t", options).unwrap();
    h.submit(call("ask-1", "t.w", json!({"key": "b"}))).unwrap();
    h.submit(call("u", "t.w", json!({"key": "a"}))).unwrap();
    h.submit(call("free", "t.w", json!({"key": "b"}))).unwrap();
    h.close();
    let r = h.finish().await;
    assert!(r.results.iter().all(|r| r.status == Status::Ok), "{r:?}");
    assert_eq!(r.results[0].approver.as_deref(), Some("the-session"));
    let events = watch.events.lock().unwrap().clone();
    assert_eq!(
        events,
        [
            "ask-1 waits for [\"s (t.w) write-after-write x:b [mark of s]\"] unnamed 0 \
             approval Some(\"ask-rule\")",
            "u waits for [] unnamed 1 approval None",
            "free waits for [\"ask-1 (t.w) write-after-write x:b [mark of ask-1]\"] unnamed 0 \
             approval None",
            "ask-1 started",
            "free started",
            "u started",
        ]
    );
    assert_eq!(
        first.events.lock().unwrap().clone(),
        ["s started"],
        "a call that waits for nothing is only told it started"
    );
    quiet.close();
    seen.close();
    assert_eq!(quiet.finish().await.results[0].status, Status::Ok);
    assert_eq!(seen.finish().await.results[0].status, Status::Ok);
}

#[tokio::test]
async fn a_panicking_observer_leaves_its_calls_running_and_ordered() {
    let k = Kernel::builder().tool(writer("t.w")).build().unwrap();
    let watch = Arc::new(Watch {
        panics: true,
        ..Watch::default()
    });
    let options = sluice_kernel::run::BatchOptions::default().with_observer(watch);
    let mut h = k.open_with("t", options).unwrap();
    h.submit(call("a", "t.w", json!({"key": "k", "ms": 5})))
        .unwrap();
    h.submit(call("b", "t.w", json!({"key": "k"}))).unwrap();
    h.close();
    let r = h.finish().await;
    assert!(r.results.iter().all(|r| r.status == Status::Ok), "{r:?}");
    assert!(r.results[1].started >= r.results[0].ended);
    assert_eq!(k.tenant_load("t"), (0, 0));
}

/// A sink that writes down what the kernel asks of it, in order; `flush` fails when told to.
#[derive(Clone, Default)]
struct Journal {
    said: Arc<Mutex<Vec<String>>>,
    flush_fails: bool,
}

impl sluice_kernel::provenance::ProvenanceSink for Journal {
    fn record(&self, group: Vec<Record>) -> sluice_kernel::provenance::RecordFuture {
        self.said
            .lock()
            .unwrap()
            .push(format!("record {}", group.len()));
        Box::pin(async { Ok(()) })
    }

    fn flush(&self) -> sluice_kernel::provenance::RecordFuture {
        self.said.lock().unwrap().push("flush".into());
        let fails = self.flush_fails;
        Box::pin(async move {
            match fails {
                true => Err(sluice_kernel::Error::ProvenanceRefused {
                    why: "the disk is full".into(),
                }),
                false => Ok(()),
            }
        })
    }

    fn close(&self) -> sluice_kernel::provenance::RecordFuture {
        self.said.lock().unwrap().push("close".into());
        Box::pin(async { Ok(()) })
    }
}

/// `Kernel::shutdown` flushes the sink, then closes it, after the calls' records; what the sink
/// could not keep comes back as `ProvenanceUnkept`, naming it.
#[tokio::test]
async fn shutdown_flushes_then_closes_the_provenance_sink() {
    for fails in [false, true] {
        let journal = Journal {
            flush_fails: fails,
            ..Journal::default()
        };
        let k = Kernel::builder()
            .tool(writer("t.w"))
            .provenance(journal.clone())
            .build()
            .unwrap();
        let b = Batch::new("t", vec![call("a", "t.w", json!({"key": "k"}))]).unwrap();
        assert_eq!(k.run(b).await.unwrap().results[0].status, Status::Ok);
        let closed = k.shutdown().await;
        let said = journal.said.lock().unwrap().clone();
        let n = said.len();
        assert!(n >= 3, "{said:?}");
        assert!(
            said[..n - 2].iter().all(|s| s.starts_with("record")),
            "{said:?}"
        );
        assert_eq!(said[n - 2..], ["flush", "close"], "{said:?}");
        match (fails, closed) {
            (false, Ok(())) => {}
            (true, Err(sluice_kernel::Error::ProvenanceUnkept { why })) => {
                assert_eq!(why, "the disk is full");
            }
            (_, other) => panic!("fails={fails}: {other:?}"),
        }
    }
}

/// What an authorizer hides from a tenant, every listing made for that tenant leaves out; the
/// other tenants see it, and a call of it is still authorized as any other.
#[tokio::test]
async fn an_authorizer_hides_tools_from_a_tenants_listings() {
    struct HideWrites;
    impl sluice_kernel::Authorizer for HideWrites {
        fn authorize(&self, _request: &AuthRequest<'_>) -> Authorization {
            Authorization::new(Decision::Allow, DecidedBy::NoPolicy)
        }
        fn hides(&self, tenant: &str, tool: &str) -> bool {
            tenant == "guest" && tool == "t.w"
        }
    }
    use sluice_kernel::adapters::{Api, ExportOptions, ToolNames};
    let k = Kernel::builder()
        .tool(writer("t.w"))
        .tool(writer("t.other"))
        .authorizer(HideWrites)
        .build()
        .unwrap();
    let names = ToolNames::new(k.tools()).unwrap();
    let listed = |tenant: &str, api: Api| -> Vec<String> {
        let options = ExportOptions::default().for_tenant(&k, tenant);
        let out = api.export(k.tools(), &names, &options).definitions;
        out.iter().map(|d| d.to_string()).collect()
    };
    for api in Api::ALL {
        let guest = listed("guest", api).join(" ");
        let owner = listed("owner", api).join(" ");
        assert!(
            !guest.contains("t__w\"") && !guest.contains("\"t.w\""),
            "{api}: {guest}"
        );
        assert!(guest.contains("other"), "{api}: {guest}");
        assert!(
            owner.contains("t__w\"") || owner.contains("\"t.w\""),
            "{api}: {owner}"
        );
    }
    assert!(k.hides("guest", "t.w") && !k.hides("owner", "t.w"));
    let b = Batch::new("guest", vec![call("a", "t.w", json!({"key": "k"}))]).unwrap();
    assert_eq!(k.run(b).await.unwrap().results[0].status, Status::Ok);
}

/// An invalid input's result carries the JSON pointer as a field, and the MCP rendering (the
/// one the gateway and `--format mcp` share) puts it behind the code: `invalid-input (/key): …`.
#[tokio::test]
async fn an_invalid_input_carries_its_pointer_and_the_mcp_text_names_it() {
    let strict = tool_with(
        json!({"id": "t.strict", "effects": [],
               "input": {"type": "object", "properties": {"key": {"type": "string"}}}}),
        handler(|_ctx: ToolContext, _input: Value| async { Ok(json!({"fine": true})) }),
    );
    let k = Kernel::builder().tool(strict).build().unwrap();
    let b = Batch::new(
        "t",
        vec![
            call("bad", "t.strict", json!({"key": 5})),
            call("good", "t.strict", json!({"key": "k"})),
        ],
    )
    .unwrap();
    let r = k.run(b).await.unwrap();
    let error = r.results[0].error.as_ref().unwrap();
    assert_eq!(error.code, "invalid-input");
    assert_eq!(error.pointer.as_deref(), Some("/key"));
    let rendered = sluice_kernel::adapters::mcp::results(&r);
    assert_eq!(rendered[0]["isError"], true);
    let text = rendered[0]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("invalid-input (/key): "), "{text}");
    assert_eq!(rendered[1]["isError"], false);
    assert_eq!(rendered[1]["structuredContent"], json!({"fine": true}));
    assert_eq!(rendered[1]["content"][0]["text"], r#"{"fine":true}"#);
    assert_eq!(rendered[1]["_meta"]["sluice.dev/version"], "1.0.0");
}

/// A tool resolved once (`Kernel::resolve`) and submitted as found (`submit_resolved`) runs as
/// a call submitted by name does: the version the name chose, its accesses ordering it after
/// a conflicting call, its id in the result. A tool another kernel resolved is looked up by
/// the call's own `tool` instead.
#[tokio::test(start_paused = true)]
async fn a_resolved_tool_runs_as_found_and_a_foreign_one_is_looked_up_again() {
    let versioned = |version: &'static str| {
        tool_with(
            json!({"id": "t.v", "version": version,
                   "effects": [{"kind": "writes", "resource": "x:{key}"}], "mutating": true}),
            handler(move |_ctx: ToolContext, input: Value| async move {
                if let Some(ms) = input["ms"].as_u64() {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                Ok(json!({"version": version}))
            }),
        )
    };
    let k = Kernel::builder()
        .tool(versioned("1.0.0"))
        .tool(versioned("2.0.0"))
        .build()
        .unwrap();
    assert!(k.resolve("t.nope").is_none());
    let old = k.resolve("t.v@1.0.0").unwrap();
    assert_eq!(old.tool().manifest().version.as_str(), "1.0.0");

    let mut b = k.open("t").unwrap();
    b.submit(call("first", "t.v", json!({"key": "k", "ms": 30})))
        .unwrap();
    // Its `tool` names no tool: the resolved one is what runs.
    b.submit_resolved(&old, call("second", "ignored", json!({"key": "k"})))
        .unwrap();
    b.close();
    let r = b.finish().await;
    let (first, second) = (&r.results[0], &r.results[1]);
    assert_eq!(second.status, Status::Ok, "{second:?}");
    assert_eq!(second.tool, "t.v");
    assert_eq!(second.version.as_deref(), Some("1.0.0"));
    assert_eq!(second.output, Some(json!({"version": "1.0.0"})));
    assert_eq!(first.output, Some(json!({"version": "2.0.0"})));
    assert!(
        second.started.unwrap() >= first.ended.unwrap(),
        "the resolved call's write waits for the earlier one: {r:?}"
    );

    // Resolved by another kernel: this one looks the call's `tool` up itself.
    let other = Kernel::builder().tool(writer("t.w")).build().unwrap();
    let foreign = other.resolve("t.w").unwrap();
    let mut b = k.open("t").unwrap();
    b.submit_resolved(&foreign, call("named", "t.v", json!({"key": "j"})))
        .unwrap();
    b.submit_resolved(&foreign, call("unknown", "t.w", json!({"key": "j"})))
        .unwrap();
    b.close();
    let r = b.finish().await;
    assert_eq!(r.results[0].output, Some(json!({"version": "2.0.0"})));
    let e = r.results[1].error.as_ref().unwrap();
    assert_eq!(e.code, "unknown-tool", "{r:?}");
}
