//! Reading a Kindgi pack's index: the file `python -m kindgi.pack index` writes (envelope `v: 1`),
//! holding the pack's identity and a manifest per tool.
//!
//! Takes in: the index's JSON. Hands on: a [`PackIndex`]: the identity a running pack service must
//! agree with, and each tool entry as a [`RawManifest`] whose source is `INDEX#/tools/N`, for the
//! validator to judge like any manifest.
//!
//! An index entry holds two fields the 1.1.0 manifest schema does not: `modulePath` (where the
//! handler lives inside the pack) and `needsApprovalWhenUnattended`. They are read, not refused:
//! each entry's are moved into the manifest's `metadata` under `kindgi`
//! (`metadata.kindgi.modulePath`, `metadata.kindgi.needsApprovalWhenUnattended`), beside the
//! pack's id (`metadata.kindgi.packId`), so the manifest stays a 1.1.0 manifest and the fields stay
//! in reach of a policy ([`Manifest::needs_approval_when_unattended`]).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::manifest::Manifest;
use super::source::{read_json, ManifestSource, RawManifest};
use crate::error::{Error, Result};

/// The index fields of a tool entry that are not manifest fields, moved into
/// `metadata.kindgi`.
pub const INDEX_ONLY_FIELDS: [&str; 2] = ["modulePath", "needsApprovalWhenUnattended"];

/// A pack's index, read.
#[derive(Debug, Clone)]
pub struct PackIndex {
    /// The index file.
    pub path: PathBuf,
    /// `packId`.
    pub pack_id: String,
    /// `packVersion`, when the index has one.
    pub pack_version: Option<String>,
    /// `artifactVersion`, when the index has one.
    pub artifact_version: Option<String>,
    /// Each tool entry as a manifest (its index-only fields moved into `metadata.kindgi`).
    pub tools: Vec<RawManifest>,
}

/// Whether a JSON document is a pack index rather than a manifest: an object with a `packId`
/// and a `tools` array (a manifest may hold neither: its schema refuses unknown fields).
pub fn is_pack_index(doc: &Value) -> bool {
    doc.get("packId").is_some() && doc.get("tools").is_some_and(Value::is_array)
}

impl PackIndex {
    /// Reads an index file.
    pub fn read(path: &Path) -> Result<Self> {
        let doc = read_json(path)?;
        Self::from_value(path, doc)
    }

    /// An index from its JSON, read from `path`. Refuses an envelope other than `v: 1`, a
    /// `packId` that is not a non-empty string, and a `tools` that is not an array; each entry is
    /// judged later, as a manifest.
    pub fn from_value(path: &Path, doc: Value) -> Result<Self> {
        let refuse = |pointer: &str, why: String| Error::InvalidPackIndex {
            path: path.to_owned(),
            pointer: pointer.to_owned(),
            why,
        };
        let Value::Object(mut doc) = doc else {
            return Err(refuse("", "a pack index is a JSON object".into()));
        };
        match doc.get("v") {
            Some(v) if v.as_u64() == Some(1) => {}
            Some(v) => {
                return Err(refuse(
                    "/v",
                    format!("the index envelope is v{v}; Sluice reads v1"),
                ))
            }
            None => {
                return Err(refuse(
                    "/v",
                    "the index names no envelope version (`v`: 1)".into(),
                ))
            }
        }
        let pack_id = match doc.get("packId") {
            Some(Value::String(id)) if !id.is_empty() => id.clone(),
            _ => return Err(refuse("/packId", "`packId` is a non-empty string".into())),
        };
        let text = |key: &str| doc.get(key).and_then(Value::as_str).map(str::to_owned);
        let pack_version = text("packVersion");
        let artifact_version = text("artifactVersion");
        let Some(Value::Array(entries)) = doc.remove("tools") else {
            return Err(refuse(
                "/tools",
                "`tools` is an array of tool entries".into(),
            ));
        };
        let tools = entries
            .into_iter()
            .enumerate()
            .map(|(i, entry)| RawManifest {
                source: ManifestSource {
                    path: path.to_owned(),
                    pointer: format!("/tools/{i}"),
                },
                value: lift_index_fields(entry, &pack_id),
            })
            .collect();
        Ok(PackIndex {
            path: path.to_owned(),
            pack_id,
            pack_version,
            artifact_version,
            tools,
        })
    }

    /// Each tool entry's `(id, version)` as written (an entry without them is left out: the
    /// validator names it).
    pub fn tool_versions(&self) -> Vec<(String, String)> {
        self.tools
            .iter()
            .filter_map(|t| {
                let id = t.value.get("id")?.as_str()?;
                let version = t.value.get("version")?.as_str()?;
                Some((id.to_owned(), version.to_owned()))
            })
            .collect()
    }
}

/// Moves an entry's index-only fields into `metadata.kindgi`, with the pack's id. An entry that
/// is not an object, or whose `metadata` (or `metadata.kindgi`) is not an object, is left as it
/// is: the validator then names what is wrong with it.
fn lift_index_fields(entry: Value, pack_id: &str) -> Value {
    let Value::Object(mut entry) = entry else {
        return entry;
    };
    let kindgi_ok = match entry.get("metadata") {
        None => true,
        Some(Value::Object(m)) => m.get("kindgi").is_none_or(Value::is_object),
        Some(_) => false,
    };
    if !kindgi_ok {
        return Value::Object(entry);
    }
    let mut lifted = Map::new();
    lifted.insert("packId".into(), Value::String(pack_id.to_owned()));
    for field in INDEX_ONLY_FIELDS {
        if let Some(v) = entry.remove(field) {
            lifted.insert(field.into(), v);
        }
    }
    let metadata = entry
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(m) = metadata {
        match m.get_mut("kindgi") {
            Some(Value::Object(k)) => k.extend(lifted),
            _ => {
                m.insert("kindgi".into(), Value::Object(lifted));
            }
        }
    }
    Value::Object(entry)
}

impl Manifest {
    /// Whether the tool's pack index marks it `needsApprovalWhenUnattended: true` (kept in
    /// `metadata.kindgi`): each call of it is to wait for a person's approval in a run no person
    /// started. Sluice cannot tell who started a run, so a policy reads this as the strict
    /// human-in-the-loop mode `always_ask` (docs/packs.md).
    pub fn needs_approval_when_unattended(&self) -> bool {
        self.metadata
            .as_ref()
            .and_then(|m| m.get("kindgi"))
            .and_then(|k| k.get("needsApprovalWhenUnattended"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn index(tools: Value) -> Value {
        json!({"v": 1, "packId": "ledger", "packVersion": "1.2.0",
               "artifactVersion": "20261207.1", "tools": tools})
    }

    #[test]
    fn index_only_fields_move_into_metadata_and_the_entry_validates() {
        let entry = json!({"id": "ledger.deposit", "description": "Deposit", "version": "1.2.0",
            "input": {"type": "object"}, "output": {"type": "object"},
            "effects": [{"kind": "writes", "resource": "ledger:{account}"}],
            "modulePath": "tools/deposit.py", "needsApprovalWhenUnattended": true});
        let idx = PackIndex::from_value(Path::new("i.json"), index(json!([entry]))).unwrap();
        assert_eq!(idx.pack_id, "ledger");
        assert_eq!(idx.artifact_version.as_deref(), Some("20261207.1"));
        let raw = &idx.tools[0];
        assert_eq!(raw.source.to_string(), "i.json#/tools/0");
        assert_eq!(
            raw.value["metadata"]["kindgi"],
            json!({"packId": "ledger", "modulePath": "tools/deposit.py",
                   "needsApprovalWhenUnattended": true})
        );
        let report = crate::model::validate(&raw.value, Default::default());
        assert!(report.is_valid(), "{:?}", report.errors);
        assert!(report.manifest.unwrap().needs_approval_when_unattended());
        assert_eq!(
            idx.tool_versions(),
            vec![("ledger.deposit".into(), "1.2.0".into())]
        );
    }

    #[test]
    fn a_bad_envelope_is_refused_naming_its_pointer() {
        let cases = [
            (json!({"v": 2, "packId": "p", "tools": []}), "/v"),
            (json!({"packId": "p", "tools": []}), "/v"),
            (json!({"v": 1, "packId": "", "tools": []}), "/packId"),
            (json!({"v": 1, "packId": "p", "tools": {}}), "/tools"),
        ];
        for (doc, pointer) in cases {
            match PackIndex::from_value(Path::new("i.json"), doc) {
                Err(Error::InvalidPackIndex { pointer: p, .. }) => assert_eq!(p, pointer),
                other => panic!("expected an invalid index at {pointer}, got {other:?}"),
            }
        }
    }

    #[test]
    fn only_an_object_with_pack_id_and_tools_is_an_index() {
        assert!(is_pack_index(&index(json!([]))));
        assert!(!is_pack_index(&json!({"id": "a", "tools": []})));
        assert!(!is_pack_index(&json!([{"packId": "p", "tools": []}])));
    }
}
