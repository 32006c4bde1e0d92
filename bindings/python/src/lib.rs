//! Sluice for Python: the kernel as a native extension, `sluice._native`, under the thin Python
//! layer in `python/sluice/` (docs/python.md).
//!
//! The extension owns what must be exact: manifests validated as the CLI validates them, the
//! conflict order, policy, provenance, the model shapes. Python owns what is better there: the
//! decorator, JSON, and running a handler on the caller's event loop. The two meet in one place,
//! `PyHandler`: when the kernel starts a call of a Python tool, it asks the loop of the run that
//! submitted the call (`loop.call_soon_threadsafe`) to start the handler as an asyncio task, and
//! waits for the task to settle a `Settle` (the output as JSON text, or an error). A call the
//! kernel stops (the batch cancelled, a deadline) cancels its task the same way.
//!
//! Nothing here holds the GIL while it waits: the kernel runs on a tokio runtime of its own
//! (`pyo3-async-runtimes`), and a run is an asyncio awaitable (`future_into_py`).
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
use sluice_kernel::adapters::report;
use sluice_kernel::builtin::{self, BuiltinConfig};
use sluice_kernel::model::{self, ManifestSource, ValidateOptions};
use sluice_kernel::run::{BatchOptions, Kernel as RustKernel};
use sluice_kernel::transport::{Handler, HandlerFuture, Tool, ToolContext, ToolError};
use sluice_kernel::{Batch, Error};
use sluice_policy::PolicyEngine;
use sluice_provenance::{Durability, ProvenanceLog};
use tokio::sync::oneshot;

/// The event loop of each batch in flight, by batch id: a Python handler runs on the loop of
/// the run that submitted its call.
type Loops = Arc<DashMap<String, Py<PyAny>>>;

/// How a handler's task ended: its output as JSON text, or `(code, message)`.
type Settled = Result<String, (String, String)>;

/// Where a handler's task reports how it ended (called by the Python layer's done-callback).
#[pyclass(frozen)]
struct Settle {
    tx: Mutex<Option<oneshot::Sender<Settled>>>,
    /// The asyncio task, once started: a call the kernel stops is cancelled through it.
    task: Mutex<Option<Py<PyAny>>>,
}

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
        if let Ok(mut t) = self.task.lock() {
            *t = Some(task);
        }
    }

    /// The task, for cancelling it (`None` before it started).
    fn task(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        let t = self.task.lock().ok()?;
        t.as_ref().map(|t| t.clone_ref(py))
    }
}

impl Settle {
    fn send(&self, settled: Settled) {
        if let Some(tx) = self.tx.lock().ok().and_then(|mut tx| tx.take()) {
            let _ = tx.send(settled);
        }
    }
}

/// A Python tool's handler: starts `start(invoke, ctx, input, settle)` on the run's event loop
/// (the Python layer's `_start`, which makes the task and settles `settle` when it ends).
struct PyHandler {
    start: Py<PyAny>,
    cancel: Py<PyAny>,
    invoke: Py<PyAny>,
    loops: Loops,
}

/// Cancels a started handler's task when the kernel drops its call before it settled.
struct CancelOnDrop {
    settle: Option<Py<Settle>>,
    event_loop: Py<PyAny>,
    cancel: Py<PyAny>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(settle) = self.settle.take() {
            Python::attach(|py| {
                let _ = self.event_loop.call_method1(
                    py,
                    "call_soon_threadsafe",
                    (self.cancel.clone_ref(py), settle),
                );
            });
        }
    }
}

impl Handler for PyHandler {
    fn call(&self, ctx: ToolContext, input: Value) -> HandlerFuture {
        let event_loop = self
            .loops
            .get(ctx.batch_id())
            .map(|l| Python::attach(|py| l.clone_ref(py)));
        let context = serde_json::json!({
            "tenant": ctx.tenant(),
            "batch": ctx.batch_id(),
            "call": ctx.call_id(),
            "tool": ctx.manifest().id.as_str(),
            "idempotency_key": ctx.idempotency_key(),
            "fencing_token": ctx.fencing_token(),
        })
        .to_string();
        let (tx, rx) = oneshot::channel();
        let started = event_loop.ok_or_else(|| {
            ToolError::new(
                "internal",
                "the batch has no event loop to run a Python handler on",
            )
        });
        let started = started.and_then(|event_loop| {
            Python::attach(|py| {
                let settle = Py::new(
                    py,
                    Settle {
                        tx: Mutex::new(Some(tx)),
                        task: Mutex::new(None),
                    },
                )?;
                event_loop.call_method1(
                    py,
                    "call_soon_threadsafe",
                    (
                        self.start.clone_ref(py),
                        self.invoke.clone_ref(py),
                        context,
                        input.to_string(),
                        settle.clone_ref(py),
                    ),
                )?;
                Ok::<_, PyErr>(CancelOnDrop {
                    settle: Some(settle),
                    event_loop,
                    cancel: self.cancel.clone_ref(py),
                })
            })
            .map_err(|e| ToolError::new("internal", format!("cannot start the handler: {e}")))
        });
        Box::pin(async move {
            let mut guard = started?;
            let settled = rx.await;
            // Settled (or gone): nothing left to cancel.
            guard.settle = None;
            match settled {
                Ok(Ok(text)) => serde_json::from_str(&text).map_err(|e| {
                    ToolError::new(
                        "invalid-output",
                        format!("the handler's output is not JSON: {e}"),
                    )
                }),
                Ok(Err((code, message))) => Err(ToolError::new(code, message)),
                Err(_) => Err(ToolError::new(
                    "internal",
                    "the handler's task ended without settling (its event loop closed?)",
                )),
            }
        })
    }
}

/// The kernel, from Python: `sluice.Kernel` wraps it.
#[pyclass(frozen, name = "Kernel")]
struct PyKernel {
    kernel: RustKernel,
    loops: Loops,
}

/// Raises `error` as a `ValueError` (a bad manifest, batch or option names what and where).
fn value_error(error: Error) -> PyErr {
    PyValueError::new_err(error.to_string())
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
    #[new]
    #[pyo3(signature = (tools, start, cancel, root=None, policy=None, provenance=None))]
    fn new(
        py: Python<'_>,
        tools: Vec<(String, Py<PyAny>)>,
        start: Py<PyAny>,
        cancel: Py<PyAny>,
        root: Option<PathBuf>,
        policy: Option<PathBuf>,
        provenance: Option<PathBuf>,
    ) -> PyResult<Self> {
        let loops: Loops = Arc::default();
        let mut builder = RustKernel::builder();
        if let Some(path) = policy {
            let engine = PolicyEngine::from_path(&path).map_err(|e| {
                PyValueError::new_err(format!("the policy `{}`: {e}", path.display()))
            })?;
            builder = builder.authorizer(engine);
        }
        if let Some(path) = provenance {
            let log = ProvenanceLog::open(&path, Durability::Durable).map_err(|e| {
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
            let value: Value = serde_json::from_str(&text)
                .map_err(|e| PyValueError::new_err(format!("a manifest is not JSON: {e}")))?;
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
                start: start.clone_ref(py),
                cancel: cancel.clone_ref(py),
                invoke,
                loops: loops.clone(),
            };
            let tool = Tool::new(manifest, source, Some(Arc::new(handler))).map_err(value_error)?;
            builder = builder.tool(tool);
        }
        let kernel = py.detach(|| {
            let _runtime = pyo3_async_runtimes::tokio::get_runtime().enter();
            builder.build()
        });
        Ok(PyKernel {
            kernel: kernel.map_err(value_error)?,
            loops,
        })
    }

    /// Runs a batch (the JSON text of `{"tenant", "calls"}`, as `sluice run` reads it) with
    /// its Python handlers on `event_loop`; resolves with the results' JSON text, in submission
    /// order. Cancelling the awaiting task cancels the batch's unfinished calls.
    fn run<'py>(
        &self,
        py: Python<'py>,
        batch: String,
        event_loop: Py<PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let doc: Value = serde_json::from_str(&batch)
            .map_err(|e| PyValueError::new_err(format!("the batch is not JSON: {e}")))?;
        let batch = Batch::from_value(&doc).map_err(value_error)?;
        let kernel = self.kernel.clone();
        let loops = self.loops.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let mut handle = kernel
                .open_with(&batch.tenant, BatchOptions::default())
                .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
            let id = handle.id().to_owned();
            loops.insert(id.clone(), event_loop);
            // The loop is forgotten however the run ends (cancelled included).
            let _forget = Forget(loops, id);
            for call in batch.calls {
                handle.submit(call).map_err(value_error)?;
            }
            handle.close();
            let result = handle.finish().await;
            Ok(report::run_json(&result).to_string())
        })
    }

    /// For `tenant`: (calls not finished, calls its conflict index still remembers); both
    /// return to 0 when the tenant is idle.
    fn load(&self, tenant: &str) -> (usize, usize) {
        self.kernel.tenant_load(tenant)
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
    m.add_class::<Settle>()?;
    Ok(())
}
