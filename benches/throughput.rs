#![allow(missing_docs)]
//! Throughput (issue 46, item 3): N agents (8, 64) of one tenant, each submitting a stream of
//! realistic turns for a fixed time, through one kernel, against the same handlers run without
//! Sluice (each turn's calls spawned on tokio at once and joined).
//!
//! A turn has the demo's shape, on the agent's own files (agents do not conflict with each other,
//! but share the tenant's conflict domain, as the sessions of one gateway do): four reads, a
//! search of the agent's folder (`fs:<dir>/*`), two edits of one file, an edit of another, a
//! memory update and a pure call; 10 calls, 4 of them ordered after another. Handlers take 0 ms
//! (return at once) or 1 ms (a tokio sleep).
//!
//! Reported per configuration: calls/s, and the p50 and p99 scheduling latency (submit to start)
//! of the calls with no predecessor in their turn. `cargo bench --bench throughput_heap` runs the
//! same on a counting allocator and adds the heap held per call in flight.
//!
//! Run: `cargo bench --bench throughput --bench throughput_heap` (prints the figures; 2 s per
//! configuration).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[path = "throughput/agents.rs"]
mod agents;

fn main() {
    agents::run(None);
}
