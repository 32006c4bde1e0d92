//! Reading manifest files.
//!
//! Takes in: a path — a file holding one manifest object or an array of them (or a Kindgi pack's
//! index, whose tool entries are manifests: [`super::PackIndex`]), or a directory whose `*.json`
//! files are read (not recursively, in name order). Hands on: each manifest's JSON
//! with its [`ManifestSource`] (file, and JSON pointer inside it for array elements), for
//! [`crate::model::validate()`] to judge and [`crate::transport::ToolRegistry`] to register.

use std::path::Path;

use serde_json::Value;

use super::source::{read_json, ManifestSource, RawManifest};
use crate::error::{Error, Result};

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
