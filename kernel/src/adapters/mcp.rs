//! MCP: `tools/list` entries out (annotations from effects; the version, the effects and how
//! paths resolve in `_meta`);
//! `tools/call` requests in; `tools/call` results back.

use serde_json::{json, Value};

use super::common::{
    annotations, batch_of, changes_of, failure_text, offered, set, wrong_shape, ExportOptions,
    Exported,
};
use super::names::ToolNames;
use super::schema;
use crate::error::Result;
use crate::model::{Batch, Call, Manifest, Status, EFFECTS_META, PATHS_META};
use crate::run::{BatchResult, CallResult};
use crate::transport::ToolRegistry;

/// The `_meta` key that carries a tool's version (and a result's).
pub const VERSION_META: &str = "sluice.dev/version";

/// MCP tool names may hold `.`: the id (or `id@version`, whose `@` MCP refuses, mapped) is
/// kept when it fits MCP's characters, else mapped.
fn mcp_name(key: &str, names: &ToolNames) -> String {
    let fits = !key.is_empty()
        && key.len() <= 128
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if fits {
        key.to_owned()
    } else {
        names.name(key)
    }
}

/// The registry's tools (each id's highest version) as `tools/list` entries.
pub fn tools(registry: &ToolRegistry, names: &ToolNames) -> Vec<Value> {
    export(registry, names, &ExportOptions::default()).definitions
}

/// The registry's tools as `tools/list` entries, with annotations from their effects and the
/// version in `_meta`.
pub fn export(registry: &ToolRegistry, names: &ToolNames, options: &ExportOptions) -> Exported {
    let mut out = Exported::default();
    for (t, _) in offered(registry, names, options) {
        let key = if registry.is_latest(t) {
            t.id().to_owned()
        } else {
            format!("{}@{}", t.id(), t.manifest().version.as_str())
        };
        let name = mcp_name(&key, names);
        let mut notes = schema::Notes::default();
        let input = schema::object_root(&t.manifest().input, &mut notes);
        changes_of(&name, notes, &mut out.changes);
        let mut meta = json!({VERSION_META: t.manifest().version.as_str(),
            EFFECTS_META: published_effects(t.manifest())});
        if let Some(paths) = t
            .manifest()
            .metadata
            .as_ref()
            .and_then(|m| m.get("sluice"))
            .and_then(|s| s.get("paths"))
        {
            set(&mut meta, PATHS_META, paths.clone());
        }
        let mut v = json!({"name": name,
            "description": t.manifest().description.as_str(),
            "inputSchema": input, "annotations": annotations(t),
            "_meta": meta});
        if !t.manifest().output.is_empty() {
            set(
                &mut v,
                "outputSchema",
                Value::Object(t.manifest().output.clone()),
            );
        }
        out.definitions.push(v);
    }
    out
}

/// A tool's effects as `tools/list` publishes them under [`EFFECTS_META`]: the declared ones, and
/// `{"kind": "writes"}` (every resource) when the tool is mutating but declares no changing
/// effect, so that an importer that trusts the array alone never under-orders the tool.
pub fn published_effects(manifest: &Manifest) -> Value {
    let mut effects: Vec<Value> = manifest
        .effects()
        .iter()
        .map(|e| serde_json::to_value(e).unwrap_or(Value::Null))
        .collect();
    if manifest.is_mutating() && !manifest.declares_changing_effect() {
        effects.push(json!({"kind": "writes",
            "notes": "mutating, with no changing effect declared: every resource"}));
    }
    Value::Array(effects)
}

/// A batch from `tools/call` requests: JSON-RPC requests (their ids become call ids) or bare
/// `{"name", "arguments"}` params (named by position).
pub fn batch(tenant: &str, requests: &Value, names: &ToolNames) -> Result<Batch> {
    let Value::Array(items) = requests else {
        return Err(wrong_shape("", "an array of tools/call requests", requests));
    };
    let made_up: Vec<bool> = items
        .iter()
        .map(|r| !matches!(r.get("id"), Some(Value::String(_) | Value::Number(_))))
        .collect();
    let calls: Vec<Call> = items
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let params = r.get("params").unwrap_or(r);
            let id = match r.get("id") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                _ => format!("#{i}"),
            };
            let name = params.get("name").and_then(Value::as_str).unwrap_or("");
            let tool = names.id(name);
            match params.get("arguments") {
                Some(v @ Value::Object(_)) => Call::new(id, tool, v.clone()),
                None => Call::new(id, tool, Value::Object(Default::default())),
                Some(_) => Call::defective(id, tool, "the arguments are not a JSON object"),
            }
        })
        .collect();
    batch_of(tenant, calls, &made_up)
}

/// `tools/call` results, one per call in submission order (each as [`result`] renders it).
pub fn results(result: &BatchResult) -> Vec<Value> {
    results_of(&result.results)
}

/// [`results`] of a slice of results.
pub fn results_of(results: &[CallResult]) -> Vec<Value> {
    results.iter().map(result).collect()
}

/// The `_meta` key that says a call's records were not kept (`false`): the provenance log
/// failed to keep them, as `/v1/run`'s `"recorded": false` says.
pub const RECORDED_META: &str = "sluice/recorded";

/// One `tools/call` result, the one rendering Sluice gives (the CLI's `--format mcp` and the
/// gateway's `tools/call` alike; docs/serve.md): `ok` is `structuredContent` (an object output)
/// plus one text block holding the output as JSON; any other status is `isError` with one text
/// block as [`failure_text`] spells it. `_meta` carries the version that ran and, when the
/// provenance log could not keep the call's records, `"sluice/recorded": false`.
pub fn result(r: &CallResult) -> Value {
    let parts = ResultParts::of(r);
    let mut v = json!({"content": [{"type": "text", "text": parts.text}],
                       "isError": parts.is_error});
    if let Some(out) = parts.structured {
        set(&mut v, "structuredContent", out.clone());
    }
    if !parts.meta.is_empty() {
        set(&mut v, "_meta", Value::Object(parts.meta));
    }
    v
}

/// The parts of one `tools/call` result as [`result`] decides them, for a server that builds
/// its own result type from them (the gateway's rmcp `CallToolResult`) without a JSON round
/// trip: one text block, whether it is an error, the structured content, the `_meta`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ResultParts<'a> {
    /// The one text block: the output as JSON, or [`failure_text`].
    pub text: String,
    /// `isError`: every status but `ok`.
    pub is_error: bool,
    /// `structuredContent`: the output of an `ok` call when it is an object.
    pub structured: Option<&'a Value>,
    /// `_meta`: the version that ran, and `"sluice/recorded": false` when the records were not
    /// kept (empty when neither).
    pub meta: serde_json::Map<String, Value>,
}

impl<'a> ResultParts<'a> {
    /// The parts of `r`'s result.
    pub fn of(r: &'a CallResult) -> Self {
        let ok = r.status == Status::Ok;
        let text = match (ok, &r.output) {
            (true, Some(out)) => out.to_string(),
            (true, None) => "null".to_owned(),
            (false, _) => failure_text(r),
        };
        let structured = match (ok, &r.output) {
            (true, Some(out @ Value::Object(_))) => Some(out),
            _ => None,
        };
        let mut meta = serde_json::Map::new();
        if let Some(version) = &r.version {
            meta.insert(VERSION_META.into(), Value::String(version.clone()));
        }
        if r.recorded == Some(false) {
            meta.insert(RECORDED_META.into(), Value::Bool(false));
        }
        ResultParts {
            text,
            is_error: !ok,
            structured,
            meta,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_effects_say_everything_a_tool_may_touch() {
        let m = |v: Value| Manifest::from_value(v).unwrap();
        let base = json!({"id": "a.b", "description": "d", "version": "1.0.0",
            "input": {"type": "object"}, "output": {}});
        let mut declared = base.clone();
        declared["effects"] = json!([{"kind": "writes", "resource": "kv:{k}"}]);
        assert_eq!(
            published_effects(&m(declared)),
            json!([{"kind": "writes", "resource": "kv:{k}"}])
        );
        // Mutating with no changing effect: every resource, so a trusting importer orders it
        // alone.
        let published = published_effects(&m(base.clone()));
        assert_eq!(published[0]["kind"], "writes");
        assert!(published[0].get("resource").is_none(), "{published}");
        let mut pure = base;
        pure["mutating"] = json!(false);
        assert_eq!(published_effects(&m(pure)), json!([]));
    }
}
