//! The kernel's side of the shared-domain seam (`order::shared::SharedDomain`), on a scripted
//! domain and tokio's paused clock: a call admitted there is released there exactly once,
//! after its predecessors there, whatever cancellation meets it and whenever. The PostgreSQL
//! domain behind the same seam is tested in tests/scale.rs and by the traffic harness.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use sluice_kernel::order::shared::{AdmitRequest, Admitted, Refusal, SharedDomain, SharedFuture};
use sluice_kernel::run::{BatchHandle, Kernel};
use sluice_kernel::transport::{handler, ToolContext};
use sluice_kernel::{Call, Error, Status};

type Ready = tokio::sync::oneshot::Sender<Result<Option<String>, Error>>;

/// What the scripted domain was asked, and the predecessors it holds back.
#[derive(Default)]
struct Script {
    admitted: Vec<(u64, String)>,
    /// The test fires these: the call's predecessors "in other processes" have ended.
    ready: HashMap<u64, Ready>,
    released: Vec<(u64, bool)>,
    /// Whether the domain was closed, and how many calls were released by then.
    closed_after: Option<usize>,
}

#[derive(Clone, Default)]
struct Scripted(Arc<Mutex<Script>>);

impl Scripted {
    fn script(&self) -> std::sync::MutexGuard<'_, Script> {
        self.0.lock().unwrap()
    }

    fn fire(&self, ticket: u64) {
        let tx = self.script().ready.remove(&ticket).expect("a held ticket");
        tx.send(Ok(None)).unwrap();
    }
}

impl SharedDomain for Scripted {
    fn admit(&self, request: AdmitRequest) -> SharedFuture<Result<Admitted, Refusal>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let ticket = {
            let mut s = self.script();
            let ticket = s.admitted.len() as u64 + 1;
            s.admitted.push((ticket, request.call));
            s.ready.insert(ticket, tx);
            ticket
        };
        Box::pin(async move {
            Ok(Admitted {
                ticket,
                ready: Box::pin(async move {
                    rx.await.unwrap_or_else(|_| {
                        Err(Error::SharedDomainFailed {
                            why: "dropped".into(),
                        })
                    })
                }),
            })
        })
    }

    fn release(&self, _tenant: &str, ticket: u64, failed: bool) -> SharedFuture<Result<(), Error>> {
        let me = self.clone();
        Box::pin(async move {
            me.script().released.push((ticket, failed));
            Ok(())
        })
    }

    fn describe(&self) -> String {
        "scripted".into()
    }

    fn close(&self) -> SharedFuture<()> {
        let me = self.clone();
        Box::pin(async move {
            let mut s = me.script();
            s.closed_after = Some(s.released.len());
        })
    }
}

/// A kernel with `t.write` (writes `x:{key}`, records the fencing token it saw) on `domain`.
fn kernel(domain: &Scripted, tokens: &Arc<Mutex<Vec<Option<u64>>>>) -> Kernel {
    let tokens = tokens.clone();
    let write = support::tool(
        "t.write",
        json!([{"kind": "writes", "resource": "x:{key}"}]),
        true,
        handler(move |ctx: ToolContext, _input: Value| {
            let tokens = tokens.clone();
            async move {
                tokens.lock().unwrap().push(ctx.fencing_token());
                Ok(json!({}))
            }
        }),
    );
    Kernel::builder()
        .tool(write)
        .shared_domain(Arc::new(domain.clone()))
        .build()
        .unwrap()
}

/// A kernel on a scripted domain, and a batch with one write `a` that the domain has admitted
/// (ticket 1) and holds back.
struct Admitting {
    domain: Scripted,
    tokens: Arc<Mutex<Vec<Option<u64>>>>,
    kernel: Kernel,
    batch: BatchHandle,
}

async fn one_write_admitted() -> Admitting {
    let (domain, tokens) = (Scripted::default(), Arc::default());
    let kernel = kernel(&domain, &tokens);
    let mut batch = kernel.open("acme").unwrap();
    batch
        .submit(Call::new("a", "t.write", json!({"key": "k"})))
        .unwrap();
    until_admitted(&domain, 1).await;
    Admitting {
        domain,
        tokens,
        kernel,
        batch,
    }
}

/// Lets every task run until the scripted domain has admitted `n` calls.
async fn until_admitted(domain: &Scripted, n: usize) {
    while domain.script().admitted.len() < n {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_call_that_runs_is_released_once_after_its_handler_and_saw_its_ticket() {
    let s = one_write_admitted().await;
    assert!(
        s.tokens.lock().unwrap().is_empty(),
        "it waits for the domain"
    );
    assert!(s.domain.script().released.is_empty());
    s.domain.fire(1);
    let result = s.batch.finish().await;
    assert_eq!(result.results[0].status, Status::Ok);
    assert_eq!(*s.tokens.lock().unwrap(), vec![Some(1)]);
    assert_eq!(s.domain.script().released, vec![(1, false)]);
}

/// The race a biased `select!` decides one way: the predecessors elsewhere end and the batch is
/// cancelled in the same instant. The call does not run, and its place is still released.
#[tokio::test(start_paused = true)]
async fn a_call_cancelled_as_its_shared_predecessors_end_is_still_released_there() {
    let s = one_write_admitted().await;
    s.domain.fire(1);
    s.batch.cancel();
    let result = s.batch.finish().await;
    assert_eq!(result.results[0].status, Status::Cancelled);
    s.kernel.shared_settled().await;
    assert!(s.tokens.lock().unwrap().is_empty(), "it never ran");
    assert_eq!(s.domain.script().released, vec![(1, true)]);
}

#[tokio::test(start_paused = true)]
async fn a_call_cancelled_while_it_waits_there_releases_after_its_predecessors_once() {
    let s = one_write_admitted().await;
    s.batch.cancel();
    let result = s.batch.finish().await;
    assert_eq!(result.results[0].status, Status::Cancelled);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        s.kernel.shared_settling(),
        1,
        "it holds its place until they end"
    );
    assert!(s.domain.script().released.is_empty());
    s.domain.fire(1);
    s.kernel.shared_settled().await;
    assert!(s.tokens.lock().unwrap().is_empty(), "it never ran");
    assert_eq!(s.domain.script().released, vec![(1, true)]);
}

/// `Kernel::shutdown` closes the domain only once every call that will not run has been
/// released there: a cancelled call still waiting for its predecessors elsewhere holds the
/// shutdown until they end, and is released before the close.
#[tokio::test(start_paused = true)]
async fn shutdown_closes_the_domain_after_the_last_release() {
    let s = one_write_admitted().await;
    s.batch.cancel();
    let result = s.batch.finish().await;
    assert_eq!(result.results[0].status, Status::Cancelled);
    let shutdown = tokio::spawn(s.kernel.shutdown());
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!shutdown.is_finished(), "it waits for the release");
    assert_eq!(s.domain.script().closed_after, None, "not closed yet");
    s.domain.fire(1);
    shutdown.await.unwrap().unwrap();
    let script = s.domain.script();
    assert_eq!(script.released, vec![(1, true)]);
    assert_eq!(script.closed_after, Some(1), "closed after its release");
}
