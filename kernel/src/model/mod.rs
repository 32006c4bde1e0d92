//! Stage 1, **model**: what a tool declares and what a model asks for, as Rust values.
//!
//! Everything downstream starts from two documents. A tool's *manifest* (Kindgi tool schema
//! 1.1.0) is read from files ([`read_manifests`]), judged ([`validate()`]: the JSON Schema, the
//! rules beyond it, the lints; each finding a [`Diagnostic`] with its JSON pointer) and parsed into
//! a [`Manifest`] whose types cannot hold what the schema refuses. A model's turn is a [`Batch`]
//! of [`Call`]s, parsed with the JSON pointer of any problem; a call ends with one [`Status`]
//! and, unless `ok`, a [`CallError`].
//!
//! ```
//! use sluice_kernel::model::{validate, Batch, ValidateOptions};
//! use serde_json::json;
//!
//! let report = validate(&json!({
//!     "id": "acme.kv-get", "description": "Get", "version": "1.0.0",
//!     "input": {"type": "object", "properties": {"key": {"type": "string"}}},
//!     "output": {"type": "object"},
//!     "mutating": false, "effects": [{"kind": "reads", "resource": "kv:{key}"}]
//! }), ValidateOptions::default());
//! assert!(report.is_valid() && report.warnings.is_empty());
//!
//! let err = Batch::from_value(&json!({"calls": [{"id": "c1", "tool": 7}]})).unwrap_err();
//! assert!(err.to_string().contains("/calls/0/tool"));
//! ```
//!
//! # Files
//!
//! - `manifest.rs`: the manifest's types (shape only);
//! - `validate.rs`: judging a manifest (schema, rules, lints);
//! - `template.rs`: the template syntaxes a manifest uses (text, URL, and the placeholders of a
//!   resource template);
//! - `source.rs`: where a manifest came from ([`ManifestSource`]) and reading JSON documents;
//! - `load.rs`: reading manifest files and folders;
//! - `pack.rs`: reading a Kindgi pack's index ([`PackIndex`]), whose tools are manifests;
//! - `batch.rs`: batches and calls, and how a call can end.
//!
//! This stage imports only [`crate::error`]: it is the vocabulary the other stages share.

mod batch;
mod load;
mod manifest;
mod meta;
mod pack;
mod source;
pub(crate) mod template;
mod validate;

pub use batch::{Batch, Call, CallError, Status, DEFAULT_TENANT};
pub use load::read_manifests;
pub use manifest::{
    split_command_line, AccessMode, CodeArtifactRef, Effect, EffectKind, HttpAuthSpec,
    HttpHeaderSpec, HttpMethod, HttpRequestBodySpec, HttpToolSpec, JsonObject, Limits, Manifest,
    McpEndpoint, Need, NeedsSpec, NetworkPolicy, NonEmptyString, PositiveInt, Sandbox, ShapeError,
    StatusCode, StatusRange, ToolSecretRef, ToolSpec, Transport, Version,
};
pub use meta::{EFFECTS_META, PATHS_META};
pub use pack::{is_pack_index, PackIndex, INDEX_ONLY_FIELDS};
pub use source::{parse_json, read_json, ManifestSource, RawManifest};
pub use template::{
    canonical, canonical_host, resource_placeholders, TemplateSyntaxError, TextPart, TextTemplate,
    UrlTemplate,
};
pub(crate) use validate::compile_schema;
pub use validate::{schema_accepts, validate, Report, ValidateOptions, MANIFEST_SCHEMA};

pub use crate::error::Diagnostic;
