//! The Sluice kernel: from a batch of tool calls to results, in the right order, authorized and
//! recorded.
//!
//! ```text
//!  manifest ──► access ──► pattern ──► graph ──► scheduler ──► dispatch ──► transport
//!  (what a      (what a    (which      (who      (start each    (resolve,     (native
//!   tool         call       resources   waits     call when     validate,     handlers,
//!   declares)    touches)   overlap)    for whom) it may)       authorize,    HTTP, MCP)
//!                                                                invoke, record)
//! ```
//!
//! Each stage lives in the module named after it. The kernel depends on no policy engine and no
//! log: it defines the traits they implement.
//!
//! ```
//! use sluice_kernel::{access::{AccessPlan, Normalizers}, graph::ConflictGraph, manifest::Manifest};
//! use serde_json::json;
//!
//! let put = Manifest::from_value(json!({
//!     "id": "kv.put", "description": "Put", "version": "1.0.0",
//!     "input": {"type": "object"}, "output": {"type": "object"},
//!     "effects": [{"kind": "writes", "resource": "kv:{key}"}]
//! })).unwrap();
//! let plan = AccessPlan::compile(&put).unwrap();
//! let norm = Normalizers::default();
//! let mut graph = ConflictGraph::new();
//! for key in ["a", "b", "a"] {
//!     graph.add_call(&plan.accesses(&json!({"key": key}), &norm));
//! }
//! // The two writes of `kv:a` are ordered; the write of `kv:b` runs beside them.
//! assert_eq!(graph.waves(), vec![vec![0, 1], vec![2]]);
//! ```
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod access;
pub mod adapters;
pub mod authorize;
pub mod batch;
pub mod builtin;
pub mod context;
mod dispatch;
pub mod error;
pub mod graph;
#[cfg(feature = "http")]
pub mod http;
pub mod kernel;
pub mod load;
pub mod manifest;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod pattern;
pub mod plan;
pub mod provenance;
pub mod registry;
mod scheduler;
pub mod template;
pub mod tool;
pub mod transport;
pub mod validate;

pub use error::{Error, Result};

/// The text of a caught panic's payload (`"a panic"` when it is neither `&str` nor `String`).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}
