//! The dispatch pipeline: the stages one call goes through.
//!
//! Takes in: a submitted call. Hands on: its [`CallResult`], recorded and delivered. The stages,
//! each a short function over one [`CallJob`]:
//!
//! 1. **resolve** and **validate** the input ([`PreparedCall`]: `unknown-tool`, `invalid-input`);
//! 2. **authorize** (`denied` ends here; `ask` starts the approval at once);
//! 3. **order**: insert into the tenant's conflict domain (a refused call never enters it: it
//!    changes nothing);
//! 4. **wait** for the predecessors and the approval (`rejected`, `skipped`, `cancelled`);
//! 5. **invoke** the handler in its own task under its deadline (`timeout`, `panic`), then check
//!    the output (`invalid-output`);
//! 6. **release** the successors, **record** provenance, **deliver** the result.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use serde_json::Value;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::authorize::{ApprovalOutcome, ApprovalRequest, AuthRequest, Authorization, Decision};
use crate::batch::{CallError, CallResult, Status};
use crate::kernel::{BatchShared, KernelInner, OnFailure};
use crate::plan::PreparedCall;
use crate::provenance::{self, AccessRecord, CallRecord, EdgeRecord, Record};
use crate::scheduler::{DomainRef, IndexPanicked, Inserted, Owner, Upstream};
use crate::tool::{ToolContext, ToolError};

/// Everything one call's stages share.
pub(crate) struct CallJob {
    pub(crate) kernel: Arc<KernelInner>,
    pub(crate) batch: Arc<BatchShared>,
    /// Position in the batch (submission order).
    pub(crate) index: usize,
    /// Kernel-wide submission sequence (for the ready queue's order).
    pub(crate) seq: u64,
    pub(crate) priority: i32,
    pub(crate) prepared: PreparedCall,
    pub(crate) authorization: Option<Authorization>,
    pub(crate) approver: Option<String>,
    started: Option<Instant>,
    ended: Option<Instant>,
    /// Secret values handed out to the handler, for redaction.
    secrets: Vec<String>,
    /// The input's digest, taken before the input moved into the handler.
    input_sha256: Option<String>,
}

/// How a call ended, before it becomes a [`CallResult`].
struct Outcome {
    status: Status,
    output: Option<Value>,
    error: Option<CallError>,
}

impl Outcome {
    fn ok(output: Value) -> Self {
        Outcome {
            status: Status::Ok,
            output: Some(output),
            error: None,
        }
    }

    fn fail(status: Status, code: &str, message: impl Into<String>) -> Self {
        Outcome {
            status,
            output: None,
            error: Some(CallError::new(code, message)),
        }
    }

    /// Whether dependents should count this call as failed (for `skip-dependents`). A denied or
    /// rejected call changed nothing, so its dependents run.
    fn counts_as_failure(&self) -> bool {
        !matches!(self.status, Status::Ok | Status::Denied | Status::Rejected)
    }
}

/// Submits one call: the synchronous stages (resolve, validate, authorize, order) run here, in
/// the submitter's order; the rest runs in a task.
pub(crate) fn submit(
    kernel: Arc<KernelInner>,
    batch: Arc<BatchShared>,
    index: usize,
    seq: u64,
    priority: i32,
    prepared: PreparedCall,
) {
    let mut job = CallJob {
        kernel,
        batch,
        index,
        seq,
        priority,
        prepared,
        authorization: None,
        approver: None,
        started: None,
        ended: None,
        secrets: Vec::new(),
        input_sha256: None,
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
        let outcome = Outcome::fail(Status::Error, r.code(), r.message(&job.prepared.call));
        return refuse(job, outcome, &span);
    }
    // 2. authorize. The authorizer is the embedder's code: a panic refuses this call alone.
    let auth = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| authorize(&job))) {
        Ok(auth) => auth,
        Err(payload) => {
            let why = format!(
                "the authorizer panicked, so the call does not run: {}",
                crate::panic_message(payload.as_ref())
            );
            return refuse_internal(job, &why, &span);
        }
    };
    span.record("decision", auth.decision.as_str());
    job.authorization = Some(auth.clone());
    if auth.decision == Decision::Deny {
        let outcome = Outcome::fail(
            Status::Denied,
            "denied",
            format!(
                "call `{}` ({}) was denied by {}",
                job.prepared.call.id,
                job.prepared.call.tool,
                describe_by(&auth.by)
            ),
        );
        return refuse(job, outcome, &span);
    }
    // 3. order.
    let domain = job.kernel.domains.get(&job.batch.tenant);
    // Who a call is matters only for edge records: skip it when nothing is recorded.
    let owner = job.kernel.sink.enabled().then(|| Owner {
        batch: job.batch.id.clone(),
        call: Arc::from(job.prepared.call.id.as_str()),
    });
    let inserted = domain.lock().insert(owner, &job.prepared.accesses);
    let inserted = match inserted {
        Ok(inserted) => inserted,
        Err(IndexPanicked) => {
            drop(domain);
            let why = "the conflict index failed on its accesses (a defect of Sluice); the call \
                       does not run, and the tenant's later calls wait for every call running now";
            return refuse_internal(job, why, &span);
        }
    };
    job.batch.note_position(inserted.position);
    let edges = edge_records(&job, &inserted);
    let task_span = span.clone();
    // Boxed so the spawned future is a pointer: tokio copies what it spawns.
    tokio::spawn(
        Box::pin(run_ordered(Box::new(job), domain, inserted, edges)).instrument(task_span),
    );
}

/// Ends a call that never enters the conflict domain (it changes nothing, so nothing waits).
fn refuse(job: CallJob, outcome: Outcome, span: &tracing::Span) {
    spawn_finish(job, outcome, None, Vec::new(), span.clone());
}

/// Ends a call that could not be judged because something panicked on its way (`internal`).
fn refuse_internal(job: CallJob, why: &str, span: &tracing::Span) {
    let message = format!(
        "call `{}` ({}): {why}",
        job.prepared.call.id, job.prepared.call.tool
    );
    refuse(job, Outcome::fail(Status::Error, "internal", message), span);
}

fn accesses_text(p: &PreparedCall) -> String {
    p.accesses
        .iter()
        .map(|a| format!("{} {}", a.kind, a.resource))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The reason behind a decision, for the model: always the raw token (a rule id, `default`,
/// `unknown-tenant`, `mode:<mode>`, `pure`) in backticks, then what it means.
fn describe_by(by: &str) -> String {
    match by {
        "default" => "`default` (the tenant's default decision)".into(),
        "unknown-tenant" => "`unknown-tenant` (the tenant is not in the policy)".into(),
        "unknown-tool" => "`unknown-tool` (no such tool)".into(),
        b if b.starts_with("mode:") => format!("`{b}` (the tool's human-in-the-loop mode)"),
        b => format!("rule `{b}`"),
    }
}

fn authorize(job: &CallJob) -> Authorization {
    let Some(tool) = &job.prepared.tool else {
        return Authorization::new(Decision::Deny, "unknown-tool");
    };
    job.kernel.authorizer.authorize(&AuthRequest {
        tenant: &job.batch.tenant,
        call_id: &job.prepared.call.id,
        tool: tool.manifest(),
        input: &job.prepared.call.input,
        accesses: &job.prepared.accesses,
    })
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

/// Stages 4-6 for a call that entered the conflict domain.
async fn run_ordered(
    mut job: Box<CallJob>,
    domain: DomainRef,
    inserted: Inserted,
    edges: Vec<EdgeRecord>,
) {
    let cancel = job.batch.cancel.clone();
    // Dropping it (the call ends without an answer) abandons the ask.
    let approval = start_approval(&job);
    // 4. wait for the predecessors (a cancelled call still waits before it releases anyone:
    //    release after predecessors).
    let mut ready = inserted.ready;
    let upstream = tokio::select! {
        biased;
        u = &mut ready => u,
        _ = cancel.cancelled() => {
            let outcome = Outcome::fail(Status::Cancelled, "cancelled", "the batch was cancelled before the call started");
            let position = inserted.position;
            let id = job.prepared.call.id.clone();
            drop(approval);
            // Report now; release the successors once the predecessors are done (the domain
            // keeps this call's place until then: forget only the settled).
            tokio::spawn(async move {
                let _ = (&mut ready).await;
                release(&domain, position, Some(&id));
            });
            Box::pin(finish(*job, outcome, None, edges)).await;
            return;
        }
    };
    // The predecessors are done; if the batch was cancelled meanwhile, cancellation wins over
    // whatever they ended with.
    if cancel.is_cancelled() {
        let outcome = Outcome::fail(
            Status::Cancelled,
            "cancelled",
            "the batch was cancelled before the call started",
        );
        release(&domain, inserted.position, Some(&job.prepared.call.id));
        drop((approval, domain));
        Box::pin(finish(*job, outcome, None, edges)).await;
        return;
    }
    let outcome = match approval {
        None => None,
        // A cancelled batch does not wait for a person to answer.
        Some(fut) => match tokio::select! {
            biased;
            _ = cancel.cancelled() => None,
            o = fut => Some(o),
        } {
            None => Some(Outcome::fail(
                Status::Cancelled,
                "cancelled",
                "the batch was cancelled while the call waited for approval",
            )),
            Some(Asked::Answer(ApprovalOutcome::Approved { by })) => {
                job.approver = Some(by);
                None
            }
            Some(Asked::Answer(ApprovalOutcome::Rejected { by, reason })) => {
                let asked = job
                    .authorization
                    .as_ref()
                    .map(|a| describe_by(&a.by))
                    .unwrap_or_default();
                let msg = format!(
                    "call `{}` ({}) asked for approval because of {asked} and was rejected by \
                     `{by}`: {reason}",
                    job.prepared.call.id, job.prepared.call.tool
                );
                job.approver = Some(by);
                Some(Outcome::fail(Status::Rejected, "rejected", msg))
            }
            // Fail closed: an approver that panics is an approver that did not approve.
            Some(Asked::Panicked(what)) => {
                job.approver = Some("approver-panic".into());
                Some(Outcome::fail(
                    Status::Rejected,
                    "internal",
                    format!(
                        "call `{}` ({}) asked for approval and the approver panicked, so it is \
                         rejected: {what}",
                        job.prepared.call.id, job.prepared.call.tool
                    ),
                ))
            }
        },
    };
    let outcome = match outcome {
        Some(o) => o,
        None => match (&upstream, job.batch.on_failure) {
            (Upstream { failed: Some(f) }, OnFailure::SkipDependents) => Outcome::fail(
                Status::Skipped,
                "skipped",
                format!(
                    "call `{}` was skipped because `{f}`, which it depends on, failed",
                    job.prepared.call.id
                ),
            ),
            _ => Box::pin(invoke(&mut job, &cancel)).await,
        },
    };
    job.ended.get_or_insert_with(Instant::now);
    // 6. release, then record and deliver.
    let failed = outcome
        .counts_as_failure()
        .then(|| job.prepared.call.id.clone());
    release(&domain, inserted.position, failed.as_deref());
    drop(domain);
    Box::pin(finish(*job, outcome, None, edges)).await;
}

fn release(domain: &DomainRef, position: usize, failed: Option<&str>) {
    domain.lock().finish(position, failed);
}

/// How an ask ended.
enum Asked {
    /// The approver answered (or failed, or timed out: both are rejections).
    Answer(ApprovalOutcome),
    /// The approver (or the authorizer remembering its approval) panicked.
    Panicked(String),
}

/// The ask in flight. Dropping it — the call was cancelled while it waited — aborts the ask:
/// the approver's future is dropped and nothing of the ask is remembered.
type Ask = std::pin::Pin<Box<dyn std::future::Future<Output = Asked> + Send>>;

/// Aborts a task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Takes a first-use ask out of the kernel's table when the ask that made it ends, however it
/// ends (answered, panicked, aborted), so that an idle tenant leaves nothing behind.
struct FirstUseEntry {
    kernel: Arc<KernelInner>,
    key: (String, String),
    cell: Arc<OnceCell<ApprovalOutcome>>,
}

impl Drop for FirstUseEntry {
    fn drop(&mut self) {
        let cell = &self.cell;
        self.kernel
            .first_use
            .remove_if(&self.key, |_, c| Arc::ptr_eq(c, cell));
    }
}

/// Starts asking at once (a call waiting for approval blocks only its dependents); concurrent
/// first uses of one tool by one tenant share one ask.
fn start_approval(job: &CallJob) -> Option<Ask> {
    let auth = job.authorization.clone()?;
    if auth.decision != Decision::Ask {
        return None;
    }
    let kernel = job.kernel.clone();
    let request = ApprovalRequest {
        tenant: job.batch.tenant.to_string(),
        call_id: job.prepared.call.id.clone(),
        tool: job.prepared.call.tool.clone(),
        input: job.prepared.call.input.clone(),
        accesses: job.prepared.accesses.clone(),
        authorization: auth.clone(),
    };
    let ask = {
        let kernel = kernel.clone();
        move |request: ApprovalRequest| async move {
            let timeout = kernel.options.approval_timeout;
            match tokio::time::timeout(timeout, kernel.approver.approve(request)).await {
                Ok(Ok(o)) => o,
                Ok(Err(e)) => ApprovalOutcome::Rejected {
                    by: "approver-error".into(),
                    reason: format!("the approver failed: {e}"),
                },
                Err(_) => ApprovalOutcome::Rejected {
                    by: "approval-timeout".into(),
                    reason: format!("no answer within {} ms", timeout.as_millis()),
                },
            }
        }
    };
    let task = tokio::spawn(async move {
        if !auth.first_use {
            return ask(request).await;
        }
        let key = (request.tenant.clone(), request.tool.clone());
        let cell: Arc<OnceCell<ApprovalOutcome>> = kernel
            .first_use
            .entry(key.clone())
            .or_insert_with(|| Arc::new(OnceCell::new()))
            .clone();
        // The next first use after a rejection asks again; after an approval the authorizer
        // remembers it.
        let entry = FirstUseEntry {
            kernel: kernel.clone(),
            key,
            cell,
        };
        let (tenant, tool) = &entry.key;
        entry
            .cell
            .get_or_init(|| async {
                let o = ask(request).await;
                if matches!(o, ApprovalOutcome::Approved { .. }) {
                    kernel.authorizer.remember_approval(tenant, tool);
                }
                o
            })
            .await
            .clone()
    });
    Some(Box::pin(async move {
        let mut task = AbortOnDrop(task);
        match (&mut task.0).await {
            Ok(o) => Asked::Answer(o),
            Err(e) if e.is_panic() => Asked::Panicked(crate::panic_message(&*e.into_panic())),
            Err(_) => Asked::Panicked("the approval task was stopped".into()),
        }
    }))
}

/// Stage 5, invoke: the handler in its own task, under its deadline, watching the batch's
/// cancellation; then the output check.
async fn invoke(job: &mut CallJob, batch_cancel: &CancellationToken) -> Outcome {
    let Some(tool) = job.prepared.tool.clone() else {
        return Outcome::fail(Status::Error, "unknown-tool", "no such tool");
    };
    let _permit = tokio::select! {
        biased;
        _ = batch_cancel.cancelled() => {
            return Outcome::fail(Status::Cancelled, "cancelled", "the batch was cancelled before the call started");
        }
        p = job.kernel.ready.acquire(job.priority, job.seq, tool.id()) => p,
    };
    let Some(handler) = tool.handler().cloned() else {
        let why = crate::kernel::unrunnable_reason(tool.manifest());
        return Outcome::fail(
            Status::Error,
            "no-handler",
            format!("the tool `{}` cannot run: {why}", tool.id()),
        );
    };
    let call_cancel = batch_cancel.child_token();
    let ctx = ToolContext::new(
        job.batch.tenant.clone(),
        job.batch.id.clone(),
        &job.prepared.call.id,
        tool.manifest().clone(),
        call_cancel.clone(),
        job.kernel.provisions.clone(),
    );
    if let Err(e) = ctx.check_required() {
        job.secrets = ctx.handed_out();
        let code = match &e {
            crate::context::ContextError::Unavailable { what: "secret", .. } => {
                "secret-unavailable"
            }
            _ => "missing-need",
        };
        return Outcome::fail(
            Status::Error,
            code,
            format!("call `{}` cannot run: {e}", job.prepared.call.id),
        );
    }
    let deadline = tool
        .manifest()
        .limits
        .map(|l| Duration::from_millis(l.cpu_ms.get()))
        .or(job.kernel.options.default_timeout);
    job.started = Some(Instant::now());
    // The handler runs inside this call's own task; dropping its future (deadline, cancellation)
    // stops it, and a panic is caught and becomes this call's error.
    // The input's digest is taken before the handler runs when a record needs it; otherwise the
    // input moves into the handler instead of being copied.
    if job.kernel.sink.enabled() {
        job.input_sha256 = Some(provenance::sha256_json(&job.prepared.call.input));
    }
    let input = std::mem::take(&mut job.prepared.call.input);
    let run = std::panic::AssertUnwindSafe(handler.call(ctx.clone(), input)).catch_unwind();
    let sleep = async {
        match deadline {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    // Biased, so that a schedule replays: at one instant, an output that is ready wins over the
    // deadline and the cancellation.
    let joined = tokio::select! {
        biased;
        r = run => Some(r),
        _ = sleep => None,
        _ = batch_cancel.cancelled() => {
            call_cancel.cancel();
            job.ended = Some(Instant::now());
            job.secrets = ctx.handed_out();
            return Outcome::fail(Status::Cancelled, "cancelled", "the batch was cancelled while the call ran");
        }
    };
    job.secrets = ctx.handed_out();
    let Some(joined) = joined else {
        call_cancel.cancel();
        job.ended = Some(Instant::now());
        let ms = deadline.map(|d| d.as_millis()).unwrap_or(0);
        return Outcome::fail(
            Status::Timeout,
            "timeout",
            format!("call `{}` timed out after {ms} ms", job.prepared.call.id),
        );
    };
    job.ended = Some(Instant::now());
    match joined {
        Ok(Ok(output)) => match tool.check_output(&output) {
            Ok(()) => Outcome::ok(output),
            Err(d) => Outcome::fail(
                Status::Error,
                "invalid-output",
                format!(
                    "the output of `{}` fails its schema at `{}`: {}",
                    tool.id(),
                    d.pointer,
                    d.message
                ),
            ),
        },
        // A handler that gave up waiting (an HTTP tool's own timeoutMs) reports `timeout`.
        Ok(Err(ToolError { code, message })) if code == "timeout" => {
            Outcome::fail(Status::Timeout, &code, message)
        }
        Ok(Err(ToolError { code, message })) => Outcome::fail(Status::Error, &code, message),
        Err(payload) => {
            let what = crate::panic_message(payload.as_ref());
            Outcome::fail(
                Status::Error,
                "panic",
                format!("the handler of `{}` panicked: {what}", tool.id()),
            )
        }
    }
}

fn spawn_finish(
    job: CallJob,
    outcome: Outcome,
    approver: Option<String>,
    edges: Vec<EdgeRecord>,
    span: tracing::Span,
) {
    tokio::spawn(Box::pin(finish(job, outcome, approver, edges)).instrument(span));
}

/// Stage 6, record and deliver.
async fn finish(job: CallJob, outcome: Outcome, approver: Option<String>, edges: Vec<EdgeRecord>) {
    let approver = approver.or(job.approver.clone());
    let secrets = &job.secrets;
    let error = outcome.error.map(|e| CallError {
        code: e.code,
        message: provenance::redact(&e.message, secrets),
    });
    tracing::Span::current().record("status", outcome.status.as_str());
    let batch = &job.batch;
    let rel = |t: Option<Instant>| t.map(|t| t.saturating_duration_since(batch.started));
    let (started, ended) = match job.started {
        Some(_) => (rel(job.started), rel(job.ended)),
        None => (None, None),
    };
    let sink = job.kernel.sink.clone();
    if sink.enabled() {
        let record = CallRecord {
            batch: batch.id.to_string(),
            tenant: batch.tenant.to_string(),
            call: job.prepared.call.id.clone(),
            tool: job.prepared.call.tool.clone(),
            tool_version: job
                .prepared
                .tool
                .as_ref()
                .map(|t| t.manifest().version.to_string()),
            input_sha256: job
                .input_sha256
                .clone()
                .unwrap_or_else(|| provenance::sha256_json(&job.prepared.call.input)),
            output_sha256: outcome.output.as_ref().map(provenance::sha256_json),
            accesses: job
                .prepared
                .accesses
                .iter()
                .map(|a| AccessRecord {
                    kind: a.kind.as_str().to_owned(),
                    resource: a.resource.to_text(),
                    mode: a.mode().as_str().to_owned(),
                })
                .collect(),
            decision: job
                .authorization
                .as_ref()
                .map(|a| a.decision.as_str().to_owned()),
            decided_by: job.authorization.as_ref().map(|a| a.by.to_string()),
            approver: approver.clone(),
            started_at_ms: started.map(|d| batch.unix_ms(d)),
            ended_at_ms: ended.map(|d| batch.unix_ms(d)),
            outcome: outcome.status,
            error_code: error.as_ref().map(|e| e.code.clone()),
            error_message: error.as_ref().map(|e| e.message.clone()),
        };
        for e in edges {
            if let Err(why) = sink.record(Record::Edge(e)).await {
                tracing::error!(error = %why, "the provenance sink refused an edge record");
            }
        }
        if let Err(why) = sink.record(Record::Call(record)).await {
            tracing::error!(error = %why, "the provenance sink refused a call record");
        }
    }
    let result = CallResult {
        id: job.prepared.call.id,
        tool: job.prepared.call.tool,
        status: outcome.status,
        output: outcome.output,
        error,
        started,
        ended,
        authorization: job.authorization.clone(),
        approver,
    };
    job.batch.deliver(job.index, result, &job.kernel).await;
}
