//! What the calls of a kernel share ([`KernelInner`]), and what the calls of one batch share
//! ([`BatchInfo`]).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use super::observe::CallObserver;
use super::options::{KernelOptions, OnFailure};
use crate::access::Normalizers;
use crate::authorize::{ApprovalOutcome, Approver, Authorizer};
use crate::order::domain::{Commons, Domains};
use crate::order::ready::ReadyQueue;
use crate::order::shared::SharedDomain;
use crate::provenance::ProvenanceSink;
#[cfg(feature = "mcp")]
use crate::transport::mcp::McpSessions;
use crate::transport::{Provisions, ToolRegistry};

/// The shared state of a kernel.
pub(crate) struct KernelInner {
    pub(crate) tools: ToolRegistry,
    pub(crate) normalizers: Normalizers,
    pub(crate) authorizer: Arc<dyn Authorizer>,
    pub(crate) approver: Arc<dyn Approver>,
    pub(crate) sink: Arc<dyn ProvenanceSink>,
    pub(crate) options: KernelOptions,
    pub(crate) provisions: Arc<Provisions>,
    pub(crate) ready: Arc<ReadyQueue>,
    pub(crate) domains: Arc<Domains>,
    /// The domain every tenant's calls of a shared tool also enter.
    pub(crate) commons: Arc<Commons>,
    /// In-flight first-use asks, per (tenant, tool).
    pub(crate) first_use: DashMap<(String, String), Arc<OnceCell<ApprovalOutcome>>>,
    /// Kernel-wide submission sequence (the ready queue's order among equal priorities).
    pub(crate) seq: AtomicU64,
    /// Batches opened so far (for batch ids).
    pub(crate) batches: AtomicU64,
    /// 32 random bits drawn once per kernel ([`kernel_nonce`]), in every batch id.
    pub(crate) nonce: u32,
    #[cfg(feature = "mcp")]
    pub(crate) mcp: McpSessions,
    /// The conflict domain shared with other processes, when there is one.
    pub(crate) shared: Option<Arc<dyn SharedDomain>>,
    /// Calls that will not run but still hold their place in the shared domain until their
    /// predecessors there are done (then they release): [`crate::Kernel::shared_settled`] waits
    /// for them.
    pub(crate) settling: tokio_util::task::TaskTracker,
}

/// What every call of one batch knows of it, and the kernel it runs on (so that a call holds one
/// reference, not two: each is an atomic count the cores share).
pub(crate) struct BatchInfo {
    pub(crate) kernel: Arc<KernelInner>,
    pub(crate) id: Arc<str>,
    pub(crate) tenant: Arc<str>,
    pub(crate) started: Instant,
    pub(crate) started_unix_ms: f64,
    pub(crate) cancel: CancellationToken,
    pub(crate) on_failure: OnFailure,
    /// Where the batch came from, for its provenance record.
    pub(crate) origin: Option<crate::provenance::BatchOrigin>,
    /// Watches the batch's calls.
    pub(crate) observer: Option<Arc<dyn CallObserver>>,
    /// Answers the batch's asks (else the kernel's approver).
    pub(crate) approver: Option<Arc<dyn Approver>>,
    /// The client's trace (`<trace id>-<flags>`), when it sent a valid `traceparent`.
    pub(crate) trace: Option<Arc<str>>,
}

impl BatchInfo {
    /// Unix time in ms of an offset from the batch's start.
    pub(crate) fn unix_ms(&self, since_start: Duration) -> f64 {
        self.started_unix_ms + since_start.as_secs_f64() * 1000.0
    }
}

/// 32 random bits drawn for each kernel: batch ids stay unique in a log that several kernels —
/// in several processes, or several in one process — append to over time (lineage across
/// processes tells batches apart by id), even when two open a batch in the same millisecond.
pub(crate) fn kernel_nonce() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    // Each RandomState has its own keys (random per process, then advanced per instance).
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish() as u32
}
