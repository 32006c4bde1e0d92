//! Sluice for Python: the kernel as a native extension, `sluice._native`, under the thin Python
//! layer in `python/sluice/` (docs/python.md).
//!
//! The extension owns what must be exact: manifests validated as the CLI validates them, the
//! conflict order, policy, provenance, the model shapes. Python owns what is better there: the
//! decorator, JSON, and running a handler on the caller's event loop. The two meet in one place,
//! the batch's `Inbox`: when the kernel starts a call of a Python tool, the call is queued there
//! and the loop of the run that submitted it is woken (`loop.call_soon_threadsafe`) once for all
//! the calls ready at that moment; it starts each handler as an asyncio task, which settles a
//! `Settle` (the output as JSON text, or an error). A call the kernel stops (the batch
//! cancelled, a deadline) is skipped if not started yet, else its task is cancelled on the loop.
//!
//! Nothing here holds the GIL while it waits: the kernel runs on a tokio runtime of its own
//! (`runtime.rs`: the process's, made anew after a `fork()`), and a run resolves an asyncio
//! future the Python layer awaits. Every entry into Python from the runtime's threads goes
//! through `bridge::with_python`, counted, so that the interpreter's exit waits for those under
//! way and refuses new ones (`bridge.rs` says why).
//!
//! What a Python author writes (the extension is reached through the Python layer):
//!
//! ```text
//! import sluice
//!
//! @sluice.tool(id="notes.append", effects=[{"kind": "writes", "resource": "note:{name}"}])
//! async def append(name: str, text: str) -> dict: ...
//!
//! kernel = sluice.Kernel([append, *sluice.builtin(root=".")], provenance="turns.jsonl")
//! results = await kernel.run([{"id": "1", "tool": "notes.append",
//!                              "input": {"name": "a", "text": "x"}}], tenant="acme")
//! ```
//!
//! Tested from Python: `bindings/python/tests` (pytest), run by `tests/python.rs`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use dashmap::DashMap;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use serde_json::Value;
use sluice_kernel::adapters::{report, Api, ExportOptions, IngestOptions, ToolNames};
use sluice_kernel::authorize::{ApprovalFuture, ApprovalOutcome, ApprovalRequest, Approver};
use sluice_kernel::builtin::{self, BuiltinConfig};
use sluice_kernel::model::{self, ManifestSource, PackIndex, ValidateOptions};
use sluice_kernel::run::{
    BatchOptions, BatchResult, CallObserver, CallResult, Kernel as RustKernel, Waiting,
};
use sluice_kernel::transport::pack::{PackOptions, PackService, PackToken};
use sluice_kernel::transport::{
    Handler, HandlerFuture, Tool, ToolContext, ToolError, ToolRegistry,
};
use sluice_kernel::{Batch, Call, Error};
use sluice_policy::PolicyEngine;
use sluice_provenance::{Durability, ProvenanceLog};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

mod bridge;
mod runtime;

/// The inbox of each batch in flight, by batch id: a Python handler runs on the loop of the run
/// that submitted its call. Held as `Arc`s so that a handler takes one without the GIL.
type Loops = Arc<DashMap<String, Arc<Inbox>>>;

/// How a handler's task ended: its output as JSON text, or `(code, message)`.
type Settled = Result<String, (String, String)>;

/// One call's way back from its task: the answer's sender, the task once started, and whether
/// the kernel stopped the call.
#[derive(Default)]
struct SettleState {
    tx: Mutex<Option<oneshot::Sender<Settled>>>,
    task: Mutex<Option<Py<PyAny>>>,
    stopped: std::sync::atomic::AtomicBool,
}

/// Where a handler's task reports how it ended (called by the Python layer's done-callback).
#[pyclass(frozen)]
struct Settle(Arc<SettleState>);

#[pymethods]
impl Settle {
    /// The handler returned `output` (JSON text).
    fn done(&self, output: String) {
        self.send(Ok(output));
    }

    /// The handler failed: `code` (the exception's type, or `cancelled`) and `message`.
    fn fail(&self, code: String, message: String) {
        self.send(Err((code, message)));
    }

    /// Keeps the task that runs the handler.
    fn started(&self, task: Py<PyAny>) {
        if let Ok(mut t) = self.0.task.lock() {
            *t = Some(task);
        }
    }

    /// The task, for cancelling it (`None` before it started).
    fn task(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        let t = self.0.task.lock().ok()?;
        t.as_ref().map(|t| t.clone_ref(py))
    }
}

impl Settle {
    fn send(&self, settled: Settled) {
        if let Some(tx) = self.0.tx.lock().ok().and_then(|mut tx| tx.take()) {
            let _ = tx.send(settled);
        }
    }
}

/// A call waiting to be started on its loop.
struct Job {
    invoke: Arc<Py<PyAny>>,
    context: String,
    payload: String,
    settle: Arc<SettleState>,
}

/// A batch's way onto its event loop: the calls to start there, and whether a drain is already
/// on its way. The loop is woken once for every calls that are ready at once, not once a call
/// (each wake is a GIL entry and a socket write from the kernel's thread).
struct Inbox {
    event_loop: Py<PyAny>,
    starters: Starters,
    pending: Mutex<Vec<Job>>,
    scheduled: std::sync::atomic::AtomicBool,
}

/// An inbox, handed to the loop's `drain` callback.
#[pyclass(frozen)]
struct InboxRef(Arc<Inbox>);

#[pymethods]
impl InboxRef {
    /// Runs on the loop: starts every call waiting (skipping those the kernel stopped).
    fn drain(&self, py: Python<'_>) -> PyResult<()> {
        let inbox = &self.0;
        // Cleared first: a call queued from now on schedules a drain of its own.
        inbox
            .scheduled
            .store(false, std::sync::atomic::Ordering::SeqCst);
        let jobs = match inbox.pending.lock() {
            Ok(mut p) => std::mem::take(&mut *p),
            Err(_) => return Ok(()),
        };
        for job in jobs {
            if job.settle.stopped.load(std::sync::atomic::Ordering::SeqCst) {
                continue;
            }
            let settle = Py::new(py, Settle(job.settle.clone()))?;
            let started = inbox.starters.start.call1(
                py,
                (job.invoke.clone_ref(py), job.context, job.payload, settle),
            );
            if let Err(e) = started {
                Settle(job.settle).send(Err((
                    "internal".to_owned(),
                    format!("cannot start it on the event loop: {e}"),
                )));
            }
        }
        Ok(())
    }
}

impl Inbox {
    fn new(py: Python<'_>, event_loop: Py<PyAny>, starters: &Starters) -> Arc<Inbox> {
        Arc::new(Inbox {
            event_loop,
            starters: starters.clone_ref(py),
            pending: Mutex::new(Vec::new()),
            scheduled: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Resolves `future` (made on this loop) with `payload`, from any thread. Nothing when the
    /// interpreter is exiting: nobody awaits it any more.
    fn deliver(&self, future: &Py<PyAny>, payload: Option<String>) {
        bridge::with_python(|py| {
            let _ = self.event_loop.call_method1(
                py,
                "call_soon_threadsafe",
                (
                    self.starters.deliver.clone_ref(py),
                    future.clone_ref(py),
                    payload,
                ),
            );
        });
    }

    /// Runs `invoke(context, payload)` (an async Python callable) as a task on this loop; its
    /// answer. Dropping the future before it answers cancels the task.
    fn call(
        self: &Arc<Self>,
        invoke: &Arc<Py<PyAny>>,
        context: String,
        payload: String,
    ) -> impl std::future::Future<Output = Settled> + Send + 'static {
        let (tx, rx) = oneshot::channel();
        let settle = Arc::new(SettleState {
            tx: Mutex::new(Some(tx)),
            ..SettleState::default()
        });
        let queued = self.pending.lock().map(|mut p| {
            p.push(Job {
                invoke: invoke.clone(),
                context,
                payload,
                settle: settle.clone(),
            })
        });
        let woken = match queued {
            Err(_) => Err("the batch's inbox is unusable after a panic".to_owned()),
            // A drain is already on its way: it takes this call too.
            Ok(())
                if self
                    .scheduled
                    .swap(true, std::sync::atomic::Ordering::SeqCst) =>
            {
                Ok(())
            }
            Ok(()) => {
                let me = self.clone();
                bridge::with_python(|py| {
                    let drain = Py::new(py, InboxRef(me))?.getattr(py, "drain")?;
                    self.event_loop
                        .call_method1(py, "call_soon_threadsafe", (drain,))
                        .map(|_| ())
                })
                .unwrap_or_else(|| {
                    Err(pyo3::exceptions::PyRuntimeError::new_err(
                        "the Python interpreter is exiting",
                    ))
                })
                .map_err(|e| format!("cannot wake the event loop: {e}"))
            }
        };
        let guard = CancelOnDrop {
            settle: Some(settle),
            inbox: self.clone(),
        };
        async move {
            let mut guard = guard;
            woken.map_err(|why| ("internal".to_owned(), why))?;
            let settled = rx.await;
            // Settled (or gone): nothing left to cancel.
            guard.settle = None;
            settled.unwrap_or_else(|_| {
                Err((
                    "internal".to_owned(),
                    "its task ended without settling (its event loop closed?)".to_owned(),
                ))
            })
        }
    }
}

/// The Python layer's helpers, run on an event loop: `start(invoke, context, payload, settle)`
/// makes an asyncio task of `invoke(context, payload)` that settles `settle`; `cancel(settle)`
/// cancels it; `deliver(future, payload)` resolves an asyncio future the layer awaits.
struct Starters {
    start: Py<PyAny>,
    cancel: Py<PyAny>,
    deliver: Py<PyAny>,
}

impl Starters {
    fn clone_ref(&self, py: Python<'_>) -> Starters {
        Starters {
            start: self.start.clone_ref(py),
            cancel: self.cancel.clone_ref(py),
            deliver: self.deliver.clone_ref(py),
        }
    }
}

/// Stops a call whose future the kernel dropped before its task settled: a call not started
/// yet is skipped by the drain; a started one is cancelled on its loop (after any drain under
/// way, since both run there).
struct CancelOnDrop {
    settle: Option<Arc<SettleState>>,
    inbox: Arc<Inbox>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(settle) = self.settle.take() {
            settle
                .stopped
                .store(true, std::sync::atomic::Ordering::SeqCst);
            let inbox = &self.inbox;
            bridge::with_python(|py| {
                if let Ok(settle) = Py::new(py, Settle(settle)) {
                    let _ = inbox.event_loop.call_method1(
                        py,
                        "call_soon_threadsafe",
                        (inbox.starters.cancel.clone_ref(py), settle),
                    );
                }
            });
        }
    }
}

/// A Python tool's handler, run on the event loop of the run that submitted the call.
struct PyHandler {
    invoke: Arc<Py<PyAny>>,
    loops: Loops,
}

impl Handler for PyHandler {
    fn call(&self, ctx: ToolContext, input: Value) -> HandlerFuture {
        let inbox = self.loops.get(ctx.batch_id()).map(|l| l.value().clone());
        let context = serde_json::json!({
            "tenant": ctx.tenant(),
            "batch": ctx.batch_id(),
            "call": ctx.call_id(),
            "tool": ctx.manifest().id.as_str(),
            "idempotency_key": ctx.idempotency_key(),
            "fencing_token": ctx.fencing_token(),
        })
        .to_string();
        let answer = inbox.map(|inbox| inbox.call(&self.invoke, context, input.to_string()));
        Box::pin(async move {
            let Some(answer) = answer else {
                return Err(ToolError::new(
                    "internal",
                    "the batch has no event loop to run Python on",
                ));
            };
            match answer.await {
                Ok(text) => serde_json::from_str(&text).map_err(|e| {
                    ToolError::new(
                        "invalid-output",
                        format!("the handler's output is not JSON: {e}"),
                    )
                }),
                Err((code, message)) => Err(ToolError::new(code, message)),
            }
        })
    }
}

/// Asks a Python approver (`approver=`) on the loop of the run whose call asks: the Python
/// layer's wrapper answers `{"approved", "by", "reason"}` as JSON text.
struct PyApprover {
    ask: Arc<Py<PyAny>>,
    inbox: Arc<Inbox>,
}

impl Approver for PyApprover {
    fn approve(&self, request: ApprovalRequest) -> ApprovalFuture {
        let payload = serde_json::json!({
            "tenant": request.tenant,
            "call": request.call_id,
            "tool": request.tool,
            "input": request.input,
            "accesses": request.accesses.iter().map(|a| serde_json::json!({
                "kind": a.kind.as_str(), "resource": a.resource.to_text()})).collect::<Vec<_>>(),
            "decided_by": request.authorization.by.to_string(),
        })
        .to_string();
        let answer = self.inbox.call(&self.ask, String::new(), payload);
        Box::pin(async move {
            let failed = |why: String| Error::ApproverFailed { why };
            let text = answer
                .await
                .map_err(|(code, message)| failed(format!("{code}: {message}")))?;
            let v: Value = serde_json::from_str(&text).map_err(|e| failed(e.to_string()))?;
            let by = v
                .get("by")
                .and_then(Value::as_str)
                .unwrap_or("python")
                .to_owned();
            Ok(match v.get("approved").and_then(Value::as_bool) {
                Some(true) => ApprovalOutcome::Approved { by },
                _ => ApprovalOutcome::Rejected {
                    by,
                    reason: v
                        .get("reason")
                        .and_then(Value::as_str)
                        .unwrap_or("the approver said no")
                        .to_owned(),
                },
            })
        })
    }
}

/// What each call of a batch waited for before it started, and why (the conflicting calls, each
/// with the resource and the kind of conflict; an ask), added to its result as `waited`.
#[derive(Default)]
struct Waits(DashMap<String, Value>);

impl CallObserver for Waits {
    fn waiting(&self, call: &Call, waiting: &Waiting<'_>) {
        if !waiting.is_waiting() {
            return;
        }
        let calls: Vec<Value> = waiting
            .calls
            .iter()
            .map(|c| {
                serde_json::json!({"batch": &*c.batch, "call": &*c.call, "tool": c.tool,
                                   "resource": c.resource, "kind": c.kind})
            })
            .collect();
        let mut v = serde_json::json!({"calls": calls});
        if let Some(o) = v.as_object_mut() {
            if waiting.unnamed + waiting.shared > 0 {
                o.insert("unnamed".into(), (waiting.unnamed + waiting.shared).into());
            }
            if let Some(a) = waiting.approval {
                o.insert("approval".into(), a.by.to_string().into());
            }
        }
        self.0.insert(call.id.clone(), v);
    }
}

impl Waits {
    /// A result as JSON, with what it waited for.
    fn result_json(&self, r: &CallResult) -> Value {
        let mut v = report::result_json(r);
        if let (Some(o), Some((_, waited))) = (v.as_object_mut(), self.0.remove(&r.id)) {
            o.insert("waited".into(), waited);
        }
        v
    }

    /// A batch's results as JSON (`{"results", "makespan_ms"}`), each with what it waited for.
    fn run_json(&self, result: &BatchResult) -> Value {
        serde_json::json!({
            "results": result.results.iter().map(|r| self.result_json(r)).collect::<Vec<_>>(),
            "makespan_ms": report::ms(result.makespan),
        })
    }
}

/// The kernel, from Python: `sluice.Kernel` wraps it.
#[pyclass(frozen, name = "Kernel")]
struct PyKernel {
    kernel: RustKernel,
    loops: Loops,
    names: ToolNames,
    /// The process that made it: after `fork()` a child must make its own.
    pid: u32,
    starters: Starters,
    /// The Python approver, asked on the loop of the run whose call asks.
    approver: Option<Arc<Py<PyAny>>>,
}

/// Raises `error` as a `ValueError` (a bad manifest, batch or option names what and where).
fn value_error(error: Error) -> PyErr {
    PyValueError::new_err(error.to_string())
}

/// The model API named `name` (`openai`, `openai-responses`, `anthropic`, `gemini`, `mcp`).
fn api(name: &str) -> PyResult<Api> {
    Api::ALL
        .into_iter()
        .find(|a| a.as_str() == name)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "no model API `{name}`: openai, openai-responses, anthropic, gemini or mcp"
            ))
        })
}

/// Parses JSON text that Python made, naming `what` when it is not JSON.
fn parse(text: &str, what: &str) -> PyResult<Value> {
    serde_json::from_str(text)
        .map_err(|e| PyValueError::new_err(format!("{what} is not JSON: {e}")))
}

#[pymethods]
impl PyKernel {
    /// A kernel of `tools` (`(manifest JSON text, invoke)` pairs; `invoke(ctx, input)` is an
    /// async callable taking and returning JSON text), the built-in tools confined to `root`
    /// when given, `start` and `cancel` the Python layer's task starters.
    ///
    /// `policy` is a policy file (TOML or JSON, docs/policy.md) and `provenance` a log file
    /// (durable: a call's record is on disk before its result is reported), as `sluice run`
    /// takes them.
    ///
    /// `timeout_ms` is every call's deadline unless its manifest's `limits.cpuMs` sets one: a
    /// call past it is stopped (its task cancelled) and ends `timeout`.
    #[new]
    ///
    /// `approver(context, payload)` (an async callable taking the ask as JSON text and
    /// answering `{"approved", "by", "reason"}` as JSON text) answers the calls the policy asks
    /// about; without one every ask is rejected (fail closed).
    ///
    /// `durability` is the log's: `durable` (the default) or `buffered` (faster: records reach
    /// the disk at each flush, before a checkpoint, and when the log closes).
    ///
    /// `packs` are Kindgi packs, `(index, url, token, token_env)`: every tool of the index runs
    /// through the pack service at `url` (the token given, else read from `token_env`). Each
    /// service is checked against its index now (`GET /v1/info`): one that serves another pack,
    /// tool or version, or refuses the token, raises `ValueError`; one that cannot be reached is
    /// let be (its calls fail `pack-unavailable` until it is back).
    #[pyo3(signature = (tools, start, cancel, deliver, root=None, policy=None, provenance=None, timeout_ms=None, approver=None, durability="durable", packs=Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        tools: Vec<(String, Py<PyAny>)>,
        start: Py<PyAny>,
        cancel: Py<PyAny>,
        deliver: Py<PyAny>,
        root: Option<PathBuf>,
        policy: Option<PathBuf>,
        provenance: Option<PathBuf>,
        timeout_ms: Option<u64>,
        approver: Option<Py<PyAny>>,
        durability: &str,
        packs: Vec<(PathBuf, String, Option<String>, String)>,
    ) -> PyResult<Self> {
        let durability = match durability {
            "durable" => Durability::Durable,
            "buffered" => Durability::Buffered,
            other => {
                return Err(PyValueError::new_err(format!(
                    "durability `{other}`: `durable` or `buffered`"
                )))
            }
        };
        let starters = Starters {
            start,
            cancel,
            deliver,
        };
        let loops: Loops = Arc::default();
        runtime::ensure().map_err(|e| {
            PyRuntimeError::new_err(format!("sluice cannot start its tokio runtime: {e}"))
        })?;
        let mut builder = RustKernel::builder();
        if let Some(ms) = timeout_ms {
            builder = builder.default_timeout(std::time::Duration::from_millis(ms));
        }
        if let Some(path) = policy {
            let engine = PolicyEngine::from_path(&path).map_err(|e| {
                PyValueError::new_err(format!("the policy `{}`: {e}", path.display()))
            })?;
            builder = builder.authorizer(engine);
        }
        if let Some(path) = provenance {
            let log = ProvenanceLog::open(&path, durability).map_err(|e| {
                PyValueError::new_err(format!("the provenance log `{}`: {e}", path.display()))
            })?;
            builder = builder.provenance(log);
        }
        if let Some(root) = root {
            let root = std::fs::canonicalize(&root).map_err(|e| {
                PyValueError::new_err(format!("cannot use `{}` as the root: {e}", root.display()))
            })?;
            builder =
                builder.tools(builtin::registry(BuiltinConfig::new(root)).map_err(value_error)?);
        }
        for (text, invoke) in tools {
            let value = parse(&text, "a manifest")?;
            let id = value
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned();
            let source = ManifestSource {
                path: PathBuf::from(format!("python:{id}")),
                pointer: String::new(),
            };
            let report = model::validate(&value, ValidateOptions::default());
            let manifest = match report.manifest {
                Some(m) if report.errors.is_empty() => m,
                _ => {
                    return Err(value_error(Error::InvalidManifest {
                        source_name: source.to_string(),
                        errors: report.errors,
                    }))
                }
            };
            let handler = PyHandler {
                invoke: Arc::new(invoke),
                loops: loops.clone(),
            };
            let tool = Tool::new(manifest, source, Some(Arc::new(handler))).map_err(value_error)?;
            builder = builder.tool(tool);
        }
        let mut services = Vec::new();
        for (index, url, token, token_env) in packs {
            let index = PackIndex::read(&index).map_err(value_error)?;
            let token = match token {
                Some(t) => PackToken::new(&t),
                None => PackToken::from_env(&index.pack_id, &token_env).map_err(value_error)?,
            };
            let service = {
                let _runtime = runtime::runtime().enter();
                PackService::new(&index, &url, token, PackOptions::default())
                    .map_err(value_error)?
            };
            let mut registry = ToolRegistry::new();
            service
                .register(&index, &mut registry)
                .map_err(value_error)?;
            builder = builder.tools(registry);
            services.push(service);
        }
        let kernel = py
            .detach(|| {
                let runtime = runtime::runtime();
                let _inside = runtime.enter();
                for service in &services {
                    match runtime.block_on(service.check()) {
                        Ok(()) | Err(Error::PackUnavailable { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                builder.build()
            })
            .map_err(value_error)?;
        let names = ToolNames::new(kernel.tools()).map_err(value_error)?;
        Ok(PyKernel {
            kernel,
            loops,
            names,
            pid: std::process::id(),
            starters,
            approver: approver.map(Arc::new),
        })
    }

    /// Runs a batch (the JSON text of `{"tenant", "calls"}`, as `sluice run` reads it) with
    /// its Python handlers on `event_loop`; resolves `future` (made on that loop) with the
    /// results' JSON text, in submission order. The `Canceller` it returns cancels the batch's
    /// unfinished calls (the layer calls it when the awaiting task is cancelled).
    fn run(
        &self,
        py: Python<'_>,
        batch: String,
        event_loop: Py<PyAny>,
        future: Py<PyAny>,
    ) -> PyResult<Canceller> {
        self.here()?;
        let batch = Batch::from_value(&parse(&batch, "the batch")?).map_err(value_error)?;
        self.spawn(py, batch, event_loop, future, |result, waits| {
            waits.run_json(&result).to_string()
        })
    }

    /// Runs the tool calls of a model's response in `api`'s shape (JSON text) as one batch of
    /// `tenant`; resolves `future` with `{"results": [...], "reply": [...]}` as JSON text:
    /// Sluice's results, and the messages (or items) that API expects next, in the model's
    /// order.
    fn run_response(
        &self,
        py: Python<'_>,
        api_name: &str,
        response: String,
        tenant: &str,
        event_loop: Py<PyAny>,
        future: Py<PyAny>,
    ) -> PyResult<Canceller> {
        self.here()?;
        let api = api(api_name)?;
        let doc = parse(&response, "the response")?;
        let batch = api
            .batch(tenant, &doc, &self.names, &IngestOptions::default())
            .map_err(value_error)?;
        let names = self.names.clone();
        self.spawn(py, batch, event_loop, future, move |result, waits| {
            let reply = api.results(&result.results, &names);
            let mut out = waits.run_json(&result);
            if let Some(o) = out.as_object_mut() {
                o.insert("reply".into(), Value::Array(reply));
            }
            out.to_string()
        })
    }

    /// The tools as `api`'s tool definitions (JSON text of a list), each id's highest version
    /// (`all_versions` for every version), OpenAI's strict schemas when `strict`.
    #[pyo3(signature = (api_name, all_versions=false, strict=false))]
    fn tools_for(&self, api_name: &str, all_versions: bool, strict: bool) -> PyResult<String> {
        self.here()?;
        let options = ExportOptions::default()
            .with_all_versions(all_versions)
            .with_strict(strict);
        let exported = api(api_name)?.export(self.kernel.tools(), &self.names, &options);
        Ok(Value::Array(exported.definitions).to_string())
    }

    /// Opens a batch of `tenant` to submit calls into one at a time (its Python handlers on
    /// `event_loop`); each starts as soon as it may.
    fn open(&self, py: Python<'_>, tenant: &str, event_loop: Py<PyAny>) -> PyResult<PyBatch> {
        self.here()?;
        let _runtime = runtime::runtime().enter();
        let waits = Arc::new(Waits::default());
        let inbox = Inbox::new(py, event_loop, &self.starters);
        let options = self.options(&inbox, &waits);
        let mut handle = self
            .kernel
            .open_with(tenant, options)
            .map_err(value_error)?;
        let id = handle.id().to_owned();
        self.loops.insert(id.clone(), inbox.clone());
        let forget = Forget(self.loops.clone(), id);
        let cancel = handle.cancellation_token();
        let (commands, mut orders) = mpsc::unbounded_channel::<Command>();
        let (done, completions) = mpsc::unbounded_channel::<String>();
        // The batch's own task: it submits what Python sends and forwards each completion.
        runtime::runtime().spawn(async move {
            let _forget = forget;
            let mut open = true;
            loop {
                tokio::select! {
                    command = orders.recv(), if open => match command {
                        Some(Command::Submit(call, answer)) => {
                            let _ = answer.send(handle.submit(call).map_err(|e| e.to_string()));
                        }
                        Some(Command::Close) | None => {
                            handle.close();
                            open = false;
                        }
                    },
                    next = handle.next_completion() => match next {
                        Some(r) => {
                            let _ = done.send(waits.result_json(&r).to_string());
                        }
                        None => break,
                    },
                }
            }
        });
        Ok(PyBatch {
            commands,
            completions: Arc::new(tokio::sync::Mutex::new(completions)),
            cancel,
            inbox,
        })
    }

    /// For `tenant`: (calls not finished, calls its conflict index still remembers); both
    /// return to 0 when the tenant is idle.
    fn load(&self, tenant: &str) -> PyResult<(usize, usize)> {
        self.here()?;
        Ok(self.kernel.tenant_load(tenant))
    }

    /// The registered tools' manifests, as JSON text (a list).
    fn manifests(&self) -> String {
        let all: Vec<Value> = self
            .kernel
            .tools()
            .iter()
            .map(|t| t.manifest().to_value())
            .collect();
        Value::Array(all).to_string()
    }
}

impl PyKernel {
    /// A batch's options: its approver asks on the batch's loop, and `waits` watches what its
    /// calls wait for.
    fn options(&self, inbox: &Arc<Inbox>, waits: &Arc<Waits>) -> BatchOptions {
        let options = BatchOptions::default().with_observer(waits.clone());
        match &self.approver {
            Some(ask) => options.with_approver(Arc::new(PyApprover {
                ask: ask.clone(),
                inbox: inbox.clone(),
            })),
            None => options,
        }
    }

    /// Refuses a kernel made in another process (before a `fork()`): its runtime's threads did
    /// not follow, and any state a parent thread was changing is half-changed here.
    fn here(&self) -> PyResult<()> {
        let pid = std::process::id();
        if pid == self.pid {
            return Ok(());
        }
        Err(PyRuntimeError::new_err(format!(
            "this sluice.Kernel was made in process {} before fork(): it cannot run in process              {pid}; make a new Kernel in this process",
            self.pid
        )))
    }

    /// Starts `batch` with its Python handlers on `event_loop`, and resolves `future` with
    /// `render` of its result once it ends. The loop is forgotten however the run ends.
    fn spawn(
        &self,
        py: Python<'_>,
        batch: Batch,
        event_loop: Py<PyAny>,
        future: Py<PyAny>,
        render: impl FnOnce(BatchResult, Arc<Waits>) -> String + Send + 'static,
    ) -> PyResult<Canceller> {
        let runtime = runtime::runtime();
        let _entered = runtime.enter();
        let waits = Arc::new(Waits::default());
        let inbox = Inbox::new(py, event_loop, &self.starters);
        let options = self.options(&inbox, &waits);
        let mut handle = self
            .kernel
            .open_with(&batch.tenant, options)
            .map_err(value_error)?;
        let id = handle.id().to_owned();
        let cancel = handle.cancellation_token();
        self.loops.insert(id.clone(), inbox.clone());
        let forget = Forget(self.loops.clone(), id);
        for call in batch.calls {
            handle.submit(call).map_err(value_error)?;
        }
        handle.close();
        runtime.spawn(async move {
            let result = handle.finish().await;
            drop(forget);
            let text = render(result, waits);
            inbox.deliver(&future, Some(text));
        });
        Ok(Canceller(cancel))
    }
}

/// Cancels a run's batch: calls waiting are not started, calls running are stopped.
#[pyclass(frozen)]
struct Canceller(CancellationToken);

#[pymethods]
impl Canceller {
    /// Cancels the batch's unfinished calls.
    fn cancel(&self) {
        self.0.cancel();
    }
}

/// What Python asks of an open batch's task.
enum Command {
    Submit(Call, oneshot::Sender<Result<(), String>>),
    Close,
}

/// A batch open for streaming submission: `sluice.Batch` wraps it.
#[pyclass(frozen, name = "Batch")]
struct PyBatch {
    commands: mpsc::UnboundedSender<Command>,
    completions: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<String>>>,
    cancel: CancellationToken,
    /// Where completions are delivered.
    inbox: Arc<Inbox>,
}

#[pymethods]
impl PyBatch {
    /// Submits the next call (the JSON text of `{"id", "tool", "input"}`); its synchronous
    /// stages run now. Raises `ValueError` for a malformed call, a duplicate id, or a batch
    /// already closed.
    fn submit(&self, py: Python<'_>, call: String) -> PyResult<()> {
        let doc = parse(&call, "the call")?;
        let wrapped = serde_json::json!({"calls": [doc]});
        let mut batch = Batch::from_value(&wrapped).map_err(value_error)?;
        let call = batch
            .calls
            .pop()
            .ok_or_else(|| PyValueError::new_err("the call is missing"))?;
        let closed = || PyValueError::new_err("the batch is closed: no call can be added");
        let (answer, answered) = oneshot::channel();
        self.commands
            .send(Command::Submit(call, answer))
            .map_err(|_| closed())?;
        // The batch's task answers at once; the GIL is not held meanwhile.
        match py.detach(|| answered.blocking_recv()) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(why)) => Err(PyValueError::new_err(why)),
            Err(_) => Err(closed()),
        }
    }

    /// No more calls will come: the batch ends when the submitted ones have.
    fn close(&self) {
        let _ = self.commands.send(Command::Close);
    }

    /// Cancels the batch: calls waiting are not started, calls running are stopped.
    fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Resolves `future` (made on the batch's loop) with the next call to complete (its
    /// result's JSON text), in completion order; with `None` once the batch has ended and every
    /// completion has been read.
    fn next(&self, future: Py<PyAny>) {
        let completions = self.completions.clone();
        let inbox = self.inbox.clone();
        runtime::runtime().spawn(async move {
            let next = completions.lock().await.recv().await;
            inbox.deliver(&future, next);
        });
    }
}

/// Forgets a batch's event loop when dropped.
struct Forget(Loops, String);

impl Drop for Forget {
    fn drop(&mut self) {
        self.0.remove(&self.1);
    }
}

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyKernel>()?;
    m.add_class::<PyBatch>()?;
    m.add_class::<Canceller>()?;
    m.add_function(wrap_pyfunction!(bridge::at_exit, m)?)?;
    m.add_class::<Settle>()?;
    m.add_class::<InboxRef>()?;
    Ok(())
}
