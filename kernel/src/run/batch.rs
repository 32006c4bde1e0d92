//! A batch in flight: calls submitted one at a time, results delivered as they come, and the
//! batch's end (its record, and telling the tenant's domain that its calls may be forgotten).
//!
//! The batch owns delivery: [`super::dispatch`] takes a call through its stages and hands back
//! the rest of its way as a future of its [`CallResult`]; the batch spawns it, stores the result,
//! sends the completion and ends after its last call.

use std::collections::HashMap;
use std::fmt;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use super::dispatch;
use super::options::BatchOptions;
use super::result::{BatchResult, CallResult};
use super::shared::{BatchInfo, KernelInner};
use crate::error::{Error, Result};
use crate::model::Call;
use crate::order::PreparedCall;
use crate::provenance::{BatchRecord, Record};
use crate::transport::Tool;

/// A tool a kernel found by name ([`Kernel::resolve`](super::Kernel::resolve)): a call of it
/// submitted with [`BatchHandle::submit_resolved`] to a batch of that kernel is not looked up
/// again. A front end that must answer an unknown name itself (the gateway's MCP `tools/call`
/// answers -32602) finds the tool once, for both.
#[derive(Debug, Clone)]
pub struct ResolvedTool {
    tool: Arc<Tool>,
    /// The kernel whose registry holds it: on another kernel's batch the call is resolved
    /// there, as any call is.
    kernel: Weak<KernelInner>,
}

impl ResolvedTool {
    pub(crate) fn new(tool: Arc<Tool>, kernel: &Arc<KernelInner>) -> Self {
        ResolvedTool {
            tool,
            kernel: Arc::downgrade(kernel),
        }
    }

    /// The tool.
    pub fn tool(&self) -> &Arc<Tool> {
        &self.tool
    }
}

#[derive(Default)]
struct BatchState {
    ids: HashMap<String, usize>,
    results: Vec<Option<CallResult>>,
    positions: Vec<usize>,
    remaining: usize,
    closed: bool,
    done: bool,
    sender: Option<mpsc::UnboundedSender<usize>>,
}

/// The state of one batch: what its calls know of it, and its results as they are delivered.
struct BatchShared {
    info: Arc<BatchInfo>,
    state: Mutex<BatchState>,
    done: Notify,
}

impl BatchShared {
    fn note_position(&self, position: usize) {
        if let Ok(mut st) = self.state.lock() {
            st.positions.push(position);
        }
    }

    /// Stores a call's result and sends it as a completion; ends the batch after its last call.
    async fn deliver(&self, index: usize, result: CallResult) {
        let ended = {
            let Ok(mut st) = self.state.lock() else {
                return;
            };
            if let Some(slot) = st.results.get_mut(index) {
                *slot = Some(result);
            }
            // Completions carry the index; the result is cloned only when someone reads it.
            if let Some(tx) = &st.sender {
                let _ = tx.send(index);
            }
            st.remaining = st.remaining.saturating_sub(1);
            self.take_end(&mut st)
        };
        if let Some(positions) = ended {
            self.end(positions).await;
        }
    }

    /// If the batch is closed and every call delivered (and it has not ended yet): marks it ended
    /// and returns its domain positions.
    fn take_end(&self, st: &mut BatchState) -> Option<Vec<usize>> {
        if st.closed && st.remaining == 0 && !st.done {
            st.done = true;
            Some(std::mem::take(&mut st.positions))
        } else {
            None
        }
    }

    async fn end(&self, positions: Vec<usize>) {
        let kernel = &self.info.kernel;
        let (calls, makespan) = match self.state.lock() {
            Ok(st) => (
                st.ids_in_order(),
                st.results
                    .iter()
                    .flatten()
                    .filter_map(|r| r.ended)
                    .max()
                    .unwrap_or_default(),
            ),
            Err(_) => (Vec::new(), Duration::ZERO),
        };
        let info = &self.info;
        let record = BatchRecord {
            batch: info.id.to_string(),
            tenant: info.tenant.to_string(),
            calls,
            started_at_ms: info.started_unix_ms,
            ended_at_ms: info.unix_ms(makespan.max(info.started.elapsed())),
            origin: info.origin.clone(),
        };
        if let Err(why) = kernel.sink.record(vec![Record::Batch(record)]).await {
            tracing::error!(error = %why, "the provenance sink refused a batch record");
        }
        if !positions.is_empty() {
            // A domain that holds positions cannot have been evicted: they are not settled yet.
            if let Some(domain) = kernel.domains.existing(&info.tenant) {
                domain.lock().batch_ended(&positions);
            }
        }
        if let Ok(mut st) = self.state.lock() {
            st.sender = None; // ends the completion stream
        }
        self.done.notify_waiters();
    }
}

impl BatchState {
    fn ids_in_order(&self) -> Vec<String> {
        let mut ids: Vec<(&String, &usize)> = self.ids.iter().collect();
        ids.sort_by_key(|(_, i)| **i);
        ids.into_iter().map(|(id, _)| id.clone()).collect()
    }
}

/// A batch in flight: submit calls into it, read completions as they happen (it is a
/// `Stream<Item = CallResult>`), or wait for every result in submission order.
///
/// Dropping the handle before the batch ends cancels it (see [`BatchHandle::detach`]).
pub struct BatchHandle {
    shared: Arc<BatchShared>,
    rx: mpsc::UnboundedReceiver<usize>,
    priority: i32,
    detached: bool,
}

impl fmt::Debug for BatchHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchHandle")
            .field("id", &self.shared.info.id)
            .field("tenant", &self.shared.info.tenant)
            .finish()
    }
}

impl BatchHandle {
    /// Opens a batch of `kernel` for `tenant`.
    pub(crate) fn open(
        kernel: &Arc<KernelInner>,
        tenant: &str,
        options: BatchOptions,
    ) -> Result<Self> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime);
        }
        let n = kernel.batches.fetch_add(1, Ordering::Relaxed);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let (tx, rx) = mpsc::unbounded_channel();
        let id: Arc<str> = Arc::from(format!("b{:x}-{:08x}-{n}", now.as_millis(), kernel.nonce));
        let trace = crate::transport::client_trace(options.traceparent.as_deref());
        let info = Arc::new(BatchInfo {
            kernel: kernel.clone(),
            id,
            tenant: Arc::from(tenant),
            started: Instant::now(),
            started_unix_ms: now.as_secs_f64() * 1000.0,
            cancel: CancellationToken::new(),
            on_failure: options.on_failure.unwrap_or(kernel.options.on_failure),
            origin: options.origin,
            observer: options.observer,
            approver: options.approver,
            trace,
        });
        let shared = Arc::new(BatchShared {
            info,
            state: Mutex::new(BatchState {
                sender: Some(tx),
                ..BatchState::default()
            }),
            done: Notify::new(),
        });
        Ok(BatchHandle {
            shared,
            rx,
            priority: options.priority,
            detached: false,
        })
    }

    /// The batch id.
    pub fn id(&self) -> &str {
        &self.shared.info.id
    }

    /// Submits the next call (submission order is the order of these calls). Its synchronous
    /// stages run now: an unknown tool, an invalid input or a denial is answered at once, as a
    /// result. Refuses a call id already used in this batch, and any call once closed.
    pub fn submit(&mut self, call: Call) -> Result<()> {
        let priority = self.priority;
        self.submit_with_priority(call, priority)
    }

    /// [`BatchHandle::submit`] with a priority for this call.
    pub fn submit_with_priority(&mut self, call: Call, priority: i32) -> Result<()> {
        self.submit_call(call, None, priority)
    }

    /// [`BatchHandle::submit`] for a call of `tool`, found by [`Kernel::resolve`] of this
    /// batch's kernel, without looking the tool up again: the call is `tool`'s, whatever its
    /// `tool` says. A `tool` another kernel resolved is not this kernel's to trust: the call's
    /// `tool` is then looked up here, as [`BatchHandle::submit`] does.
    ///
    /// [`Kernel::resolve`]: super::Kernel::resolve
    pub fn submit_resolved(&mut self, tool: &ResolvedTool, call: Call) -> Result<()> {
        let priority = self.priority;
        self.submit_call(call, Some(tool), priority)
    }

    fn submit_call(
        &mut self,
        call: Call,
        tool: Option<&ResolvedTool>,
        priority: i32,
    ) -> Result<()> {
        let index = {
            let Ok(mut st) = self.shared.state.lock() else {
                return Err(Error::Poisoned {
                    what: "the batch's state",
                });
            };
            if st.closed {
                return Err(Error::BatchClosed {
                    id: call.id.clone(),
                });
            }
            let index = st.results.len();
            if let Some(first) = st.ids.get(&call.id) {
                return Err(Error::DuplicateCallId {
                    id: call.id.clone(),
                    first: *first,
                    second: index,
                });
            }
            st.ids.insert(call.id.clone(), index);
            st.results.push(None);
            st.remaining += 1;
            index
        };
        let kernel = &self.shared.info.kernel;
        let seq = kernel.seq.fetch_add(1, Ordering::Relaxed);
        let tenant = &self.shared.info.tenant;
        let prepared = match tool {
            Some(t) if std::ptr::eq(t.kernel.as_ptr(), Arc::as_ptr(kernel)) => {
                PreparedCall::of_tool(t.tool.clone(), &kernel.normalizers, tenant, call)
            }
            _ => PreparedCall::for_tenant(&kernel.tools, &kernel.normalizers, tenant, call),
        };
        let dispatched = dispatch::submit(self.shared.info.clone(), seq, priority, prepared);
        if let Some(position) = dispatched.position {
            self.shared.note_position(position);
        }
        let shared = self.shared.clone();
        // The rest of the call's way is already boxed: what is spawned here is a few pointers.
        tokio::spawn(async move {
            let result = dispatched.rest.await;
            shared.deliver(index, result).await;
        });
        Ok(())
    }

    /// No more calls will come: the batch ends when the submitted ones have.
    pub fn close(&mut self) {
        let ended = match self.shared.state.lock() {
            Ok(mut st) => {
                st.closed = true;
                self.shared.take_end(&mut st)
            }
            Err(_) => None,
        };
        if let Some(positions) = ended {
            let shared = self.shared.clone();
            // A handle dropped after its runtime shut down has nothing left to end on.
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move { shared.end(positions).await });
            }
        }
    }

    /// Cancels the batch: calls waiting are not started, calls running are stopped; all are
    /// reported `cancelled`.
    pub fn cancel(&self) {
        self.shared.info.cancel.cancel();
    }

    /// The token that cancels this batch.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.shared.info.cancel.clone()
    }

    /// Lets the batch run on after the handle is dropped. No call can be added any more, so the
    /// batch is closed: it ends when its calls have.
    pub fn detach(mut self) {
        self.close();
        self.detached = true;
    }

    /// The next call to complete, in completion order; `None` once the batch has ended and every
    /// completion has been read.
    pub async fn next_completion(&mut self) -> Option<CallResult> {
        let index = self.rx.recv().await?;
        self.result_at(index)
    }

    fn result_at(&self, index: usize) -> Option<CallResult> {
        self.shared
            .state
            .lock()
            .ok()
            .and_then(|st| st.results.get(index).cloned().flatten())
    }

    /// Closes the batch and waits for its end; the results in submission order.
    pub async fn finish(mut self) -> BatchResult {
        self.close();
        loop {
            let notified = self.shared.done.notified();
            let done = self
                .shared
                .state
                .lock()
                .map(|s| s.done && s.sender.is_none());
            if done.unwrap_or(true) {
                break;
            }
            notified.await;
        }
        let (results, makespan) = match self.shared.state.lock() {
            Ok(mut st) => {
                let results: Vec<CallResult> = st.results.drain(..).flatten().collect();
                let makespan = results
                    .iter()
                    .filter_map(|r| r.ended)
                    .max()
                    .unwrap_or_default();
                (results, makespan)
            }
            Err(_) => (Vec::new(), Duration::ZERO),
        };
        BatchResult {
            batch_id: self.shared.info.id.to_string(),
            tenant: self.shared.info.tenant.to_string(),
            results,
            makespan,
        }
    }
}

impl futures::Stream for BatchHandle {
    type Item = CallResult;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<CallResult>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(index)) => Poll::Ready(self.result_at(index)),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for BatchHandle {
    /// Cancels a batch that has not ended, and closes it: no call can come any more, so it ends
    /// (and its tenant's domain may forget it) once its calls have.
    fn drop(&mut self) {
        if self.detached {
            return;
        }
        let done = self.shared.state.lock().map(|s| s.done).unwrap_or(true);
        if !done {
            self.shared.info.cancel.cancel();
            self.close();
        }
    }
}
