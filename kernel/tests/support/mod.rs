//! Helpers shared by the kernel's integration tests, and by the root package's (which includes
//! this file: tests/support/mod.rs).
#![allow(dead_code, unreachable_pub)]

/// The transitive closure of a DAG whose edges go from lower to higher positions:
/// `reach[i][j]` is true when a path leads from `i` to `j`.
pub fn reachability(n: usize, edges: impl IntoIterator<Item = (usize, usize)>) -> Vec<Vec<bool>> {
    let mut succ = vec![Vec::new(); n];
    for (a, b) in edges {
        succ[a].push(b);
    }
    let mut reach = vec![vec![false; n]; n];
    for i in (0..n).rev() {
        for &j in &succ[i] {
            reach[i][j] = true;
            let row = reach[j].clone();
            for (k, r) in row.into_iter().enumerate() {
                if r {
                    reach[i][k] = true;
                }
            }
        }
    }
    reach
}

/// The path of a file under the workspace's tests/fixtures (found from the crate that runs the
/// test: the root package or the kernel).
pub fn fixture(rel: &str) -> std::path::PathBuf {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .map(|d| d.join("tests/fixtures"))
        .find(|d| d.is_dir())
        .unwrap_or_else(|| here.join("tests/fixtures"))
        .join(rel)
}

/// Reads a JSON file, panicking with its path on failure (tests only).
pub fn read_json(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A fresh temporary directory under target/ (removed by the caller if it wishes).
pub fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&d).expect("the temporary directory is created");
    d
}

/// A tool for tests: a manifest built from `effects` and `mutating`, and a handler.
pub fn tool(
    id: &str,
    effects: serde_json::Value,
    mutating: bool,
    handler: std::sync::Arc<dyn sluice_kernel::transport::Handler>,
) -> sluice_kernel::transport::Tool {
    tool_with(
        serde_json::json!({"id": id, "effects": effects, "mutating": mutating}),
        handler,
    )
}

/// A tool writing `x:{key}` for kernel tests: it sleeps `input.ms` (on tokio's clock), panics
/// when `input.panic` is true and fails (`broken`) when `input.fail` is true.
pub fn writer(id: &str) -> sluice_kernel::transport::Tool {
    use serde_json::{json, Value};
    use sluice_kernel::transport::{handler, ToolContext, ToolError};
    tool(
        id,
        json!([{"kind": "writes", "resource": "x:{key}"}]),
        true,
        handler(|_ctx: ToolContext, input: Value| async move {
            if let Some(ms) = input["ms"].as_u64() {
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            }
            if input["panic"] == true {
                panic!("the handler panics on purpose");
            }
            if input["fail"] == true {
                return Err(ToolError::new("broken", "failed on purpose"));
            }
            Ok(json!({"ok": true}))
        }),
    )
}

/// A tool for tests from a partial manifest (id, description, version, input and output are
/// filled in when absent).
pub fn tool_with(
    partial: serde_json::Value,
    handler: std::sync::Arc<dyn sluice_kernel::transport::Handler>,
) -> sluice_kernel::transport::Tool {
    let mut m = serde_json::json!({"description": "test tool", "version": "1.0.0",
                                   "input": {"type": "object"}, "output": {}});
    for (k, v) in partial
        .as_object()
        .expect("a partial manifest is an object")
    {
        m[k] = v.clone();
    }
    let manifest = sluice_kernel::model::Manifest::from_value(m).expect("test manifest parses");
    sluice_kernel::transport::Tool::new(
        manifest,
        sluice_kernel::model::ManifestSource::built_in(),
        Some(handler),
    )
    .expect("test tool compiles")
}
