//! The Sluice kernel: from a batch of tool calls to results, in the right order, authorized and
//! recorded.
//!
//! A model answers one turn with a batch of tool calls. Run them one by one and the turn is slow;
//! run them all at once and two edits of one file race; put them behind one lock and they are
//! slow again. This crate runs each call the moment every earlier call it conflicts with has
//! finished, and no later: calls conflict when one writes a resource the other touches, as their
//! tools' manifests declare. Use it when you embed tool dispatch in an agent runtime; use the
//! `sluice` facade for the policy engine and the provenance log wired in, and `sluice serve` to
//! reach it without writing Rust.
//!
//! # The pipeline
//!
//! Each stage is a module, and a stage imports only the stages before it (the seams and the
//! error excepted, see below):
//!
//! ```text
//!  model ─────► access ─────► transport ─────► order ─────► run
//!  what a tool   what a call   how a tool is    who waits     the kernel: batches, and each
//!  declares,     touches       carried out:     for whom,     call through resolve, validate,
//!  what a model  (patterns,    handlers, the    and when a    authorize, order, wait, invoke,
//!  asks for      normalizers)  registry, HTTP,  call may      record, release
//!                              MCP              start
//! ```
//!
//! 1. [`model`]: manifests (Kindgi tool schema 1.1.0) read, validated and parsed; batches and
//!    calls; how a call can end.
//! 2. [`access`]: the resource-pattern language, and from a call's input to its [`Access`]es.
//! 3. [`transport`]: the [`Handler`] a tool is carried out by (native, declarative HTTP, MCP),
//!    the [`ToolContext`] it runs in, and the [`ToolRegistry`].
//! 4. [`order`]: the conflict index and graph, the tenant's conflict domain, the ready queue,
//!    and plans.
//! 5. [`run`]: the [`Kernel`], its [`BatchHandle`]s and the dispatch stages.
//!
//! Two seams are where the other crates plug in; the kernel depends on neither implementation:
//! [`authorize`] (an [`Authorizer`] decides allow / ask / deny, an [`Approver`] answers asks;
//! `sluice-policy` implements the first) and [`provenance`] (a [`ProvenanceSink`] receives what
//! ran and why; `sluice-provenance` implements it). At the top, [`builtin`] holds the built-in
//! tools and [`adapters`] the model-API shapes (OpenAI, Anthropic, MCP names). `docs/architecture.md`
//! draws the layout and which way each folder may import.
//!
//! # Conventions
//!
//! - **Who an error is for.** [`Error`] is for the embedder (a file, a manifest, a batch that
//!   cannot be used). A call that fails is not an `Error`: it is a [`CallResult`] with a
//!   [`Status`] and a [`CallError`] whose code is an [`ErrorCode`] (or a handler's own code), for
//!   the model to read. A [`Diagnostic`] is for the person who wrote a document: a JSON pointer
//!   and a sentence.
//! - **Who decided.** Every [`Authorization`] carries a typed [`DecidedBy`]: a rule (by id), the
//!   tenant's default, a human-in-the-loop mode, `pure`, `unknown-tenant`, `unknown-tool` or
//!   `no-policy`. Results, logs and the CLI print it as the contract's text tokens; a rule named
//!   `default` is still a rule.
//! - **Submission order is the order.** Calls are ordered by the order they are submitted in,
//!   across the batches of one tenant; tenants never wait for each other.
//! - **Fail closed.** An ask without an explicit approval, a panicking approver, a defect on the
//!   way: the call does not run, and says why.
//!
//! # Example
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
//! let batch = Batch::new("acme", vec![
//!     Call::new("w", "sluice.kv.put", json!({"key": "notes", "value": "hi"})),
//!     Call::new("r", "sluice.kv.get", json!({"key": "notes"})), // waits for w
//!     Call::new("e", "sluice.echo", json!({"say": "hello"})),    // runs beside w
//! ]).unwrap();
//!
//! // Before running: the plan's conflict graph.
//! let plan = kernel.plan(batch.clone());
//! assert_eq!(plan.graph.waves(), vec![vec![0, 2], vec![1]]);
//!
//! let result = kernel.run(batch).await.unwrap();
//! assert!(result.results.iter().all(|r| r.status == Status::Ok));
//! assert_eq!(result.get("r").unwrap().output.as_ref().unwrap()["value"], "hi");
//! # });
//! ```

pub mod access;
pub mod adapters;
pub mod authorize;
pub mod builtin;
pub mod error;
pub mod model;
pub mod order;
pub mod provenance;
pub mod run;
pub mod transport;

pub use access::{Access, Pattern};
pub use authorize::{Approver, Authorization, Authorizer, DecidedBy, Decision};
pub use error::{Diagnostic, Error, ErrorCode, Result};
pub use model::{Batch, Call, CallError, Manifest, Status};
pub use provenance::ProvenanceSink;
pub use run::{BatchHandle, BatchResult, CallResult, Kernel, KernelBuilder};
pub use transport::{handler, Handler, ToolContext, ToolError, ToolRegistry};
