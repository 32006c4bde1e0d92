//! The scheduler: when each call may start.
//!
//! Takes in: calls with their accesses, one at a time in submission order, per tenant. Hands on:
//! for each call, its conflict edges and a signal that fires the moment its last predecessor
//! finishes — never in waves — and then a permit under the concurrency caps.
//!
//! Two pieces:
//!
//! - A [`TenantDomain`] per tenant, living as long as the kernel: the incremental
//!   [`ConflictIndex`] shared by every batch of that tenant (so batches that overlap in time are
//!   ordered against each other; tenants never wait on each other), and a *slot* per call that has
//!   not finished: how many predecessors it still waits for, and who waits for it. Finishing a
//!   call decrements its successors; a successor whose count reaches zero is signalled at once.
//!   Finished calls are forgotten by the index once their batch has ended (so edges inside a batch
//!   are always recorded), which keeps memory bounded by the calls alive.
//! - A [`ReadyQueue`]: calls whose predecessors are done wait here for a permit under the global
//!   cap and the per-tool caps, highest priority first, then in submission order.
//!
//! Invariant (**release after predecessors**): an inserted call releases its successors only
//! after its own predecessors have finished — even when it is rejected, skipped or cancelled.
//! The graph leaves out edges that a path implies; releasing a middle call early would let the two
//! ends of such a path overlap.

use std::collections::BinaryHeap;

use hashbrown::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::access::Access;
use crate::graph::{ConflictIndex, Edge};

/// What a call learns when its predecessors are done.
#[derive(Debug, Clone, Default)]
pub(crate) struct Upstream {
    /// A predecessor that failed (its call id), for `skip-dependents`.
    pub(crate) failed: Option<String>,
}

/// A call that has not finished.
#[derive(Debug)]
struct Slot {
    pending: usize,
    successors: Vec<usize>,
    ready: Option<oneshot::Sender<Upstream>>,
    failed_upstream: Option<String>,
}

/// Who a position in the domain is.
#[derive(Debug, Clone)]
pub(crate) struct Owner {
    pub(crate) batch: Arc<str>,
    pub(crate) call: Arc<str>,
}

/// An edge found for a new call, with who its source is.
#[derive(Debug, Clone)]
pub(crate) struct FoundEdge {
    pub(crate) edge: Edge,
    pub(crate) from: Owner,
}

/// A call inserted into its tenant's domain.
#[derive(Debug)]
pub(crate) struct Inserted {
    pub(crate) position: usize,
    pub(crate) edges: Vec<FoundEdge>,
    pub(crate) ready: Ready,
}

/// Resolves when a call's predecessors are done (at once when it has none).
#[derive(Debug)]
pub(crate) enum Ready {
    /// Nothing to wait for.
    Now,
    /// Waiting for predecessors.
    Later(oneshot::Receiver<Upstream>),
    /// Already resolved (the future was polled to completion).
    Done,
}

impl std::future::Future for Ready {
    type Output = Upstream;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Upstream> {
        match &mut *self {
            Ready::Now | Ready::Done => {
                *self = Ready::Done;
                std::task::Poll::Ready(Upstream::default())
            }
            Ready::Later(rx) => match std::pin::Pin::new(rx).poll(cx) {
                std::task::Poll::Ready(u) => {
                    *self = Ready::Done;
                    std::task::Poll::Ready(u.unwrap_or_default())
                }
                std::task::Poll::Pending => std::task::Poll::Pending,
            },
        }
    }
}

/// One tenant's conflict domain (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct TenantDomain {
    index: ConflictIndex,
    next: usize,
    slots: HashMap<usize, Slot>,
    /// Every position the index may still name, with who it is when edges are recorded.
    owners: HashMap<usize, Option<Owner>>,
    /// Finished calls whose batch has ended: the index may forget them.
    forgettable: Vec<usize>,
    scratch: Vec<Edge>,
}

impl TenantDomain {
    /// Inserts a call; its ready signal fires at once when it waits for nobody.
    pub(crate) fn insert(&mut self, owner: Option<Owner>, accesses: &[Access]) -> Inserted {
        let position = self.next;
        self.next += 1;
        self.scratch.clear();
        self.index.insert(position, accesses, &mut self.scratch);
        let mut pending = 0;
        let mut edges = Vec::new();
        for e in self.scratch.drain(..) {
            if let Some(pred) = self.slots.get_mut(&e.from) {
                pred.successors.push(position);
                pending += 1;
            }
            if let Some(Some(from)) = self.owners.get(&e.from) {
                edges.push(FoundEdge {
                    from: from.clone(),
                    edge: e,
                });
            }
        }
        self.owners.insert(position, owner);
        let (ready, rx) = if pending == 0 {
            (None, Ready::Now)
        } else {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Ready::Later(rx))
        };
        self.slots.insert(
            position,
            Slot {
                pending,
                successors: Vec::new(),
                ready,
                failed_upstream: None,
            },
        );
        Inserted {
            position,
            edges,
            ready: rx,
        }
    }

    /// A call has finished: its successors wait for one fewer call. `failed` names the call when
    /// its dependents should count it as failed (for `skip-dependents`).
    pub(crate) fn finish(&mut self, position: usize, failed: Option<&str>) {
        let Some(slot) = self.slots.remove(&position) else {
            return;
        };
        for s in slot.successors {
            let Some(succ) = self.slots.get_mut(&s) else {
                continue;
            };
            if succ.failed_upstream.is_none() {
                succ.failed_upstream = failed.map(str::to_owned);
            }
            succ.pending = succ.pending.saturating_sub(1);
            if succ.pending == 0 {
                if let Some(tx) = succ.ready.take() {
                    let _ = tx.send(Upstream {
                        failed: succ.failed_upstream.clone(),
                    });
                }
            }
        }
    }

    /// A batch has ended: the index may forget its calls. Sweeps when enough have piled up that
    /// the sweep's cost is paid for (amortized O(1) per call).
    pub(crate) fn batch_ended(&mut self, positions: &[usize]) {
        self.forgettable.extend_from_slice(positions);
        if self.slots.is_empty() && self.forgettable.len() == self.owners.len() {
            // Idle: nothing is live and every remembered call may be forgotten.
            self.forgettable.clear();
            self.owners.clear();
            self.index = ConflictIndex::new();
        } else if self.forgettable.len() > self.slots.len() + 64 {
            let gone: hashbrown::HashSet<usize> = self.forgettable.drain(..).collect();
            for p in &gone {
                self.owners.remove(p);
            }
            self.index.forget(|p| gone.contains(&p));
        }
    }

    /// Calls not yet finished.
    pub(crate) fn live(&self) -> usize {
        self.slots.len()
    }

    /// Positions the index still names (live calls and finished calls of live batches).
    pub(crate) fn remembered(&self) -> usize {
        self.owners.len()
    }
}

/// A call waiting for a permit.
#[derive(Debug)]
struct Waiting {
    priority: i32,
    seq: u64,
    tool: Arc<str>,
    grant: oneshot::Sender<Permit>,
}

impl PartialEq for Waiting {
    fn eq(&self, other: &Self) -> bool {
        self.priority == other.priority && self.seq == other.seq
    }
}

impl Eq for Waiting {}

impl PartialOrd for Waiting {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Waiting {
    /// The heap pops the greatest: highest priority, then earliest submission.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.priority
            .cmp(&other.priority)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

#[derive(Debug, Default)]
struct QueueState {
    running: usize,
    per_tool: HashMap<Arc<str>, usize>,
    waiting: BinaryHeap<Waiting>,
}

/// Permits under the global and per-tool concurrency caps (see the module docs).
#[derive(Debug)]
pub(crate) struct ReadyQueue {
    cap: Option<usize>,
    tool_caps: HashMap<String, usize>,
    state: Mutex<QueueState>,
}

/// Held while a call runs; dropping it lets the next ready call start.
#[derive(Debug)]
pub(crate) struct Permit {
    queue: Option<Arc<ReadyQueue>>,
    tool: Option<Arc<str>>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let (Some(q), Some(tool)) = (self.queue.take(), self.tool.take()) {
            q.release(&tool);
        }
    }
}

impl ReadyQueue {
    pub(crate) fn new(
        cap: Option<usize>,
        tool_caps: std::collections::HashMap<String, usize>,
    ) -> Self {
        ReadyQueue {
            cap,
            tool_caps: tool_caps.into_iter().collect(),
            state: Mutex::new(QueueState::default()),
        }
    }

    fn unlimited(&self) -> bool {
        self.cap.is_none() && self.tool_caps.is_empty()
    }

    /// Waits for a permit. Without caps, a permit is immediate.
    pub(crate) async fn acquire(self: &Arc<Self>, priority: i32, seq: u64, tool: &str) -> Permit {
        if self.unlimited() {
            return Permit {
                queue: None,
                tool: None,
            };
        }
        let tool: Arc<str> = Arc::from(tool);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut st) = self.state.lock() {
            st.waiting.push(Waiting {
                priority,
                seq,
                tool: tool.clone(),
                grant: tx,
            });
            self.pump(&mut st);
        }
        // The permit travels through the channel: if this future is dropped after the grant,
        // the channel drops the permit, which releases it.
        rx.await.unwrap_or(Permit {
            queue: None,
            tool: None,
        })
    }

    fn release(self: &Arc<Self>, tool: &Arc<str>) {
        if let Ok(mut st) = self.state.lock() {
            st.running = st.running.saturating_sub(1);
            if let Some(n) = st.per_tool.get_mut(tool) {
                *n = n.saturating_sub(1);
            }
            self.pump(&mut st);
        }
    }

    /// Grants permits to waiting calls while the caps allow, in heap order; a call whose tool is
    /// at its cap lets the calls behind it pass.
    fn pump(self: &Arc<Self>, st: &mut QueueState) {
        let mut blocked = Vec::new();
        while self.cap.is_none_or(|c| st.running < c) {
            let Some(w) = st.waiting.pop() else { break };
            let tool_cap = self.tool_caps.get(&*w.tool).copied();
            let used = st.per_tool.get(&w.tool).copied().unwrap_or(0);
            if tool_cap.is_some_and(|c| used >= c) {
                blocked.push(w);
                continue;
            }
            let permit = Permit {
                queue: Some(self.clone()),
                tool: Some(w.tool.clone()),
            };
            match w.grant.send(permit) {
                Ok(()) => {
                    st.running += 1;
                    *st.per_tool.entry(w.tool).or_insert(0) += 1;
                }
                // The caller is gone: disarm the permit (the lock is held here).
                Err(mut p) => p.queue = None,
            }
        }
        st.waiting.extend(blocked);
    }
}
