//! A panic never wedges a tenant, a pending approval is abandoned with its batch, a queued permit
//! never waits forever, and an idle tenant costs nothing — through the embedding API.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sluice_kernel::access::{Normalizers, Pattern};
use sluice_kernel::authorize::{
    ApprovalFuture, ApprovalOutcome, ApprovalRequest, Approver, AuthRequest, Authorization,
    Authorizer, DecidedBy, Decision,
};
use sluice_kernel::run::Kernel;
use sluice_kernel::{Batch, Call, Status};
use support::writer;

fn call(id: &str, key: &str) -> Call {
    Call::new(id, "t.w", json!({"key": key}))
}

fn code(r: &sluice_kernel::CallResult) -> &str {
    r.error.as_ref().map(|e| e.code.as_str()).unwrap_or("")
}

/// A sink that panics on the call records of key `boom`, when handed them or when answering.
struct PanickingSink {
    when_answering: bool,
}

impl sluice_kernel::ProvenanceSink for PanickingSink {
    fn record(
        &self,
        group: Vec<sluice_kernel::provenance::Record>,
    ) -> sluice_kernel::provenance::RecordFuture {
        use sluice_kernel::provenance::Record;
        let boom = group
            .iter()
            .any(|r| matches!(r, Record::Call(c) if c.call.starts_with("boom")));
        if boom && !self.when_answering {
            panic!("the sink panics on purpose");
        }
        Box::pin(async move {
            if boom {
                panic!("the sink panics on purpose, later");
            }
            Ok(())
        })
    }
}

#[tokio::test]
async fn a_panicking_sink_refuses_its_records_and_the_tenant_goes_on() {
    for when_answering in [false, true] {
        let k = Kernel::builder()
            .tool(writer("t.w"))
            .provenance(PanickingSink { when_answering })
            .build()
            .unwrap();
        let r = k
            .run(Batch::new("t", vec![call("a", "k"), call("boom", "k"), call("c", "k")]).unwrap())
            .await
            .unwrap();
        let seen: Vec<_> = r.results.iter().map(|r| (r.status, r.recorded)).collect();
        assert_eq!(
            seen,
            [
                (Status::Ok, Some(true)),
                (Status::Ok, Some(false)),
                (Status::Ok, Some(true))
            ],
            "when answering: {when_answering}"
        );
        let again = k
            .run(Batch::new("t", vec![call("d", "k")]).unwrap())
            .await
            .unwrap();
        assert_eq!(again.results[0].status, Status::Ok);
        assert_eq!(k.tenants_held(), 0);
    }
}

#[tokio::test]
async fn a_panicking_authorizer_fails_its_call_internal_and_the_tenant_goes_on() {
    let authorizer = |req: &AuthRequest<'_>| {
        if req.input["key"] == "boom" {
            panic!("the authorizer panics on purpose");
        }
        Authorization::new(Decision::Allow, DecidedBy::rule("ok"))
    };
    let k = Kernel::builder()
        .tool(writer("t.w"))
        .authorizer(authorizer)
        .build()
        .unwrap();
    let r = k
        .run(Batch::new("t", vec![call("a", "k"), call("b", "boom"), call("c", "k")]).unwrap())
        .await
        .unwrap();
    let statuses: Vec<_> = r.results.iter().map(|r| (r.status, code(r))).collect();
    assert_eq!(
        statuses,
        [
            (Status::Ok, ""),
            (Status::Error, "internal"),
            (Status::Ok, "")
        ]
    );
    assert!(r.results[1]
        .error
        .as_ref()
        .unwrap()
        .message
        .contains("the authorizer panicked"));
    let again = k
        .run(Batch::new("t", vec![call("d", "k")]).unwrap())
        .await
        .unwrap();
    assert_eq!(again.results[0].status, Status::Ok);
    assert_eq!(k.tenants_held(), 0);
}

#[tokio::test]
async fn a_panicking_normalizer_fails_its_call_internal_and_submission_goes_on() {
    let mut norm = Normalizers::default();
    norm.register("x", |p: Pattern| {
        if p.to_text().contains("boom") {
            panic!("the normalizer panics on purpose");
        }
        p
    });
    let k = Kernel::builder()
        .tool(writer("t.w"))
        .normalizers(norm)
        .build()
        .unwrap();
    let mut h = k.open("t").unwrap();
    h.submit(call("a", "k")).unwrap();
    h.submit(call("b", "boom")).unwrap();
    h.submit(call("c", "k")).unwrap();
    let r = h.finish().await;
    assert_eq!(r.results[0].status, Status::Ok);
    assert_eq!(
        (r.results[1].status, code(&r.results[1])),
        (Status::Error, "internal")
    );
    assert_eq!(r.results[2].status, Status::Ok);
    assert_eq!(k.tenant_load("t"), (0, 0));
}

/// Asks for `t.w`, counts the approvals it is told to remember.
#[derive(Debug, Default, Clone)]
struct AskFirstUse {
    remembered: Arc<AtomicUsize>,
}

impl Authorizer for AskFirstUse {
    fn authorize(&self, _req: &AuthRequest<'_>) -> Authorization {
        let mut a = Authorization::new(Decision::Ask, DecidedBy::mode("ask_on_first_use"));
        a.first_use = true;
        a
    }

    fn remember_approval(&self, _tenant: &str, _tool: &str) {
        self.remembered.fetch_add(1, Ordering::SeqCst);
    }
}

/// Panics when the input says so; otherwise never answers, and counts the asks it was dropped in.
#[derive(Debug, Default)]
struct Silent {
    asked: Arc<AtomicUsize>,
    abandoned: Arc<AtomicUsize>,
}

struct CountDrop(Arc<AtomicUsize>);

impl Drop for CountDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Approver for Silent {
    fn approve(&self, request: ApprovalRequest) -> ApprovalFuture {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let guard = CountDrop(self.abandoned.clone());
        Box::pin(async move {
            let _guard = guard;
            if request.input["key"] == "boom" {
                panic!("the approver panics on purpose");
            }
            std::future::pending::<()>().await;
            Ok(ApprovalOutcome::Approved { by: "never".into() })
        })
    }
}

#[tokio::test(start_paused = true)]
async fn an_approval_pending_when_its_batch_is_cancelled_is_abandoned_and_not_remembered() {
    let auth = AskFirstUse::default();
    let approver = Silent::default();
    let (asked, abandoned) = (approver.asked.clone(), approver.abandoned.clone());
    let k = Kernel::builder()
        .tool(writer("t.w"))
        .authorizer(auth.clone())
        .approver(approver)
        .build()
        .unwrap();
    let mut h = k.open("t").unwrap();
    h.submit(call("a", "k")).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(asked.load(Ordering::SeqCst), 1, "the ask started at once");
    assert_eq!(
        k.tenants_held(),
        1,
        "the ask and the waiting call are state"
    );
    h.cancel();
    let r = h.finish().await;
    assert_eq!(r.results[0].status, Status::Cancelled);
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(
        abandoned.load(Ordering::SeqCst),
        1,
        "the approver's future was dropped"
    );
    assert_eq!(auth.remembered.load(Ordering::SeqCst), 0);
    assert_eq!(k.tenants_held(), 0, "nothing of the ask is left");
    // The next first use asks again (nothing was remembered).
    let mut h = k.open("t").unwrap();
    h.submit(call("b", "k")).unwrap();
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    drop(h);
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(
        k.tenants_held(),
        0,
        "a dropped handle leaves nothing either"
    );
}

#[tokio::test(start_paused = true)]
async fn a_panicking_approver_rejects_its_call_with_internal_and_the_tenant_goes_on() {
    let k = Kernel::builder()
        .tool(writer("t.w"))
        .authorizer(AskFirstUse::default())
        .approver(Silent::default())
        .build()
        .unwrap();
    let r = k
        .run(Batch::new("t", vec![call("a", "boom")]).unwrap())
        .await
        .unwrap();
    assert_eq!(
        (r.results[0].status, code(&r.results[0])),
        (Status::Rejected, "internal")
    );
    assert_eq!(r.results[0].approver.as_deref(), Some("approver-panic"));
    let message = &r.results[0].error.as_ref().unwrap().message;
    assert!(
        message.contains("the approver panicked") && message.contains("panics on purpose"),
        "the panic's own message reaches the result: {message}"
    );
    assert_eq!(k.tenants_held(), 0);
}

/// Under a cap of one, calls that panic, calls cancelled while queued and calls of dropped
/// handles all give their permit back: every later call still runs.
#[tokio::test(start_paused = true)]
async fn a_queued_permit_never_waits_forever() {
    let k = Kernel::builder()
        .tool(writer("t.w"))
        .max_concurrency(1)
        .tool_concurrency("t.w", 1)
        .build()
        .unwrap();
    let slow = |id: &str, key: &str, panic: bool| {
        Call::new(id, "t.w", json!({"key": key, "ms": 20, "panic": panic}))
    };
    let mut cancelled = k.open("a").unwrap();
    let mut dropped = k.open("b").unwrap();
    let mut kept = k.open("c").unwrap();
    for i in 0..5 {
        cancelled
            .submit(slow(&format!("x{i}"), &format!("x{i}"), i % 2 == 0))
            .unwrap();
        dropped
            .submit(slow(&format!("y{i}"), &format!("y{i}"), false))
            .unwrap();
        kept.submit(slow(&format!("z{i}"), &format!("z{i}"), i == 1))
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(30)).await;
    cancelled.cancel();
    drop(dropped);
    let r = tokio::time::timeout(Duration::from_secs(60), kept.finish())
        .await
        .expect("the kept batch finishes: no permit is lost");
    let statuses: Vec<_> = r.results.iter().map(|r| (r.status, code(r))).collect();
    assert_eq!(statuses[1], (Status::Error, "panic"));
    assert!(statuses
        .iter()
        .enumerate()
        .all(|(i, s)| i == 1 || s.0 == Status::Ok));
    let r = tokio::time::timeout(Duration::from_secs(60), cancelled.finish())
        .await
        .expect("the cancelled batch ends");
    assert!(r.results.iter().any(|r| r.status == Status::Cancelled));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(k.tenants_held(), 0);
}

/// Memory stays bounded: 100,000 tenants with one call each leave no domain behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_tenants_leave_the_kernels_map_empty() {
    let k = Kernel::builder().tool(writer("t.w")).build().unwrap();
    let mut joins = Vec::new();
    for chunk in 0..100 {
        let k = k.clone();
        joins.push(tokio::spawn(async move {
            for i in 0..1000 {
                let tenant = format!("tenant-{chunk}-{i}");
                let r = k
                    .run(Batch::new(tenant, vec![call("a", "k")]).unwrap())
                    .await
                    .unwrap();
                assert_eq!(r.results[0].status, Status::Ok);
            }
        }));
    }
    for j in joins {
        j.await.unwrap();
    }
    // `run` returns after the batch ended, and its end is the last holder of the domain.
    assert_eq!(k.tenants_held(), 0);
    assert_eq!(k.tenant_load("tenant-7-7"), (0, 0));
}

/// A refusal names its reason token and says what it is: a rule, the tenant default, or the
/// tool's human-in-the-loop mode — never one mistaken for another.
#[tokio::test]
async fn a_refusal_names_its_reason_and_what_kind_of_reason_it_is() {
    let authorizer = |req: &AuthRequest<'_>| match req.input["key"].as_str() {
        Some("m") => Authorization::new(Decision::Ask, DecidedBy::mode("always_ask")),
        Some("d") => Authorization::new(Decision::Deny, DecidedBy::Default),
        _ => Authorization::new(Decision::Deny, DecidedBy::rule("no-writes")),
    };
    let k = Kernel::builder()
        .tool(writer("t.w"))
        .authorizer(authorizer)
        .build()
        .unwrap();
    let r = k
        .run(Batch::new("t", vec![call("a", "m"), call("b", "r"), call("c", "d")]).unwrap())
        .await
        .unwrap();
    let message = |i: usize| r.results[i].error.as_ref().unwrap().message.clone();
    assert_eq!(r.results[0].status, Status::Rejected);
    assert!(
        message(0).contains("`mode:always_ask` (the tool's human-in-the-loop mode)"),
        "{}",
        message(0)
    );
    assert_eq!(r.results[1].status, Status::Denied);
    assert!(
        message(1).contains("denied by rule `no-writes`"),
        "{}",
        message(1)
    );
    assert!(!message(1).contains("human-in-the-loop"), "{}", message(1));
    assert!(
        message(2).contains("`default` (the tenant's default decision)"),
        "{}",
        message(2)
    );
}
