//! The ready queue: calls whose predecessors are done wait here for a permit under the global
//! cap and the per-tool caps, highest priority first, then in submission order.

use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex};

use hashbrown::HashMap;
use tokio::sync::oneshot;

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
        {
            let mut st = self.lock();
            st.waiting.push(Waiting {
                priority,
                seq,
                tool: tool.clone(),
                grant: tx,
            });
            self.pump(&mut st);
        }
        // The permit travels through the channel: if this future is dropped after the grant,
        // the channel drops the permit, which releases it. The sender lives in the heap until it
        // is granted, so the channel cannot close without a permit.
        rx.await.unwrap_or(Permit {
            queue: None,
            tool: None,
        })
    }

    fn release(self: &Arc<Self>, tool: &Arc<str>) {
        let mut st = self.lock();
        st.running = st.running.saturating_sub(1);
        if let Some(n) = st.per_tool.get_mut(tool) {
            *n = n.saturating_sub(1);
        }
        self.pump(&mut st);
    }

    /// The queue's state. Nothing that runs under this lock calls out of the scheduler, and each
    /// update leaves the counts consistent, so a poisoned lock (a panic elsewhere on the same
    /// thread) is recovered rather than letting every later permit wait forever.
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
