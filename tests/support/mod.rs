//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

pub mod gateway;
pub mod http_server;
pub mod mcp;
pub mod otlp;
pub mod pack;
pub mod postgres;
pub mod python;
pub mod reference;
pub mod scale;

/// The kernel's test helpers (tools, fixtures, temporary directories), shared.
#[path = "../../kernel/tests/support/mod.rs"]
mod kernel_side;
#[allow(unused_imports)]
pub use kernel_side::*;

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
