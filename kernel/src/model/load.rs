//! Reading manifest files.
//!
//! Takes in: a path — a file holding one manifest object or an array of them (or a Kindgi pack's
//! index, whose tool entries are manifests: [`super::PackIndex`]), or a directory whose `*.json`
//! files are read (not recursively, in name order). Hands on: each manifest's JSON
//! with its [`ManifestSource`] (file, and JSON pointer inside it for array elements), for
//! [`crate::model::validate()`] to judge and [`crate::transport::ToolRegistry`] to register.

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

/// Reads every manifest under `path` (see the module docs).
pub fn read_manifests(path: &Path) -> Result<Vec<RawManifest>> {
    let meta = std::fs::metadata(path).map_err(|source| Error::Unreadable {
        path: path.to_owned(),
        source,
    })?;
    if !meta.is_dir() {
        return read_file(path);
    }
    let mut files = Vec::new();
    let entries = std::fs::read_dir(path).map_err(|source| Error::Unreadable {
        path: path.to_owned(),
        source,
    })?;
    for entry in entries {
        let entry = entry.map_err(|source| Error::Unreadable {
            path: path.to_owned(),
            source,
        })?;
        let p = entry.path();
        if p.extension().is_some_and(|e| e == "json") && p.is_file() {
            files.push(p);
        }
    }
    files.sort();
    let mut out = Vec::new();
    for f in files {
        out.extend(read_file(&f)?);
    }
    Ok(out)
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

fn read_file(path: &Path) -> Result<Vec<RawManifest>> {
    let value = read_json(path)?;
    if super::pack::is_pack_index(&value) {
        return Ok(super::pack::PackIndex::from_value(path, value)?.tools);
    }
    Ok(match value {
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, value)| RawManifest {
                source: ManifestSource {
                    path: path.to_owned(),
                    pointer: format!("/{i}"),
                },
                value,
            })
            .collect(),
        value => vec![RawManifest {
            source: ManifestSource {
                path: path.to_owned(),
                pointer: String::new(),
            },
            value,
        }],
    })
}
