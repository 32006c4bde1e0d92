//! A built-in tool's manifest, parsed from the JSON written beside its handler.

use serde_json::Value;

use crate::error::{Diagnostic, Error, Result};
use crate::model::Manifest;

/// Parses a built-in manifest; a defect in one is an invalid manifest named `built-in`.
pub(super) fn manifest(v: Value) -> Result<Manifest> {
    Manifest::from_value(v).map_err(|e| Error::InvalidManifest {
        source_name: "built-in".into(),
        errors: vec![Diagnostic::new("", e.to_string())],
    })
}
