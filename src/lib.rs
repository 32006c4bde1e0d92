//! Sluice: the dispatch core for AI agent runtimes.
//!
//! A model answers one turn with a batch of tool calls. Sluice turns the batch into a conflict
//! graph from the effects each tool declares, runs what cannot conflict concurrently and what can
//! in submission order, authorizes every effect per tenant, and records what ran and why.
//!
//! This facade re-exports the three crates and wires their defaults:
//! - [`kernel`] (`sluice-kernel`): manifests, patterns, the conflict graph, the scheduler;
//! - [`policy`] (`sluice-policy`): the policy engine (an `Authorizer`);
//! - [`provenance`] (`sluice-provenance`): the provenance log (a `ProvenanceSink`).
//!
//! ```
//! use sluice::kernel::{access::Normalizers, builtin, order::Plan, Batch};
//! let tools = builtin::registry(builtin::BuiltinConfig::default()).unwrap();
//! let batch = Batch::from_value(&serde_json::json!({"tenant": "acme", "calls": [
//!     {"id": "w", "tool": "sluice.kv.put", "input": {"key": "notes", "value": "hi"}},
//!     {"id": "r", "tool": "sluice.kv.get", "input": {"key": "notes"}},
//!     {"id": "e", "tool": "sluice.echo", "input": {}}
//! ]})).unwrap();
//! let plan = Plan::new(&tools, &Normalizers::default(), batch);
//! assert_eq!(plan.graph.waves(), vec![vec![0, 2], vec![1]]);
//! ```

#[cfg(feature = "http")]
#[doc(hidden)]
pub mod fuzzing;

pub use sluice_kernel as kernel;
pub use sluice_kernel::adapters::report;
pub use sluice_policy as policy;
#[cfg(feature = "postgres")]
pub use sluice_postgres as postgres;
pub use sluice_provenance as provenance;
#[cfg(feature = "serve")]
pub use sluice_serve as serve;
