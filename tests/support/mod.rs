//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

pub mod gateway;
pub mod http_server;
pub mod mcp;
pub mod otlp;
pub mod postgres;
pub mod python;
pub mod scale;

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

/// The path of a file under tests/fixtures.
pub fn fixture(rel: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// Reads a JSON file, panicking with its path on failure (tests only).
pub fn read_json(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The result of running the `sluice` binary.
#[derive(Debug)]
pub struct Run {
    /// Exit code.
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    /// Standard output parsed as JSON (panics with the output on failure; tests only).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

/// Runs `sluice` with `args`, feeding `stdin` (if any), in `dir` (if any).
pub fn sluice(args: &[&str], stdin: Option<&str>, dir: Option<&std::path::Path>) -> Run {
    use std::io::Write;
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(d) = dir {
        cmd.current_dir(d);
    }
    let mut child = cmd.spawn().expect("the sluice binary starts");
    {
        let mut input = child.stdin.take().expect("stdin is piped");
        if let Some(s) = stdin {
            // A program may exit without reading its input (a bad flag, an invalid policy):
            // a broken pipe here is its answer, not a test failure.
            if let Err(e) = input.write_all(s.as_bytes()) {
                assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "stdin: {e}");
            }
        }
    }
    let out = child.wait_with_output().expect("sluice finishes");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
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

/// Runs a command in a new session (no controlling terminal), feeding `stdin`; its stdout.
pub fn sluice_detached(cmd: std::process::Command, stdin: &str) -> String {
    use std::io::Write;
    // `setsid` starts the program in a new session, which has no controlling terminal.
    let program = cmd.get_program().to_owned();
    let args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
    let mut outer = std::process::Command::new("setsid");
    outer
        .arg(program)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = outer.spawn().expect("setsid runs");
    if let Err(e) = child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(stdin.as_bytes())
    {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "stdin: {e}");
    }
    let out = child.wait_with_output().expect("the command finishes");
    String::from_utf8_lossy(&out.stdout).into_owned()
}
