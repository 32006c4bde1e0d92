//! Sluice's policy engine: per-tenant authorization of every effect, with a human in the loop.
//!
//! A policy document gives each tenant a default decision and rules over effect kinds, tool ids
//! and resource patterns, plus human-in-the-loop modes per tool. The [`PolicyEngine`] compiles it
//! into an index per tenant and effect kind, decides every call the kernel asks about (it
//! implements the kernel's `Authorizer`), remembers first-use approvals, and swaps in a new
//! document atomically while batches run.
//!
//! ```
//! use sluice_kernel::access::{Access, Pattern};
//! use sluice_kernel::authorize::{DecidedBy, Decision};
//! use sluice_kernel::model::{EffectKind, Manifest};
//! use sluice_policy::{PolicyDocument, PolicyEngine};
//!
//! let doc = PolicyDocument::from_value(&serde_json::json!({"tenants": {"acme": {
//!     "default": "deny",
//!     "rules": [
//!         {"id": "read-memory", "decision": "allow", "effects": ["reads"], "resource": "memory:*"},
//!         {"id": "no-deletes", "decision": "deny", "effects": ["deletes"]}
//!     ]
//! }}})).unwrap();
//! let engine = PolicyEngine::new(doc);
//! let tool = Manifest::from_value(serde_json::json!({"id": "acme.recall", "description": "d",
//!     "version": "1.0.0", "input": {}, "output": {}, "mutating": false,
//!     "effects": [{"kind": "reads", "resource": "memory:{key}"}]})).unwrap();
//! let read = Access::new(EffectKind::Reads, Pattern::parse("memory:facts").unwrap());
//! let auth = engine.decide("acme", &tool, &[read]);
//! assert_eq!((auth.decision, auth.by), (Decision::Allow, DecidedBy::rule("read-memory")));
//! let everything = Access::new(EffectKind::Reads, Pattern::parse("*").unwrap());
//! assert_eq!(engine.decide("acme", &tool, &[everything]).decision, Decision::Deny); // `*` is not in `memory:*`
//! ```

mod document;
mod engine;
mod error;
pub mod linear;

pub use document::{Mode, PolicyDocument, Rule, TenantPolicy};
pub use engine::{AccessDecision, CompiledPolicy, Explanation, PolicyEngine, RuleExplanation};
pub use error::{PolicyError, Problem};
