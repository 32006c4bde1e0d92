//! Stage 4, **run**: the kernel an agent loop embeds, its batches, and the dispatch of each call
//! through the stages.
//!
//! A [`Kernel`] is built once ([`KernelBuilder`]: tools, an [`Authorizer`](crate::Authorizer),
//! an [`Approver`](crate::Approver), a [`ProvenanceSink`](crate::ProvenanceSink), options), then
//! takes batches: whole ([`Kernel::run`], results in submission order) or call by call while the
//! model is still streaming ([`Kernel::open`], a [`BatchHandle`] that is also a stream of
//! completions). Each call goes through the dispatch stages (`dispatch.rs`): resolve and
//! validate, authorize, order, wait, invoke, record and release; the batch (`batch.rs`) delivers
//! its result and ends after its last call.
//!
//! ```
//! use sluice_kernel::{builtin, Batch, Call, Kernel, Status};
//! use serde_json::json;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let kernel = Kernel::builder()
//!     .tools(builtin::registry(builtin::BuiltinConfig::default()).unwrap())
//!     .build()
//!     .unwrap();
//! let mut batch = kernel.open("acme").unwrap();
//! batch.submit(Call::new("w", "sluice.kv.put", json!({"key": "k", "value": 1}))).unwrap();
//! batch.submit(Call::new("r", "sluice.kv.get", json!({"key": "k"}))).unwrap();
//! let result = batch.finish().await; // closes the batch and waits for its end
//! assert_eq!(result.get("r").unwrap().status, Status::Ok);
//! assert_eq!(result.get("r").unwrap().output.as_ref().unwrap()["value"], 1);
//! # });
//! ```
//!
//! # Files, in import order
//!
//! `observe.rs` (watching a batch's calls) < `options.rs` (kernel and batch options) < `result.rs` (what a batch hands back) < `shared.rs`
//! (what a kernel's and a batch's calls share) < `job.rs` (one call on its way) < `approval.rs`,
//! `invoke.rs`, `record.rs` (stages 4–6) < `dispatch.rs` (the stages in order) < `batch.rs`
//! (submission, delivery, the end) < `kernel.rs` (the kernel and its builder).
//!
//! This stage imports every stage below it: [`crate::order`], [`crate::transport`],
//! [`crate::access`], [`crate::model`], and the two seams, [`crate::authorize`] and
//! [`crate::provenance`].

mod approval;
mod batch;
mod dispatch;
mod invoke;
mod job;
mod kernel;
mod observe;
mod options;
mod record;
mod result;
mod shared;

pub use batch::{BatchHandle, ResolvedTool};
pub use kernel::{Kernel, KernelBuilder};
pub use observe::{CallMark, CallObserver, WaitedCall, Waiting};
pub use options::{BatchOptions, KernelOptions, OnFailure};
pub use result::{BatchResult, CallResult};
