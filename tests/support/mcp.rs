//! The MCP reference server, `@modelcontextprotocol/server-everything` from the npm registry,
//! installed on first use into `target/mcp-everything` with the machine's npm (`.ci/run` installs
//! it there first). A machine without npm or without the registry fails these tests, saying so:
//! they are never skipped.
#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::sync::OnceLock;

/// The pinned version of the reference server.
pub const EVERYTHING_VERSION: &str = "2026.8.31";

/// Installs the npm `package` (pinned, `name@version`) into `target/<folder>` with the machine's
/// npm unless `target/<folder>/<marker>` exists; that folder. Test binaries run in parallel: a
/// file lock makes one of them install and the others wait. Without npm or the registry the test
/// fails, saying so.
pub fn npm_package(folder: &str, package: &str, marker: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join(folder);
    std::fs::create_dir_all(&dir).expect("the npm install folder can be created");
    let lock = std::fs::File::create(dir.join(".install-lock")).expect("the lock file opens");
    lock.lock().expect("the install lock is taken");
    if !dir.join(marker).exists() {
        let status = std::process::Command::new("npm")
            .args([
                "install",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
                "--prefix",
            ])
            .arg(&dir)
            .arg(package)
            .status()
            .unwrap_or_else(|e| {
                panic!("these tests need npm to install {package}, and npm cannot run: {e}")
            });
        assert!(
            status.success() && dir.join(marker).exists(),
            "`npm install {package}` into {} failed ({status}): these tests need it",
            dir.display()
        );
    }
    dir
}

/// The path of the `mcp-server-everything` binary, installing it first when it is missing.
pub fn everything_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let package = format!("@modelcontextprotocol/server-everything@{EVERYTHING_VERSION}");
        let marker = "node_modules/.bin/mcp-server-everything";
        npm_package("mcp-everything", &package, marker).join(marker)
    })
    .clone()
}

/// The stdio endpoint of the reference server, with extra arguments after the binary (a
/// different argument list is a different endpoint, so a different session).
pub fn everything_stdio(extra: &str) -> String {
    let bin = everything_bin();
    let mut e = format!("mcp+stdio://{}", bin.display());
    if !extra.is_empty() {
        e.push(' ');
        e.push_str(extra);
    }
    e
}

/// A manifest of a tool on an MCP endpoint (read-only, no effects unless `extra` says so).
pub fn mcp_manifest(id: &str, endpoint: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut m = serde_json::json!({"id": id, "description": "an MCP tool", "version": "1.0.0",
        "input": {"type": "object"}, "output": {}, "transport": "mcp",
        "mcpEndpoint": endpoint, "mutating": false});
    for (k, v) in extra.as_object().expect("extra is an object") {
        m[k] = v.clone();
    }
    m
}

/// A registered tool with no handler (the kernel resolves its transport).
pub fn unresolved_tool(manifest: serde_json::Value) -> sluice_kernel::transport::Tool {
    let manifest =
        sluice_kernel::model::Manifest::from_value(manifest).expect("test manifest parses");
    sluice_kernel::transport::Tool::new(
        manifest,
        sluice_kernel::model::ManifestSource::built_in(),
        None,
    )
    .expect("test tool compiles")
}

/// A kernel of tools whose transports it resolves itself.
pub fn kernel_of(manifests: Vec<serde_json::Value>) -> sluice_kernel::run::Kernel {
    let mut b = sluice_kernel::run::Kernel::builder();
    for m in manifests {
        b = b.tool(unresolved_tool(m));
    }
    b.build().expect("the kernel builds")
}

/// Runs a batch of one call for tenant `t`.
pub async fn run_one(
    k: &sluice_kernel::run::Kernel,
    id: &str,
    tool: &str,
    input: serde_json::Value,
) -> sluice_kernel::BatchResult {
    let batch = sluice_kernel::Batch::new("t", vec![sluice_kernel::Call::new(id, tool, input)])
        .expect("a one-call batch");
    k.run(batch).await.expect("the batch runs")
}
