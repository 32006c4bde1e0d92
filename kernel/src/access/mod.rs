//! Stage 2, **access**: from a call to what it touches.
//!
//! Takes in: a tool's manifest (compiled once into [`AccessPlan`]) and a call's input. Hands on:
//! the list of [`Access`]es — `(kind, resource pattern)` pairs, each with its read/write mode —
//! that the conflict graph orders and the authorizer judges.
//!
//! The rules (semantics.md section 2):
//!
//! - Each declared effect gives one access; an effect without `resource` accesses `*`.
//! - `{name}` in a resource is replaced by the top-level input property `name`. A string is used
//!   as it is, a number or boolean as its JSON text, and the value is a *literal*: its `*`, `?`,
//!   `\`, `{`, `}` are escaped, so an input can never widen an access. An array gives one access
//!   per element; several arrays in one resource give every combination, at most
//!   [`MAX_COMBINATIONS`] (beyond that every array placeholder becomes `*`); a name used twice in
//!   one resource takes the same element in both places. A missing, null or object value (or an
//!   array element of those kinds) makes the placeholder `*`. An empty array gives no access.
//! - A registered [`Normalizer`] for the resource's scheme then gives one spelling per resource;
//!   `fs:` has one by default ([`FsNormalizer`]).
//! - A tool that is not read-only and declares no changing effect gets one implicit access
//!   `(writes, *)`: the kernel cannot know what it changes, so it runs alone.
//!
//! ```
//! use sluice_kernel::access::{AccessPlan, Normalizers};
//! use sluice_kernel::model::Manifest;
//! use serde_json::json;
//!
//! let m = Manifest::from_value(json!({
//!     "id": "acme.kv-put", "description": "Put a value", "version": "1.0.0",
//!     "input": {"type": "object"}, "output": {"type": "object"},
//!     "effects": [{"kind": "writes", "resource": "kv:{key}"}]
//! })).unwrap();
//! let plan = AccessPlan::compile(&m).unwrap();
//! let accesses = plan.accesses(&json!({"key": "users/*"}), &Normalizers::default());
//! assert_eq!(accesses[0].resource.to_text(), "kv:users/\\*"); // the input stays literal
//! ```

//!
//! # Files
//!
//! - `pattern.rs`: the resource-pattern language ([`Pattern`]): matching, overlap and
//!   containment, with the essay on how they are decided;
//! - `resource.rs`: [`ResourceTemplate`], a manifest's resource text expanded against an input;
//! - `normalize.rs`: [`Normalizer`]s, one spelling per resource;
//! - `plan.rs`: [`Access`] and [`AccessPlan`].
//!
//! This stage imports only [`crate::model`] and [`crate::error`].

mod normalize;
mod paths;
mod pattern;
mod plan;
mod resource;

pub use normalize::{FsNormalizer, Normalizer, Normalizers};
pub use paths::{lexical_absolute, resolve_links, PathRules};
pub use pattern::{
    escape, push_literal_char, Pattern, PatternError, Strategy, Token, MAX_CONTAINMENT_STATES,
    MAX_CONTAINMENT_TOKENS, MAX_OVERLAP_CELLS,
};
pub use plan::{Access, AccessPlan, EffectError};
pub use resource::{ResourceTemplate, TemplateError, MAX_COMBINATIONS};

/// The general pattern routines the fast paths are held to (for property tests).
#[doc(hidden)]
pub use pattern::general;
