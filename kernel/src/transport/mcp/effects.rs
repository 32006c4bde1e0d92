//! Effects for the tools of MCP servers, which declare none: the catalog Sluice ships, the
//! overlays a user writes, and the effects another Sluice publishes in `_meta`.
//!
//! MCP has no resources, and its annotations are hints a client must not trust. So an imported
//! tool gets its effects from, in this order:
//! 1. an **overlay** ([`EffectsFile`], `--effects FILE`) naming the server and the tool;
//! 2. the effects the server **publishes** under [`EFFECTS_META`] in the tool's `_meta` (another
//!    Sluice does), only when the operator trusts that server;
//! 3. the **catalog** ([`EffectsCatalog::builtin`]: one file per well-known server under
//!    `kernel/catalog/mcp/`), when the tool's input schema still has the shape the entry was
//!    written for ([`input_shape`]; else a warning names the tool and it falls through);
//! 4. the server's hints, conservatively (see [`super::import`]).
//!
//! An entry matches by the server's `serverInfo.name` and the tool's name. It gives the tool's
//! effects (Kindgi effects, resources templated from the input), which input fields hold
//! filesystem paths, and the server says how it resolves them: against the directories a tool
//! of its own lists (the filesystem server's `list_allowed_directories`), against its working
//! directory (a server Sluice starts over stdio shares Sluice's), `~` as the home directory. The
//! manifest keeps that in `metadata.sluice.paths` ([`crate::access::PathRules`]), so two
//! spellings of one file are one resource.
//!
//! The JSON form of a server's entry (a catalog file, or an overlay):
//!
//! ```json
//! {"server": "secure-filesystem-server",
//!  "paths": {"roots": "list_allowed_directories", "home": true},
//!  "tools": {
//!    "write_file": {"input": {"path": "string", "content": "string"},
//!                   "paths": ["path"],
//!                   "effects": [{"kind": "writes", "resource": "fs:{path}"}]}}}
//! ```
//!
//! `input` (the guard) and `paths` are optional; `mutating` (a boolean) may say what the effects
//! do not (by default a tool is mutating when one of its effects changes its resource). An
//! overlay file holds one such object, or `{"servers": [..]}`.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::access::PathRules;
use crate::model::{AccessMode, Effect};

pub use crate::model::{EFFECTS_META, PATHS_META};

/// The catalog files, compiled in.
const BUILTIN: &[(&str, &str)] = &[
    (
        "filesystem",
        include_str!("../../../catalog/mcp/filesystem.json"),
    ),
    ("memory", include_str!("../../../catalog/mcp/memory.json")),
    ("git", include_str!("../../../catalog/mcp/git.json")),
    ("fetch", include_str!("../../../catalog/mcp/fetch.json")),
    (
        "everything",
        include_str!("../../../catalog/mcp/everything.json"),
    ),
];

/// How a server resolves the paths in its tools' input.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ServerPaths {
    /// A tool of the server, taking no arguments, whose text lists the directories it confines
    /// itself to (one absolute path a line); relative paths resolve against them.
    #[serde(default)]
    pub roots: Option<String>,
    /// Whether `~` is the home directory.
    #[serde(default)]
    pub home: bool,
}

/// The effects of one tool.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ToolEffects {
    /// The shape of the input schema the entry was written for ([`input_shape`]); when the
    /// server's differs, the entry is not applied.
    #[serde(default)]
    pub input: Option<BTreeMap<String, String>>,
    /// The input fields that hold a filesystem path or an array of them.
    #[serde(default)]
    pub paths: Vec<String>,
    /// The Kindgi effects.
    pub effects: Vec<Effect>,
    /// Whether the tool changes something; by default, whether an effect does.
    #[serde(default)]
    pub mutating: Option<bool>,
}

impl ToolEffects {
    /// Whether the tool changes something (see [`ToolEffects::mutating`]).
    pub fn is_mutating(&self) -> bool {
        self.mutating.unwrap_or_else(|| {
            self.effects
                .iter()
                .any(|e| e.kind.mode() == AccessMode::Write)
        })
    }
}

/// The effects of one server's tools, and where they were written.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ServerEffects {
    /// The server's `serverInfo.name`.
    pub server: String,
    /// How its paths resolve.
    pub paths: ServerPaths,
    /// By tool name.
    pub tools: BTreeMap<String, ToolEffects>,
    /// Where this came from (`catalog:filesystem`, an overlay's file), for messages.
    pub origin: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    server: String,
    #[serde(default, rename = "writtenFor")]
    _written_for: Option<String>,
    #[serde(default)]
    paths: ServerPaths,
    tools: Map<String, Value>,
}

impl ServerEffects {
    /// Reads one server's entry (its JSON form: see the module docs); `Err` says which member
    /// or tool is wrong and why.
    pub fn from_value(value: Value, origin: &str) -> Result<Self, String> {
        let raw: RawServer = serde_json::from_value(value).map_err(|e| e.to_string())?;
        if raw.server.is_empty() {
            return Err("`server` is empty: it must be the server's `serverInfo.name`".into());
        }
        let mut tools = BTreeMap::new();
        for (name, v) in raw.tools {
            let t: ToolEffects =
                serde_json::from_value(v).map_err(|e| format!("`/tools/{name}`: {e}"))?;
            for (i, e) in t.effects.iter().enumerate() {
                if let Some(r) = &e.resource {
                    crate::access::ResourceTemplate::parse(r)
                        .map_err(|why| format!("`/tools/{name}/effects/{i}/resource`: {why}"))?;
                }
            }
            tools.insert(name, t);
        }
        Ok(ServerEffects {
            server: raw.server,
            paths: raw.paths,
            tools,
            origin: origin.to_owned(),
        })
    }
}

/// The servers whose tools Sluice knows effects for.
#[derive(Debug, Clone, Default)]
pub struct EffectsCatalog {
    servers: Vec<ServerEffects>,
}

impl EffectsCatalog {
    /// The catalog Sluice ships: the reference servers (filesystem, memory, git, fetch,
    /// everything).
    pub fn builtin() -> Self {
        let servers = BUILTIN
            .iter()
            .filter_map(|(name, text)| {
                let origin = format!("catalog:{name}");
                // The catalog's own test reads every file; one that did not parse would fail it.
                let value = serde_json::from_str(text).ok()?;
                ServerEffects::from_value(value, &origin).ok()
            })
            .collect();
        EffectsCatalog { servers }
    }

    /// No entry at all.
    pub fn empty() -> Self {
        EffectsCatalog::default()
    }

    /// A catalog of these entries (an embedder's own, or the built-in one amended).
    pub fn from_servers(servers: Vec<ServerEffects>) -> Self {
        EffectsCatalog { servers }
    }

    /// The entry of the server named `server`.
    pub fn server(&self, server: &str) -> Option<&ServerEffects> {
        self.servers.iter().find(|s| s.server == server)
    }

    /// Every entry.
    pub fn servers(&self) -> &[ServerEffects] {
        &self.servers
    }
}

/// An overlay: effects a user gives imported tools, by server and tool name, without editing the
/// manifests an import writes (`--effects FILE`).
#[derive(Debug, Clone, PartialEq)]
pub struct EffectsFile {
    /// The servers it names.
    pub servers: Vec<ServerEffects>,
    /// Its file.
    pub origin: String,
}

impl EffectsFile {
    /// Reads an overlay from its JSON value (a TOML file read into the same value): one server's
    /// entry, or `{"servers": [..]}`. `Err` says where and why.
    pub fn from_value(value: Value, origin: &str) -> Result<Self, String> {
        let items = match value {
            Value::Object(mut o) if o.contains_key("servers") => {
                if o.len() > 1 {
                    return Err("beside `servers` there may be nothing else".into());
                }
                match o.remove("servers") {
                    Some(Value::Array(a)) => a,
                    _ => return Err("`servers` must be an array of server entries".into()),
                }
            }
            v @ Value::Object(_) => vec![v],
            _ => {
                return Err(
                    "must be an object: one server's entry, or `{\"servers\": [..]}`".into(),
                )
            }
        };
        let many = items.len() > 1;
        let servers = items
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                ServerEffects::from_value(v, origin).map_err(|why| match many {
                    true => format!("`/servers/{i}`: {why}"),
                    false => why,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(EffectsFile {
            servers,
            origin: origin.to_owned(),
        })
    }
}

/// The shape of an input schema the catalog's guard compares: each top-level property's type
/// (`string`, `array<string>`, `string|null` for a union, `any` when unsaid), by name.
pub fn input_shape(schema: &Map<String, Value>) -> BTreeMap<String, String> {
    fn ty(s: &Value) -> String {
        let Value::Object(o) = s else {
            return "any".into();
        };
        match o.get("type") {
            Some(Value::String(t)) if t == "array" => {
                format!("array<{}>", o.get("items").map_or_else(|| "any".into(), ty))
            }
            Some(Value::String(t)) => t.clone(),
            Some(Value::Array(ts)) => {
                let mut names: Vec<String> = ts
                    .iter()
                    .map(|t| t.as_str().unwrap_or("any").to_owned())
                    .collect();
                names.sort();
                names.join("|")
            }
            _ => match o.get("anyOf").or_else(|| o.get("oneOf")) {
                Some(Value::Array(branches)) => {
                    let mut names: Vec<String> = branches.iter().map(ty).collect();
                    names.sort();
                    names.dedup();
                    names.join("|")
                }
                _ => "any".into(),
            },
        }
    }
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.iter().map(|(k, v)| (k.clone(), ty(v))).collect())
        .unwrap_or_default()
}

/// How `shape` (the server's) differs from `expected` (the entry's), in words; `None` when equal.
pub fn shape_difference(
    expected: &BTreeMap<String, String>,
    shape: &BTreeMap<String, String>,
) -> Option<String> {
    let mut out = Vec::new();
    for (k, t) in expected {
        match shape.get(k) {
            None => out.push(format!("`{k}` is gone")),
            Some(u) if u != t => out.push(format!("`{k}` is `{u}`, not `{t}`")),
            Some(_) => {}
        }
    }
    for k in shape.keys().filter(|k| !expected.contains_key(*k)) {
        out.push(format!("`{k}` is new"));
    }
    (!out.is_empty()).then(|| out.join(", "))
}

/// Gives `manifest` (an imported tool's) these effects: `effects`, `mutating`, and
/// `metadata.sluice` = `{"effects": from, "paths": rules}`.
pub(crate) fn apply(
    manifest: &mut Value,
    effects: &ToolEffects,
    rules: Option<&PathRules>,
    from: &str,
) {
    let Some(m) = manifest.as_object_mut() else {
        return;
    };
    m.remove("effects");
    if !effects.effects.is_empty() {
        m.insert("effects".into(), json!(effects.effects));
    }
    m.insert("mutating".into(), Value::Bool(effects.is_mutating()));
    let mut sluice = Map::new();
    sluice.insert("effects".into(), Value::String(from.to_owned()));
    if let Some(r) = rules {
        sluice.insert("paths".into(), r.to_value());
    }
    if let Some(Value::Object(meta)) = m.get_mut("metadata") {
        meta.insert("sluice".into(), Value::Object(sluice));
    }
}

/// The effects a server published in a tool's `_meta` ([`EFFECTS_META`], [`PATHS_META`]), when
/// there are any; `Err` when they do not read as Kindgi effects.
pub(crate) fn published(
    meta: &Map<String, Value>,
) -> Option<Result<(ToolEffects, Option<PathRules>), String>> {
    meta.get(EFFECTS_META)
        .map(|effects| read_published(effects, meta.get(PATHS_META)))
}

fn read_published(
    effects: &Value,
    paths: Option<&Value>,
) -> Result<(ToolEffects, Option<PathRules>), String> {
    let effects: Vec<Effect> = serde_json::from_value(effects.clone())
        .map_err(|e| format!("`_meta.{EFFECTS_META}`: {e}"))?;
    let rules = match paths {
        None | Some(Value::Null) => None,
        Some(v) => {
            Some(PathRules::from_value(v).map_err(|why| format!("`_meta.{PATHS_META}`: {why}"))?)
        }
    };
    let tool = ToolEffects {
        input: None,
        paths: rules.as_ref().map(|r| r.fields.clone()).unwrap_or_default(),
        effects,
        mutating: None,
    };
    Ok((tool, rules))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_catalog_file_reads() {
        for (name, text) in BUILTIN {
            let value: Value = serde_json::from_str(text).unwrap();
            let entry = ServerEffects::from_value(value, name).unwrap();
            assert!(!entry.tools.is_empty(), "{name}");
            for (tool, t) in &entry.tools {
                for field in &t.paths {
                    assert!(
                        t.input.as_ref().is_some_and(|i| i.contains_key(field)),
                        "{name}/{tool}: the path field `{field}` is not in its input"
                    );
                }
            }
        }
        assert_eq!(EffectsCatalog::builtin().servers().len(), BUILTIN.len());
    }

    #[test]
    fn shapes_name_types_and_unions() {
        let schema: Map<String, Value> = serde_json::from_value(json!({"type": "object",
            "properties": {"p": {"type": "string"}, "ps": {"type": "array", "items": {"type": "string"}},
                "t": {"anyOf": [{"type": "string"}, {"type": "null"}]}, "u": {}}}))
        .unwrap();
        let shape = input_shape(&schema);
        assert_eq!(shape["p"], "string");
        assert_eq!(shape["ps"], "array<string>");
        assert_eq!(shape["t"], "null|string");
        assert_eq!(shape["u"], "any");
        let mut expected = shape.clone();
        assert_eq!(shape_difference(&expected, &shape), None);
        expected.remove("u");
        expected.insert("p".into(), "number".into());
        let why = shape_difference(&expected, &shape).unwrap();
        assert!(why.contains("`p` is `string`, not `number`"), "{why}");
        assert!(why.contains("`u` is new"), "{why}");
    }

    #[test]
    fn published_effects_read_or_say_why_not() {
        let meta = |v: Value| -> Map<String, Value> { serde_json::from_value(v).unwrap() };
        assert!(published(&meta(json!({"sluice.dev/version": "1.0.0"}))).is_none());
        let (tool, rules) = published(&meta(
            json!({EFFECTS_META: [{"kind": "writes", "resource": "fs:{path}"}],
            PATHS_META: {"fields": ["path"], "roots": ["/srv"]}}),
        ))
        .unwrap()
        .unwrap();
        assert!(tool.is_mutating());
        assert_eq!(tool.paths, vec!["path".to_owned()]);
        assert_eq!(rules.unwrap().roots, vec![std::path::PathBuf::from("/srv")]);
        let bad = published(&meta(json!({EFFECTS_META: [{"kind": "teleports"}]})))
            .unwrap()
            .unwrap_err();
        assert!(bad.contains(EFFECTS_META), "{bad}");
        let bad = published(&meta(json!({EFFECTS_META: [], PATHS_META: {"fields": []}})))
            .unwrap()
            .unwrap_err();
        assert!(bad.contains(PATHS_META), "{bad}");
    }

    #[test]
    fn overlays_say_where_they_are_wrong() {
        let bad = EffectsFile::from_value(
            json!({"server": "s", "tools": {"t": {"effects": [{"kind": "scribbles"}]}}}),
            "o.json",
        )
        .unwrap_err();
        assert!(bad.contains("`/tools/t`"), "{bad}");
        let bad = EffectsFile::from_value(
            json!({"servers": [{"server": "s", "tools": {}}, {"server": "s2", "tools": {"t": {"effects": [{"kind": "reads", "resource": "a:{"}]}}}]}),
            "o.json",
        )
        .unwrap_err();
        assert!(
            bad.contains("`/servers/1`: `/tools/t/effects/0/resource`"),
            "{bad}"
        );
        let bad =
            EffectsFile::from_value(json!({"server": "s", "tool": {}}), "o.json").unwrap_err();
        assert!(bad.contains("tool"), "{bad}");
        let ok = EffectsFile::from_value(
            json!({"server": "s", "tools": {"t": {"effects": [{"kind": "reads", "resource": "a:b"}]}}}),
            "o.json",
        )
        .unwrap();
        assert!(!ok.servers[0].tools["t"].is_mutating());
    }
}
