//! Processes that share a PostgreSQL domain (tests/scale.rs, tests/scale_faults.rs): tools that
//! write through a loopback recorder, and `sluice run` as a child process.
#![allow(dead_code, unreachable_pub)]

use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};

/// A manifest for the CLI: `rec.hold` writes `rec:{key}` and holds the recorder 30 ms;
/// `rec.sweep` writes `rec:*`; `rec.wait` writes `rec:{key}` and holds it `ms`; `rec.read`
/// reads `rec:{key}`.
pub fn recorder_tools(dir: &std::path::Path, server: &super::http_server::Server) {
    let access = |id: &str, kind: &str, resource: &str, path: &str| {
        json!({"id": id, "description": "recorded", "version": "1.0.0",
            "input": {"type": "object"}, "output": {}, "mutating": kind != "reads",
            "effects": [{"kind": kind, "resource": resource},
                        {"kind": "network", "resource": "net:127.0.0.1"}],
            "network": {"kind": "allowlist", "hosts": ["127.0.0.1"]},
            "spec": {"kind": "http", "method": "GET", "urlTemplate": server.url(path)}})
    };
    let tool = |id: &str, resource: &str, path: &str| access(id, "writes", resource, path);
    let tools = json!([
        tool("rec.hold", "rec:{key}", "/hold/{key}"),
        tool("rec.sweep", "rec:*", "/hold/sweep"),
        tool("rec.wait", "rec:{key}", "/slow/{ms}"),
        access("rec.read", "reads", "rec:{key}", "/hold/{key}"),
    ]);
    std::fs::write(dir.join("rec.json"), tools.to_string()).unwrap();
}

pub fn sluice_run(dir: &std::path::Path, batch: &Value, extra: &[&str]) -> Child {
    sluice_run_env(dir, batch, extra, &[])
}

/// [`sluice_run`] with environment variables set (the fault-injection ones, say).
pub fn sluice_run_env(
    dir: &std::path::Path,
    batch: &Value,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Child {
    let path = dir.join(format!(
        "batch-{}.json",
        batch["calls"][0]["id"].as_str().unwrap()
    ));
    std::fs::write(&path, batch.to_string()).unwrap();
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--tools"])
        .arg(dir.join("rec.json"))
        .arg("--batch")
        .arg(&path)
        .args(extra)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}
