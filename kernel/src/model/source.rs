//! Where a manifest comes from, and reading JSON documents with the place of a syntax error.
//!
//! The leaf of the loading code: [`super::load`] (manifest files and folders) and [`super::pack`]
//! (a pack's index) both read through it.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::{Error, Result};

/// Where a manifest came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestSource {
    /// The file (`built-in` for the kernel's own tools).
    pub path: PathBuf,
    /// JSON pointer of the manifest inside the file (`""` for a file holding one manifest,
    /// `"/2"` for the third element of an array).
    pub pointer: String,
}

impl ManifestSource {
    /// A source for a tool defined in code.
    pub fn built_in() -> Self {
        ManifestSource {
            path: PathBuf::from("built-in"),
            pointer: String::new(),
        }
    }
}

impl fmt::Display for ManifestSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pointer.is_empty() {
            write!(f, "{}", self.path.display())
        } else {
            write!(f, "{}#{}", self.path.display(), self.pointer)
        }
    }
}

/// One manifest as read, not yet judged.
#[derive(Debug, Clone)]
pub struct RawManifest {
    /// Where it came from.
    pub source: ManifestSource,
    /// Its JSON.
    pub value: Value,
}

/// Reads a JSON document from a file.
pub fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Unreadable {
        path: path.to_owned(),
        source,
    })?;
    parse_json(path, &text)
}

/// Parses JSON text read from `path`, naming the place of a syntax error.
pub fn parse_json(path: &Path, text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| Error::NotJson {
        path: path.to_owned(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })
}
