//! `limits.memMB` for stdio servers: the kernel watches the server's resident memory and kills
//! it past the cap.
//!
//! What is enforced: every [`McpOptions::memory_poll`](super::McpOptions::memory_poll) the kernel
//! sums `VmRSS` (from `/proc/<pid>/status`) over every process in the server's process group (the
//! server is started as the leader of its own group, so a launcher such as `npx` and the node
//! process it starts are both counted). Past the largest `memMB` declared by the tools on that
//! endpoint it kills the whole group (SIGKILL); the calls in flight fail with
//! `limits-exceeded` and the next call starts the server again.
//!
//! What is not: memory between two readings (a spike shorter than the poll interval passes),
//! processes that leave the group (`setsid`), servers over HTTP or SSE (not ours to watch), and
//! address space (no `RLIMIT_AS`: runtimes such as Node reserve far more address space than they
//! use and would not start). Linux only: elsewhere the cap is not enforced.

use std::sync::Arc;
use std::time::Duration;

use crate::error::ErrorCode;
use crate::transport::handler::ToolError;

use super::death::Death;

/// The signals the kernel sends a server's process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: the server may clean up.
    Terminate,
    /// SIGKILL: at once.
    Kill,
}

/// Sends `signal` to the process group led by `pgid`; an error (the group is gone) is ignored.
#[cfg(unix)]
pub fn signal_group(pgid: u32, signal: Signal) {
    use nix::sys::signal::{killpg, Signal as S};
    use nix::unistd::Pid;
    let Ok(raw) = i32::try_from(pgid) else {
        return;
    };
    let sig = match signal {
        Signal::Terminate => S::SIGTERM,
        Signal::Kill => S::SIGKILL,
    };
    let _ = killpg(Pid::from_raw(raw), sig);
}

/// The resident memory of every process in the group `pgid`, in KiB; `None` when `/proc` cannot
/// be read (not Linux) or no process of the group is left.
pub fn group_rss_kib(pgid: u32) -> Option<u64> {
    let mut total = 0u64;
    let mut members = 0usize;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        // Processes come and go while we read: a file that vanished is skipped.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if process_group(&stat) != Some(pgid) {
            continue;
        }
        members += 1;
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            total += vm_rss_kib(&status).unwrap_or(0);
        }
    }
    (members > 0).then_some(total)
}

/// The process group in a `/proc/<pid>/stat` line (`pid (comm) state ppid pgrp ...`; `comm` may
/// hold spaces and parentheses, so the fields are counted from the last `)`).
fn process_group(stat: &str) -> Option<u32> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(2)?.parse().ok()
}

/// `VmRSS:   1234 kB` in a `/proc/<pid>/status` text.
fn vm_rss_kib(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Watches the group of `pid` until the session dies; past `cap_mb` declares the session dead
/// with `limits-exceeded` and kills the group.
pub(crate) fn watch(endpoint: Arc<str>, pid: u32, cap_mb: u64, poll: Duration, death: Arc<Death>) {
    let cap_kib = cap_mb.saturating_mul(1024);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = death.wait() => return,
                _ = tick.tick() => {}
            }
            let Some(rss) = group_rss_kib(pid) else {
                return;
            };
            if rss > cap_kib {
                tracing::warn!(
                    target: "sluice::mcp",
                    endpoint = &*endpoint,
                    rss_kib = rss,
                    cap_mb,
                    "MCP server over its memory cap: killed"
                );
                death.declare(ToolError::new(
                    ErrorCode::LimitsExceeded,
                    format!(
                        "the MCP server `{endpoint}` used {} MiB of resident memory, past its \
                         cap of {cap_mb} MiB (limits.memMB): it was killed, and the next call \
                         starts it again",
                        rss / 1024
                    ),
                ));
                #[cfg(unix)]
                signal_group(pid, Signal::Kill);
                return;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_count_from_the_last_parenthesis() {
        assert_eq!(process_group("42 (node) S 1 42 42 0"), Some(42));
        assert_eq!(process_group("7 (a) b) (c) R 1 99 7 0"), Some(99));
        assert_eq!(process_group("garbage"), None);
    }

    #[test]
    fn vm_rss_is_read_in_kib() {
        let status = "Name:\tnode\nVmPeak:\t  900 kB\nVmRSS:\t   51234 kB\n";
        assert_eq!(vm_rss_kib(status), Some(51234));
        assert_eq!(vm_rss_kib("Name: x\n"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn our_own_group_has_resident_memory() {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let pgid = process_group(&stat).unwrap();
        assert!(group_rss_kib(pgid).unwrap() > 0);
    }
}
