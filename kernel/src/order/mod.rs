//! Stage 3, **order**: who waits for whom, and when each call may start.
//!
//! Takes in: calls with their accesses, one at a time in submission order, per tenant. Hands on:
//! for each call, its conflict edges and a signal that fires the moment its last predecessor
//! finishes — never in waves — and then a permit under the concurrency caps.
//!
//! - The **conflict index** ([`ConflictIndex`], `index.rs`, with the essay on how it stays
//!   near-linear) finds a new call's nearest conflicting predecessors: a write conflicts with any
//!   access to an overlapping resource, and the edge says which resource and of what kind
//!   ([`EdgeKind`]). Property tests hold it to the quadratic reference ([`naive_edges`],
//!   `reference.rs`). The domain takes the edges compact ([`CompactEdge`]: an edge caused by
//!   the call's own access names it instead of holding its pattern) and resolves only those it
//!   reports.
//! - A **tenant's domain** (`domain.rs`), living while the tenant has work: the index shared by
//!   every batch of that tenant (so batches that overlap in time are ordered against each other;
//!   tenants never wait on each other), and a *slot* per call that has not finished: how many
//!   predecessors it still waits for, and who waits for it. Finishing a call decrements its
//!   successors; a successor whose count reaches zero is signalled at once. A call is forgotten
//!   by the index only once it has released its successors *and* its batch has ended (invariant
//!   **forget only the settled**), which keeps memory bounded by the calls alive; an idle domain
//!   holds nothing and leaves the kernel's map.
//! - The **ready queue** (`ready.rs`): calls whose predecessors are done wait for a permit under
//!   the global cap and the per-tool caps, highest priority first, then in submission order.
//! - A **plan** ([`Plan`], `plan.rs`) is the same ordering for a whole batch before anything
//!   runs, as a [`ConflictGraph`] (`graph.rs`) with levels and a critical path: what
//!   `sluice plan` prints.
//!
//! Invariant (**release after predecessors**): an inserted call releases its successors only
//! after its own predecessors have finished — even when it is rejected, skipped or cancelled.
//! The graph leaves out edges that a path implies; releasing a middle call early would let the two
//! ends of such a path overlap.
//!
//! ```
//! use sluice_kernel::access::{AccessPlan, Normalizers};
//! use sluice_kernel::model::Manifest;
//! use sluice_kernel::order::ConflictGraph;
//! use serde_json::json;
//!
//! let put = Manifest::from_value(json!({
//!     "id": "kv.put", "description": "Put", "version": "1.0.0",
//!     "input": {"type": "object"}, "output": {"type": "object"},
//!     "effects": [{"kind": "writes", "resource": "kv:{key}"}]
//! })).unwrap();
//! let plan = AccessPlan::compile(&put).unwrap();
//! let mut graph = ConflictGraph::new();
//! for key in ["a", "b", "a"] {
//!     graph.add_call(&plan.accesses(&json!({"key": key}), &Normalizers::default()));
//! }
//! assert_eq!(graph.predecessors(2), vec![0]); // the second write of `kv:a` waits for the first
//! assert_eq!(graph.waves(), vec![vec![0, 1], vec![2]]);
//! ```
//!
//! This stage imports [`crate::access`], [`crate::model`], [`crate::error`] and, for plans, the
//! tool registry of [`crate::transport`].

pub(crate) mod domain;
mod graph;
mod index;
mod plan;
pub(crate) mod ready;
mod reference;
pub mod shared;

pub use graph::ConflictGraph;
pub use index::{CompactEdge, ConflictIndex, Edge, EdgeKind};
pub use plan::{Plan, PreparedCall, Rejection};
#[doc(hidden)]
pub use reference::{first_conflict, naive_edges};
