//! The dispatch pipeline: the stages one call goes through, from submission to its result.
//!
//! 1. **resolve** and **validate** the input ([`PreparedCall`]: `unknown-tool`, `invalid-input`);
//! 2. **authorize** (`denied` ends here; `ask` starts the approval at once, `approval.rs`);
//! 3. **order**: insert into the tenant's conflict domain (a refused call never enters it: it
//!    changes nothing);
//! 4. **wait** for the predecessors and the approval (`rejected`, `skipped`, `cancelled`);
//! 5. **invoke** the handler in its own task under its deadline (`timeout`, `panic`), then check
//!    the output (`invalid-output`) (`invoke.rs`);
//! 6. **record** provenance (`record.rs`: the call's records take their place in the log), then
//!    **release** the successors, then hand the result back once the log has answered.
//!
//! Stages 1–3 run in [`submit`], synchronously, in the submitter's order; the rest is a future
//! [`submit`] returns, which the batch spawns and whose result it delivers. Nothing here calls
//! back up into the batch or the kernel.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use futures::future::Either;
use tracing::Instrument;

use super::approval;
use super::invoke::invoke;
use super::job::{CallJob, Outcome};
use super::observe::{quietly, CallObserver, WaitedCall, Waiting};
use super::options::OnFailure;
use super::record::{self, finish};
use super::result::CallResult;
use super::shared::BatchInfo;
use crate::authorize::{AuthRequest, Authorization, DecidedBy, Decision};
use crate::error::{panic_message, Error, ErrorCode};
use crate::model::Status;
use crate::order::domain::{
    Commons, CommonsPlace, DomainRef, IndexPanicked, Inserted, Owner, Readiness, TenantDomain,
    Upstream,
};
use crate::order::shared::{AdmitRequest, Admitted, Refusal, SharedDomain, SharedFuture};
use crate::order::PreparedCall;
use crate::provenance::EdgeRecord;
use crate::transport::TenantScope;

/// A call past its synchronous stages.
pub(crate) struct Dispatched<F> {
    /// Its position in the tenant's conflict domain, when it entered it: the batch hands the
    /// positions back when it ends, so that the domain may forget them.
    pub(crate) position: Option<usize>,
    /// The rest of its way, to its result (instrumented with the call's span). Not boxed: the
    /// task spawned for the call holds it, one allocation for both.
    pub(crate) rest: F,
}

/// Submits one call: the synchronous stages (resolve, validate, authorize, order) run here, in
/// the submitter's order; the rest is returned as a future.
pub(crate) fn submit(
    batch: Arc<BatchInfo>,
    seq: u64,
    priority: i32,
    prepared: PreparedCall,
) -> Dispatched<impl Future<Output = CallResult> + Send> {
    let mut job = CallJob {
        batch,
        seq,
        priority,
        prepared,
        authorization: None,
        approver: None,
        started: None,
        ended: None,
        secrets: Vec::new(),
        input_sha256: None,
        fencing: None,
    };
    let span = tracing::info_span!(
        "sluice.call",
        tenant = %job.batch.tenant,
        batch = %job.batch.id,
        call = %job.prepared.call.id,
        tool = %job.prepared.call.tool,
        accesses = %accesses_text(&job.prepared),
        decision = tracing::field::Empty,
        status = tracing::field::Empty,
    );
    let _entered = span.enter();

    // 1. resolve, validate (done by PreparedCall).
    if let Some(r) = &job.prepared.rejection {
        let mut outcome = Outcome::fail(Status::Error, r.code(), r.message(&job.prepared.call));
        if let (Some(e), Some(p)) = (outcome.error.as_mut(), r.pointer()) {
            e.pointer = Some(p.to_owned());
        }
        return refused(refuse(job, outcome, &span));
    }
    // 2. authorize. The authorizer is the embedder's code: a panic refuses this call alone.
    let auth = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| authorize(&job))) {
        Ok(auth) => auth,
        Err(payload) => {
            let why = format!(
                "the authorizer panicked, so the call does not run: {}",
                panic_message(payload.as_ref())
            );
            let outcome = internal(&job, &why);
            return refused(refuse(job, outcome, &span));
        }
    };
    span.record("decision", auth.decision.as_str());
    if auth.decision == Decision::Deny {
        let message = format!(
            "call `{}` ({}) was denied by {}",
            job.prepared.call.id,
            job.prepared.call.tool,
            auth.by.describe()
        );
        job.authorization = Some(auth);
        let outcome = Outcome::fail(Status::Denied, ErrorCode::Denied, message);
        return refused(refuse(job, outcome, &span));
    }
    job.authorization = Some(auth);
    // 3. order.
    let domain = job.kernel().domains.get(&job.batch.tenant);
    // Who a call is matters only for edge records and observers: skip it when neither asks.
    let observer = job.batch.observer.as_ref();
    let owner = (job.kernel().sink.enabled() || observer.is_some()).then(|| Owner {
        batch: job.batch.id.clone(),
        call: Arc::from(job.prepared.call.id.as_str()),
        tool: job.prepared.tool.clone(),
        mark: observer.and_then(|o| quietly("mark", || o.mark(&job.prepared.call))),
    });
    // A shared domain admits the process's calls in the order they entered the tenant's local
    // domain: the admission is enqueued under the same lock as the insertion, or two threads
    // submitting conflicting calls could enter them in one order here and the other there,
    // and each would wait for the other. The commons is entered under that lock too, for the
    // same reason.
    let entered = {
        let mut local = domain.lock();
        enter(&job, &mut local, owner)
    };
    let Entered {
        inserted,
        commons,
        admission,
    } = match entered {
        Ok(e) => e,
        Err(why) => {
            drop(domain);
            let outcome = internal(&job, why);
            return refused(refuse(job, outcome, &span));
        }
    };
    let position = Some(inserted.position);
    if let Some(observer) = &job.batch.observer {
        let shared = commons.as_ref().map_or(0, |c| c.waits_for);
        tell_waiting(&**observer, &job, &inserted, shared);
    }
    // Owners kept for an observer alone give no records.
    let edges = if job.kernel().sink.enabled() {
        edge_records(&job, &inserted)
    } else {
        Vec::new()
    };
    let place = Place {
        domain,
        position: inserted.position,
        commons: commons
            .as_ref()
            .map(|c| (job.kernel().commons.clone(), c.position)),
    };
    let ready = Readiness::new(inserted.ready, commons.map(|c| c.ready));
    let rest = run_ordered(Box::new(job), place, ready, edges, admission).instrument(span.clone());
    Dispatched {
        position,
        rest: Either::Left(rest),
    }
}

/// Ends a call that never enters the conflict domain (it changes nothing, so nothing waits).
fn refuse(
    job: CallJob,
    outcome: Outcome,
    span: &tracing::Span,
) -> Dispatched<impl Future<Output = CallResult> + Send> {
    Dispatched {
        position: None,
        rest: finish(job, outcome, Vec::new()).instrument(span.clone()),
    }
}

/// A refused call's way, as the other side of [`submit`]'s result.
fn refused<L, R>(d: Dispatched<R>) -> Dispatched<Either<L, R>> {
    Dispatched {
        position: d.position,
        rest: Either::Right(d.rest),
    }
}

/// The outcome of a call that could not be judged because something panicked on its way
/// (`internal`).
fn internal(job: &CallJob, why: &str) -> Outcome {
    let message = format!(
        "call `{}` ({}): {why}",
        job.prepared.call.id, job.prepared.call.tool
    );
    Outcome::fail(Status::Error, ErrorCode::Internal, message)
}

fn accesses_text(p: &PreparedCall) -> String {
    p.accesses
        .iter()
        .map(|a| format!("{} {}", a.kind, a.resource))
        .collect::<Vec<_>>()
        .join(", ")
}

fn authorize(job: &CallJob) -> Authorization {
    let Some(tool) = &job.prepared.tool else {
        return Authorization::new(Decision::Deny, DecidedBy::UnknownTool);
    };
    job.kernel().authorizer.authorize(&AuthRequest {
        tenant: &job.batch.tenant,
        call_id: &job.prepared.call.id,
        tool: tool.manifest(),
        input: &job.prepared.call.input,
        accesses: &job.prepared.accesses,
    })
}

/// Tells the batch's observer what a call just inserted waits for, if anything.
fn tell_waiting(observer: &dyn CallObserver, job: &CallJob, inserted: &Inserted, shared: usize) {
    let approval = job
        .authorization
        .as_ref()
        .filter(|a| a.decision == Decision::Ask);
    let pending = inserted.edges.iter().filter(|e| e.pending);
    if inserted.unnamed == 0
        && shared == 0
        && approval.is_none()
        && pending.clone().next().is_none()
    {
        return;
    }
    let mut calls: Vec<(usize, WaitedCall)> = pending
        .map(|e| {
            let from = &e.from;
            let waited = WaitedCall {
                batch: from.batch.clone(),
                call: from.call.clone(),
                tool: from.tool.as_ref().map(|t| t.id().to_owned()),
                resource: e.edge.resource.to_text(),
                kind: e.edge.kind.as_str(),
                mark: from.mark.clone(),
            };
            (e.edge.from, waited)
        })
        .collect();
    calls.sort_by_key(|(position, _)| *position);
    let calls: Vec<WaitedCall> = calls.into_iter().map(|(_, c)| c).collect();
    let waiting = Waiting {
        calls: &calls,
        unnamed: inserted.unnamed,
        shared,
        approval,
    };
    quietly("waiting", || {
        observer.waiting(&job.prepared.call, &waiting);
        Some(())
    });
}

fn edge_records(job: &CallJob, inserted: &Inserted) -> Vec<EdgeRecord> {
    inserted
        .edges
        .iter()
        .map(|f| EdgeRecord {
            tenant: job.batch.tenant.to_string(),
            from_batch: f.from.batch.to_string(),
            from: f.from.call.to_string(),
            to_batch: job.batch.id.to_string(),
            to: job.prepared.call.id.clone(),
            resource: f.edge.resource.to_text(),
            kind: f.edge.kind.as_str().to_owned(),
            causal: f.edge.kind.is_causal(),
        })
        .collect()
}

/// Stages 4-6 for a call that entered the conflict domain (and, when the kernel has one, was
/// handed to the shared domain for admission).
async fn run_ordered(
    mut job: Box<CallJob>,
    place: Place,
    mut ready: Readiness,
    edges: Vec<EdgeRecord>,
    admission: Option<SharedFuture<Result<Admitted, Refusal>>>,
) -> CallResult {
    let cancel = job.batch.cancel.clone();
    // Dropping it (the call ends without an answer) abandons the ask.
    let ask = approval::start(&job);
    // 4. wait for the predecessors (a cancelled call still waits before it releases anyone:
    //    release after predecessors).
    let upstream = tokio::select! {
        biased;
        u = &mut ready => u,
        _ = cancel.cancelled() => {
            drop(ask);
            settle_shared(&job, admission);
            if job.kernel().sink.enabled() {
                // Its records must follow its predecessors' (the log is in causal order): wait
                // for them, record, then release.
                let _ = (&mut ready).await;
                let id = job.prepared.call.id.clone();
                let recording = record::begin(*job, Outcome::cancelled_before_start(), edges);
                place.release(Some(&id));
                return Box::pin(recording.finish()).await;
            }
            let id = job.prepared.call.id.clone();
            // Report now; release the successors once the predecessors are done (the domain
            // keeps this call's place until then: forget only the settled).
            tokio::spawn(async move {
                let _ = (&mut ready).await;
                place.release(Some(&id));
            });
            return Box::pin(finish(*job, Outcome::cancelled_before_start(), edges)).await;
        }
    };
    // 4'. the shared domain: admitted, then the other processes' conflicting calls.
    let mut shared_failed = None;
    let mut refused = None;
    if let Some(mut admitting) = admission {
        let admitted = tokio::select! {
            biased;
            a = &mut admitting => Some(a),
            _ = cancel.cancelled() => None,
        };
        match admitted {
            None => settle_shared(&job, Some(admitting)),
            Some(Err(why)) => refused = Some(why),
            Some(Ok(a)) => {
                job.fencing = Some(a.ticket);
                let mut shared_ready = a.ready;
                let waited = tokio::select! {
                    biased;
                    r = &mut shared_ready => Some(r),
                    _ = cancel.cancelled() => None,
                };
                match waited {
                    Some(Ok(failed)) => shared_failed = failed,
                    Some(Err(why)) => refused = Some(Refusal::Unavailable(why.to_string())),
                    None => {
                        // The settling task releases it, after its predecessors there.
                        job.fencing = None;
                        settle_admitted(&job, a.ticket, shared_ready);
                    }
                }
            }
        }
    }
    // The predecessors are done; if the batch was cancelled meanwhile, cancellation wins over
    // whatever they ended with.
    if cancel.is_cancelled() {
        let id = job.prepared.call.id.clone();
        // Admitted and past its predecessors there: its place in the shared domain is released
        // like any ended call's (it counts as failed), once its records are in.
        let shared_release = release_shared(&job, true);
        let recording = record::begin(*job, Outcome::cancelled_before_start(), edges);
        place.release(Some(&id));
        drop((ask, place));
        let result = Box::pin(recording.finish()).await;
        released_shared(shared_release).await;
        return result;
    }
    let upstream = Upstream {
        failed: upstream.failed.or(shared_failed),
    };
    let outcome = if let Some(refusal) = refused {
        drop(ask);
        let message = format!(
            "call `{}` ({}) was not admitted by the shared conflict domain {}, so it does not \
             run: {refusal}",
            job.prepared.call.id,
            job.prepared.call.tool,
            job.kernel()
                .shared
                .as_ref()
                .map(|d| d.describe())
                .unwrap_or_default()
        );
        let code = match refusal {
            Refusal::Unavailable(_) => ErrorCode::DomainUnavailable,
            Refusal::Invalid(_) => ErrorCode::InvalidInput,
        };
        Outcome::fail(Status::Error, code, message)
    } else {
        match approval::answer(&mut job, ask, &cancel).await {
            Some(o) => o,
            None => match (&upstream, job.batch.on_failure) {
                (Upstream { failed: Some(f) }, OnFailure::SkipDependents) => {
                    let message = format!(
                        "call `{}` was skipped because `{f}`, which it depends on, failed",
                        job.prepared.call.id
                    );
                    Outcome::fail(Status::Skipped, ErrorCode::Skipped, message)
                }
                _ => match job.kernel().sink.available(&job.batch.tenant) {
                    // No tool runs unrecorded where the log must keep every call.
                    Err(why) => Outcome::fail(
                        Status::Error,
                        ErrorCode::ProvenanceUnavailable,
                        format!(
                            "call `{}` ({}) did not run: the provenance log cannot keep its \
                             record now: {why}",
                            job.prepared.call.id, job.prepared.call.tool
                        ),
                    ),
                    Ok(()) => Box::pin(invoke(&mut job, &cancel, &edges)).await,
                },
            },
        }
    };
    job.ended.get_or_insert_with(Instant::now);
    // 6. record (the records take their place in the log), release, then hand the result back
    //    once the log has answered.
    let failed = outcome
        .counts_as_failure()
        .then(|| job.prepared.call.id.clone());
    let shared_release = release_shared(&job, failed.is_some());
    let recording = record::begin(*job, outcome, edges);
    place.release(failed.as_deref());
    drop(place);
    // The other processes' successors go once the sink has answered for this call's records:
    // a shared log then holds the writer before any reader elsewhere (causal order, lineage).
    let result = Box::pin(recording.finish()).await;
    released_shared(shared_release).await;
    result
}

/// The release of an admitted call's place in the shared domain (not yet sent: a future is
/// lazy), when it was admitted there.
fn release_shared(job: &CallJob, failed: bool) -> Option<SharedFuture<Result<(), Error>>> {
    match (job.fencing, &job.kernel().shared) {
        (Some(ticket), Some(d)) => Some(d.release(&job.batch.tenant, ticket, failed)),
        _ => None,
    }
}

/// Sends a [`release_shared`] release and waits for the domain to take it.
async fn released_shared(release: Option<SharedFuture<Result<(), Error>>>) {
    if let Some(r) = release {
        if let Err(why) = r.await {
            // Its successors elsewhere go when its process's lease runs out.
            tracing::error!(error = %why, "the shared conflict domain did not take a release");
        }
    }
}

/// A call that will not run, handed to the shared domain: it keeps its place there until its
/// predecessors there are done, then releases (release after predecessors), in the background.
/// It counts as failed there, as it does in its own process's domain (`skip-dependents`).
fn settle_shared(job: &CallJob, admission: Option<SharedFuture<Result<Admitted, Refusal>>>) {
    let (Some(d), Some(admission)) = (job.kernel().shared.clone(), admission) else {
        return;
    };
    let tenant = job.batch.tenant.clone();
    job.kernel().settling.spawn(async move {
        if let Ok(a) = admission.await {
            settle(&*d, &tenant, a.ticket, a.ready).await;
        }
    });
}

/// [`settle_shared`] for a call already admitted, waiting on `ready`.
fn settle_admitted(job: &CallJob, ticket: u64, ready: SharedFuture<Result<Option<String>, Error>>) {
    let Some(d) = job.kernel().shared.clone() else {
        return;
    };
    let tenant = job.batch.tenant.clone();
    job.kernel()
        .settling
        .spawn(async move { settle(&*d, &tenant, ticket, ready).await });
}

async fn settle(
    d: &dyn SharedDomain,
    tenant: &str,
    ticket: u64,
    ready: SharedFuture<Result<Option<String>, Error>>,
) {
    let _ = ready.await;
    let _ = d.release(tenant, ticket, true).await;
}

/// What [`enter`] gives a call that entered its domains.
struct Entered {
    inserted: Inserted,
    commons: Option<CommonsPlace>,
    admission: Option<SharedFuture<Result<Admitted, Refusal>>>,
}

/// Stage 3 under the tenant's lock (`local`): a call of a tool shared between tenants enters
/// the commons, then every call its tenant's domain, then it is handed to the shared domain for
/// admission. A panic inside a conflict index refuses the call; a commons place already taken
/// is released in the background once its predecessors there are done (release after
/// predecessors).
fn enter(
    job: &CallJob,
    local: &mut TenantDomain,
    owner: Option<Owner>,
) -> Result<Entered, &'static str> {
    let kernel = job.kernel();
    let shared_tool = !job.prepared.accesses.is_empty()
        && job
            .prepared
            .tool
            .as_ref()
            .is_some_and(|t| t.scope() == TenantScope::Shared);
    let commons = if shared_tool {
        match kernel.commons.insert(&job.prepared.accesses) {
            Ok(c) => Some(c),
            Err(IndexPanicked) => return Err(COMMONS_PANICKED),
        }
    } else {
        None
    };
    let inserted = match local.insert(owner, &job.prepared.accesses) {
        Ok(i) => i,
        Err(IndexPanicked) => {
            if let Some(c) = commons {
                let commons = kernel.commons.clone();
                tokio::spawn(async move {
                    let _ = c.ready.await;
                    commons.release(c.position);
                });
            }
            return Err(TENANT_PANICKED);
        }
    };
    let admission = kernel.shared.as_ref().map(|d| {
        d.admit(AdmitRequest {
            tenant: job.batch.tenant.clone(),
            batch: job.batch.id.clone(),
            call: job.prepared.call.id.clone(),
            tool: job.prepared.call.tool.clone(),
            accesses: job.prepared.accesses.clone(),
        })
    });
    Ok(Entered {
        inserted,
        commons,
        admission,
    })
}

const TENANT_PANICKED: &str =
    "the conflict index failed on its accesses (a defect of Sluice); the \
                               call does not run, and the tenant's later calls wait for every \
                               call running now";
const COMMONS_PANICKED: &str = "the conflict index of the resources shared between tenants failed \
                                on its accesses (a defect of Sluice); the call does not run, and \
                                later calls of shared tools wait for every such call running now";

/// Where an ordered call holds its place: its tenant's domain and, for a tool shared between
/// tenants, the commons.
struct Place {
    domain: DomainRef,
    position: usize,
    commons: Option<(Arc<Commons>, usize)>,
}

impl Place {
    /// Releases the call's successors in both (called once its predecessors in both are done).
    fn release(&self, failed: Option<&str>) {
        self.domain.lock().finish(self.position, failed);
        if let Some((commons, position)) = &self.commons {
            commons.release(*position);
        }
    }
}
