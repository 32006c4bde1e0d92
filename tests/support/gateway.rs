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
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("sluice serve starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("the first line names the address: {line:?}"))
        .to_owned();
    Gateway { child, base }
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
