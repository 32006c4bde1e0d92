//! The built-in tools: real and small, for trying Sluice without writing a tool.
//!
//! Takes in: a [`BuiltinConfig`] (the root directory of the fs tools, the kv store). Hands on: the
//! tools of cli.md — `sluice.sleep`, `sluice.echo`, `sluice.kv.{get,put,delete,incr}`,
//! `sluice.fs.{read,write}` — each with its own manifest and native handler.
//!
//! The kv store is in memory, one per [`KvStore`] value (the CLI makes one per process). Every kv
//! tool takes an optional `delay_ms` to simulate latency; `incr` waits *between* its read and its
//! write, so two incrs of one key run unordered would lose an update — which Sluice's ordering
//! prevents. The fs tools are confined to their root: the path (relative to the root, or absolute)
//! is resolved lexically, and a path that leaves the root — by `..` or through a symbolic link — is
//! an error. Their resource is `fs:` + the normalized absolute path, so two spellings of one file
//! conflict.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use serde_json::{json, Value};

use crate::error::{Diagnostic, Error, ErrorCode, Result};
use crate::model::{Manifest, ManifestSource};
use crate::transport::{handler, Tool, ToolContext, ToolError, ToolRegistry};

/// The in-memory key-value store of the kv tools.
#[derive(Debug, Default, Clone)]
pub struct KvStore {
    map: Arc<DashMap<String, Value>>,
}

impl KvStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value under `key`.
    pub fn get(&self, key: &str) -> Option<Value> {
        self.map.get(key).map(|v| v.clone())
    }

    /// Sets `key`, returning the previous value.
    pub fn put(&self, key: &str, value: Value) -> Option<Value> {
        self.map.insert(key.to_owned(), value)
    }

    /// Removes `key`, returning whether it existed.
    pub fn delete(&self, key: &str) -> bool {
        self.map.remove(key).is_some()
    }

    /// Every entry, sorted by key.
    pub fn snapshot(&self) -> Vec<(String, Value)> {
        let mut v: Vec<(String, Value)> = self
            .map
            .iter()
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}

/// Configuration of the built-in tools.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BuiltinConfig {
    /// The directory the fs tools are confined to. Default: the current directory.
    pub root: PathBuf,
    /// The kv tools' store. Default: a new empty store.
    pub kv: KvStore,
}

impl BuiltinConfig {
    /// The built-in tools confined to `root`, with a new empty kv store.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        BuiltinConfig {
            root: root.into(),
            kv: KvStore::new(),
        }
    }

    /// These options with the kv tools' store `kv` (shared with whoever else holds it).
    pub fn with_kv(mut self, kv: KvStore) -> Self {
        self.kv = kv;
        self
    }
}

impl Default for BuiltinConfig {
    fn default() -> Self {
        BuiltinConfig {
            root: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            kv: KvStore::new(),
        }
    }
}

/// A registry holding the built-in tools only.
pub fn registry(config: BuiltinConfig) -> Result<ToolRegistry> {
    let mut r = ToolRegistry::new();
    for t in tools(config)? {
        r.insert(t)?;
    }
    Ok(r)
}

fn manifest(v: Value) -> Result<Manifest> {
    Manifest::from_value(v).map_err(|e| Error::InvalidManifest {
        source_name: "built-in".into(),
        errors: vec![Diagnostic::new("", e.to_string())],
    })
}

const DELAY: &str = r#"{"type": "integer", "minimum": 0, "maximum": 3600000}"#;

fn kv_input(extra: Value, required: &[&str]) -> Value {
    let mut props = json!({
        "key": {"type": "string", "minLength": 1},
        "delay_ms": serde_json::from_str::<Value>(DELAY).unwrap_or(Value::Null),
    });
    if let (Some(p), Value::Object(e)) = (props.as_object_mut(), extra) {
        p.extend(e);
    }
    json!({"type": "object", "properties": props, "required": required,
           "additionalProperties": false})
}

async fn delay(ctx: &ToolContext, input: &Value) -> Result<(), ToolError> {
    let ms = input.get("delay_ms").and_then(Value::as_u64).unwrap_or(0);
    if ms > 0 {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
            _ = ctx.cancellation().cancelled() => {
                return Err(ToolError::new(ErrorCode::Cancelled, "the call was cancelled"));
            }
        }
    }
    Ok(())
}

fn key(input: &Value) -> String {
    input
        .get("key")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// A kv tool whose work is one store operation after its `delay_ms`.
fn kv_tool(
    manifest_json: Value,
    kv: &KvStore,
    op: fn(&KvStore, &str, &Value) -> Value,
) -> Result<Tool> {
    let store = kv.clone();
    Tool::new(
        manifest(manifest_json)?,
        ManifestSource::built_in(),
        Some(handler(move |ctx: ToolContext, input: Value| {
            let store = store.clone();
            async move {
                delay(&ctx, &input).await?;
                Ok(op(&store, &key(&input), &input))
            }
        })),
    )
}

/// The built-in tools, compiled.
pub fn tools(config: BuiltinConfig) -> Result<Vec<Tool>> {
    let root = Arc::new(lexical_absolute(&config.root, Path::new(".")));
    let mut out = Vec::new();
    out.extend(plain_tools()?);
    out.extend(kv_tools(config.kv)?);
    out.extend(fs_tools(root)?);
    Ok(out)
}

/// `sluice.sleep` and `sluice.echo`: they touch nothing.
fn plain_tools() -> Result<Vec<Tool>> {
    let src = ManifestSource::built_in;
    let mut out = Vec::new();
    out.push(Tool::new(
        manifest(json!({
            "id": "sluice.sleep", "version": "1.0.0",
            "description": "Wait `ms` milliseconds, then return. Touches nothing.",
            "input": {"type": "object", "required": ["ms"], "additionalProperties": false,
                      "properties": {"ms": serde_json::from_str::<Value>(DELAY).unwrap_or(Value::Null)}},
            "output": {"type": "object", "required": ["slept_ms"],
                       "properties": {"slept_ms": {"type": "integer"}}},
            "mutating": false, "effects": []
        }))?,
        src(),
        Some(handler(|ctx: ToolContext, input: Value| async move {
            let ms = input.get("ms").and_then(Value::as_u64).unwrap_or(0);
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(ms)) => Ok(json!({"slept_ms": ms})),
                _ = ctx.cancellation().cancelled() => {
                    Err(ToolError::new(ErrorCode::Cancelled, "the call was cancelled"))
                }
            }
        })),
    )?);

    out.push(Tool::new(
        manifest(json!({
            "id": "sluice.echo", "version": "1.0.0",
            "description": "Return the input unchanged. Touches nothing.",
            "input": {"type": "object"}, "output": {"type": "object"},
            "mutating": false, "effects": []
        }))?,
        src(),
        Some(handler(|_ctx: ToolContext, input: Value| async move {
            Ok(input)
        })),
    )?);

    Ok(out)
}

/// `sluice.kv.*`: the in-memory store, one resource `kv:{key}` per key.
fn kv_tools(kv: KvStore) -> Result<Vec<Tool>> {
    let src = ManifestSource::built_in;
    let mut out = Vec::new();
    out.push(kv_tool(
        json!({
            "id": "sluice.kv.get", "version": "1.0.0",
            "description": "Read the value under `key` in the in-memory store (null when missing).",
            "input": kv_input(json!({}), &["key"]),
            "output": {"type": "object", "required": ["key", "value"]},
            "mutating": false,
            "effects": [{"kind": "reads", "resource": "kv:{key}"}]
        }),
        &kv,
        |store, k, _input| json!({"key": k, "value": store.get(k).unwrap_or(Value::Null)}),
    )?);

    out.push(kv_tool(
        json!({
            "id": "sluice.kv.put", "version": "1.0.0",
            "description": "Set `key` to `value` in the in-memory store; returns the previous value.",
            "input": kv_input(json!({"value": {}}), &["key", "value"]),
            "output": {"type": "object", "required": ["key", "previous"]},
            "mutating": true,
            "effects": [{"kind": "writes", "resource": "kv:{key}"}]
        }),
        &kv,
        |store, k, input| {
            let v = input.get("value").cloned().unwrap_or(Value::Null);
            json!({"key": k, "previous": store.put(k, v).unwrap_or(Value::Null)})
        },
    )?);

    out.push(kv_tool(
        json!({
            "id": "sluice.kv.delete", "version": "1.0.0",
            "description": "Delete `key` from the in-memory store; says whether it existed.",
            "input": kv_input(json!({}), &["key"]),
            "output": {"type": "object", "required": ["key", "existed"]},
            "mutating": true,
            "effects": [{"kind": "deletes", "resource": "kv:{key}"}]
        }),
        &kv,
        |store, k, _input| json!({"key": k, "existed": store.delete(k)}),
    )?);

    let store = kv;
    out.push(Tool::new(
        manifest(json!({
            "id": "sluice.kv.incr", "version": "1.0.0",
            "description": "Add `by` (default 1) to the number under `key` (missing counts as 0); \
                            returns the new value. Waits `delay_ms` between its read and its write.",
            "input": kv_input(json!({"by": {"type": "number"}}), &["key"]),
            "output": {"type": "object", "required": ["key", "value"]},
            "mutating": true,
            "effects": [{"kind": "reads", "resource": "kv:{key}"},
                        {"kind": "writes", "resource": "kv:{key}"}]
        }))?,
        src(),
        Some(handler(move |ctx: ToolContext, input: Value| {
            let store = store.clone();
            async move {
                let k = key(&input);
                let by = input.get("by").cloned().unwrap_or(json!(1));
                let current = store.get(&k).unwrap_or(json!(0));
                if !current.is_number() {
                    return Err(ToolError::new(
                        ErrorCode::NotANumber,
                        format!("the value under `{k}` is not a number: {current}"),
                    ));
                }
                delay(&ctx, &input).await?;
                let value = add(&current, &by);
                store.put(&k, value.clone());
                Ok(json!({"key": k, "value": value}))
            }
        })),
    )?);

    Ok(out)
}

/// `sluice.fs.read` and `sluice.fs.write`, confined to `root`; their resources are the
/// absolute paths, so that two spellings of one file are one resource.
fn fs_tools(root: Arc<PathBuf>) -> Result<Vec<Tool>> {
    let src = ManifestSource::built_in;
    let mut out = Vec::new();
    let fs_view = {
        let root = root.clone();
        move |input: &Value| -> Value {
            let mut v = input.clone();
            if let Some(p) = input.get("path").and_then(Value::as_str) {
                let abs = lexical_absolute(&root, Path::new(p));
                v["path"] = Value::String(abs.to_string_lossy().into_owned());
            }
            v
        }
    };
    let path_schema = json!({"type": "string", "minLength": 1});

    let r = root.clone();
    out.push(
        Tool::new(
            manifest(json!({
                "id": "sluice.fs.read", "version": "1.0.0",
                "description": "Read the UTF-8 text file at `path` (relative to the root, or \
                                absolute inside it).",
                "input": {"type": "object", "required": ["path"], "additionalProperties": false,
                          "properties": {"path": path_schema}},
                "output": {"type": "object", "required": ["path", "content"]},
                "mutating": false,
                "effects": [{"kind": "reads", "resource": "fs:{path}"}]
            }))?,
            src(),
            Some(handler(move |_ctx: ToolContext, input: Value| {
                let root = r.clone();
                async move {
                    let path = confined(&root, &input, false)?;
                    let content = tokio::fs::read_to_string(&path).await.map_err(|e| {
                        ToolError::new(
                            ErrorCode::Io,
                            format!("cannot read `{}`: {e}", path.display()),
                        )
                    })?;
                    Ok(json!({"path": path.to_string_lossy(), "content": content}))
                }
            })),
        )?
        .with_access_input(fs_view.clone()),
    );

    let r = root;
    out.push(
        Tool::new(
            manifest(json!({
                "id": "sluice.fs.write", "version": "1.0.0",
                "description": "Write `content` to the file at `path` (relative to the root, or \
                                absolute inside it), creating or replacing it.",
                "input": {"type": "object", "required": ["path", "content"],
                          "additionalProperties": false,
                          "properties": {"path": path_schema, "content": {"type": "string"}}},
                "output": {"type": "object", "required": ["path", "bytes"]},
                "mutating": true,
                "effects": [{"kind": "writes", "resource": "fs:{path}"}]
            }))?,
            src(),
            Some(handler(move |_ctx: ToolContext, input: Value| {
                let root = r.clone();
                async move {
                    let path = confined(&root, &input, true)?;
                    let content = input.get("content").and_then(Value::as_str).unwrap_or("");
                    tokio::fs::write(&path, content).await.map_err(|e| {
                        ToolError::new(
                            ErrorCode::Io,
                            format!("cannot write `{}`: {e}", path.display()),
                        )
                    })?;
                    Ok(json!({"path": path.to_string_lossy(), "bytes": content.len()}))
                }
            })),
        )?
        .with_access_input(fs_view),
    );
    Ok(out)
}

/// Adds two JSON numbers, as integers when both are integers and the sum fits.
fn add(a: &Value, b: &Value) -> Value {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        if let Some(s) = x.checked_add(y) {
            return json!(s);
        }
    }
    let s = a.as_f64().unwrap_or(0.0) + b.as_f64().unwrap_or(0.0);
    serde_json::Number::from_f64(s).map_or(Value::Null, Value::Number)
}

/// `path` made absolute against `root` and normalized lexically (`.` dropped, `..` resolved,
/// never above `/`).
pub fn lexical_absolute(root: &Path, path: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_owned()
    } else {
        root.join(path)
    };
    let mut out = PathBuf::from("/");
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(s) => out.push(s),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// The call's path, checked to stay inside `root` — lexically, and after following symbolic
/// links of what exists (the file itself, or for a write its parent directory).
fn confined(root: &Path, input: &Value, for_write: bool) -> Result<PathBuf, ToolError> {
    let raw = input
        .get("path")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let path = lexical_absolute(root, Path::new(raw));
    let escape = || {
        ToolError::new(
            ErrorCode::PathEscapesRoot,
            format!(
                "`{raw}` is outside the root `{}`: the fs tools reach only files under it",
                root.display()
            ),
        )
    };
    if !path.starts_with(root) || path == root {
        return Err(escape());
    }
    let real_root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_owned());
    let existing = if for_write && !path.exists() {
        path.parent().map(Path::to_owned)
    } else {
        Some(path.clone())
    };
    if let Some(e) = existing {
        if let Ok(real) = std::fs::canonicalize(&e) {
            if !real.starts_with(&real_root) {
                return Err(escape());
            }
        }
    }
    Ok(path)
}
