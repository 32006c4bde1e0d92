//! `sluice serve` as a process for the tests: started on a free loopback port, killed when
//! dropped.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// A running gateway; killed when dropped.
pub struct Gateway {
    pub child: Child,
    pub base: String,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `sluice serve --listen 127.0.0.1:0 <args>` and reads the address it prints first.
pub fn start(args: &[&str]) -> Gateway {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.args(["serve", "--listen", "127.0.0.1:0"]).args(args);
    let (child, base) = listening(&mut cmd);
    Gateway { child, base }
}

/// Starts a server whose first line on standard output is `listening on http://…` (Sluice's
/// gateway, the tests' scripted model) and reads it: the child and that base URL.
pub fn listening(cmd: &mut Command) -> (Child, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the server starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("the first line names the address: {line:?}"))
        .to_owned();
    (child, base)
}

/// Sends SIGTERM to the gateway.
pub fn terminate(g: &Gateway) {
    let pid = g.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
}
