//! The MCP reference servers the effects catalog is written for, from their registries:
//! `@modelcontextprotocol/server-filesystem` and `server-memory` (npm) into
//! `target/mcp-reference`, `mcp-server-git` and `mcp-server-fetch` (PyPI) into
//! `target/mcp-reference-py/py`, and `server-everything` (npm, [`super::mcp`]). Installed on
//! first use (`.ci/run` installs them first); a machine without npm, pip or the registries fails
//! the tests that need them, saying so: they are never skipped.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};

/// The pinned version of the npm reference servers.
pub const NPM_VERSION: &str = "2026.8.31";

fn npm_server(name: &str) -> PathBuf {
    let package = format!("@modelcontextprotocol/server-{name}@{NPM_VERSION}");
    let marker = format!("node_modules/@modelcontextprotocol/server-{name}/dist/index.js");
    super::mcp::npm_package("mcp-reference", &package, &marker).join(marker)
}

/// The stdio endpoint of the filesystem server confined to `roots`.
pub fn filesystem(roots: &[&Path]) -> String {
    let mut e = format!("mcp+stdio://node {}", npm_server("filesystem").display());
    for r in roots {
        e.push(' ');
        e.push_str(&r.display().to_string());
    }
    e
}

/// The stdio endpoint of the memory server keeping its graph in `file`.
pub fn memory(file: &Path) -> String {
    format!(
        "mcp+stdio://env MEMORY_FILE_PATH={} node {}",
        file.display(),
        npm_server("memory").display()
    )
}

/// The folder of the Python reference servers.
fn python_servers() -> PathBuf {
    super::python::packages("mcp-reference-py", "mcp-reference-requirements.txt")
}

/// The stdio endpoint of a Python reference server (`mcp_server_git`, `mcp_server_fetch`).
pub fn python(module: &str) -> String {
    format!(
        "mcp+stdio://env PYTHONPATH={} PYTHONDONTWRITEBYTECODE=1 python3 -m {module}",
        python_servers().display()
    )
}

/// The stdio endpoint of the everything server.
pub fn everything() -> String {
    super::mcp::everything_stdio("")
}

/// The command line of a stdio endpoint these helpers make (their arguments hold no spaces), to
/// start the server straight, without Sluice.
pub fn command(endpoint: &str) -> tokio::process::Command {
    let mut argv = endpoint.trim_start_matches("mcp+stdio://").split(' ');
    let mut cmd = tokio::process::Command::new(argv.next().expect("a program"));
    cmd.args(argv);
    cmd
}

/// A registry of imported manifests (each from `import_manifests`), in their order.
pub fn registry_of(manifests: &[serde_json::Value]) -> sluice_kernel::transport::ToolRegistry {
    let mut r = sluice_kernel::transport::ToolRegistry::new();
    for (i, m) in manifests.iter().enumerate() {
        r.insert_raw(sluice_kernel::model::RawManifest {
            source: sluice_kernel::model::ManifestSource {
                path: "imported".into(),
                pointer: format!("/{i}"),
            },
            value: m.clone(),
        })
        .expect("an imported manifest registers");
    }
    r
}
