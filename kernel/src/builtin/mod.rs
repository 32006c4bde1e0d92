//! The built-in tools: real and small, for trying Sluice without writing a tool.
//!
//! Takes in: a [`BuiltinConfig`] (the root directory of the fs tools, the kv store). Hands on: the
//! tools of cli.md — `sluice.sleep`, `sluice.echo`, `sluice.kv.{get,put,delete,incr}`,
//! `sluice.fs.{read,write}` — each with its own manifest and native handler.
//!
//! The kv store is in memory, one per [`KvStore`] value (the CLI makes one per process), and in
//! it each tenant has a memory of its own: a call reads and writes only its tenant's keys, so
//! tenants never see each other's values and never conflict on them. Every kv tool takes an
//! optional `delay_ms` to simulate latency; `incr` waits *between* its read and its write, so two
//! incrs of one key run unordered would lose an update — which Sluice's ordering prevents.
//!
//! The fs tools are confined to their root, and their resource is the file the OS will touch:
//! the path (relative to the root, or absolute) is resolved once, symbolic links followed as far
//! as they exist, and that one path is what the policy judges, the graph orders, provenance
//! records and the handler opens — beneath a directory handle on the root that no `..` or link
//! can leave (see the `fs` module's docs). A path whose file is outside the root is an error. With
//! one root ([`BuiltinConfig::new`]) every tenant reaches the same files: the fs tools are then
//! [`crate::transport::TenantScope::Shared`], and two tenants' conflicting calls of one file are
//! ordered against each other. With a root per tenant ([`BuiltinConfig::per_tenant`]) each tenant
//! has `DIR/<tenant>` (made on its first write), reaches nothing outside it, and the fs tools are
//! [`crate::transport::TenantScope::PerTenant`].
//!
//! ```
//! use sluice_kernel::builtin::{self, BuiltinConfig, KvStore};
//! use sluice_kernel::{Batch, Call, Kernel};
//! use serde_json::json;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let kv = KvStore::new();
//! let kernel = Kernel::builder()
//!     .tools(builtin::registry(BuiltinConfig::default().with_kv(kv.clone())).unwrap())
//!     .build()
//!     .unwrap();
//! let put = Call::new("p", "sluice.kv.put", json!({"key": "secret", "value": "acme-only"}));
//! kernel.run(Batch::new("acme", vec![put]).unwrap()).await.unwrap();
//! let get = Call::new("g", "sluice.kv.get", json!({"key": "secret"}));
//! let zeta = kernel.run(Batch::new("zeta", vec![get]).unwrap()).await.unwrap();
//! assert_eq!(zeta.results[0].output, Some(json!({"key": "secret", "value": null})));
//! assert_eq!(kv.tenant("acme").get("secret"), Some(json!("acme-only")));
//! # });
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use serde_json::{json, Value};

use crate::error::{ErrorCode, Result};
use crate::model::ManifestSource;
use crate::transport::{handler, Tool, ToolContext, ToolError, ToolRegistry};

mod fs;
mod manifest;

pub use fs::{is_directory_name, lexical_absolute, resolve_links, tenant_root};
use manifest::manifest;

/// The in-memory key-value store of the kv tools: a memory per tenant.
#[derive(Debug, Default, Clone)]
pub struct KvStore {
    tenants: Arc<DashMap<String, TenantKv>>,
}

impl KvStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// `tenant`'s memory (empty until something is put in it).
    pub fn tenant(&self, tenant: &str) -> TenantKv {
        if let Some(m) = self.tenants.get(tenant) {
            return m.clone();
        }
        self.tenants.entry(tenant.to_owned()).or_default().clone()
    }

    /// The tenants that have a memory, sorted.
    pub fn tenants(&self) -> Vec<String> {
        let mut v: Vec<String> = self.tenants.iter().map(|e| e.key().clone()).collect();
        v.sort();
        v
    }
}

/// One tenant's memory in a [`KvStore`]. Cheap to clone; clones share the memory.
#[derive(Debug, Default, Clone)]
pub struct TenantKv {
    map: Arc<DashMap<String, Value>>,
}

impl TenantKv {
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
    /// The directory the fs tools are confined to (with `root_per_tenant`, the directory that
    /// holds each tenant's). Default: the current directory.
    pub root: PathBuf,
    /// Whether each tenant has a root of its own, `root/<tenant>`. Default: `false` (one root
    /// that every tenant reaches).
    pub root_per_tenant: bool,
    /// The kv tools' store. Default: a new empty store.
    pub kv: KvStore,
}

impl BuiltinConfig {
    /// The built-in tools confined to `root`, one root for every tenant, with a new empty kv
    /// store.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        BuiltinConfig {
            root: root.into(),
            root_per_tenant: false,
            kv: KvStore::new(),
        }
    }

    /// The built-in tools with a root per tenant: tenant `t`'s fs calls are confined to
    /// `dir/t` (see [`tenant_root`]); a new empty kv store.
    pub fn per_tenant(dir: impl Into<PathBuf>) -> Self {
        BuiltinConfig {
            root_per_tenant: true,
            ..Self::new(dir)
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
            root_per_tenant: false,
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
    op: fn(&TenantKv, &str, &Value) -> Value,
) -> Result<Tool> {
    let store = kv.clone();
    Tool::new(
        manifest(manifest_json)?,
        ManifestSource::built_in(),
        Some(handler(move |ctx: ToolContext, input: Value| {
            let store = store.tenant(ctx.tenant());
            async move {
                delay(&ctx, &input).await?;
                Ok(op(&store, &key(&input), &input))
            }
        })),
    )
}

/// The built-in tools, compiled.
pub fn tools(config: BuiltinConfig) -> Result<Vec<Tool>> {
    let roots = Arc::new(fs::Roots::new(&config.root, config.root_per_tenant));
    let mut out = Vec::new();
    out.extend(plain_tools()?);
    out.extend(kv_tools(config.kv)?);
    out.extend(fs::tools(roots)?);
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

/// `sluice.kv.*`: the in-memory store, one resource `kv:{key}` per key, each tenant's own.
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
            let store = store.tenant(ctx.tenant());
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
                let value = add(&current, &by).ok_or_else(|| {
                    ToolError::new(
                        ErrorCode::Overflow,
                        format!(
                            "{current} + {by} under `{k}` is not a finite number: the value \
                             stays {current}"
                        ),
                    )
                })?;
                store.put(&k, value.clone());
                Ok(json!({"key": k, "value": value}))
            }
        })),
    )?);

    Ok(out)
}

/// Adds two JSON numbers: as integers when both are and the sum fits in 64 bits, else as
/// floats; `None` when the sum is not finite (an overflow past `f64::MAX`).
fn add(a: &Value, b: &Value) -> Option<Value> {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        if let Some(s) = x.checked_add(y) {
            return Some(json!(s));
        }
    }
    let s = a.as_f64().unwrap_or(0.0) + b.as_f64().unwrap_or(0.0);
    serde_json::Number::from_f64(s).map(Value::Number)
}
