//! The tokio runtime the kernel runs on, one per process, and the asyncio bridge over it.
//!
//! `fork()` copies a process with only the thread that called it: a runtime made before the fork
//! has no worker threads in the child, and a future spawned on it would never run (a hang). So
//! the runtime is the current process's: [`ensure`] makes a new one the first time it is asked
//! in a process (the parent's is left alone in the child, never dropped: dropping it would wait
//! for threads that are not there).

use std::sync::Arc;

use arc_swap::ArcSwapOption;
use tokio::runtime::Runtime as Tokio;

/// A runtime and the process it was made in. The runtime is leaked: it lives as long as the
/// process that made it, and in a forked child it is never dropped (dropping it would wait for
/// worker threads that did not follow the fork).
struct Owned {
    pid: u32,
    runtime: &'static Tokio,
}

/// The current process's runtime. Lock-free (`arc-swap`), so that a child of a fork never waits
/// on a lock that a thread of its parent held when it forked.
static CURRENT: ArcSwapOption<Owned> = ArcSwapOption::const_empty();

/// This process's runtime, made now if the process has none yet; why not when the operating
/// system gives it no threads (`sluice.Kernel()` raises it).
pub(crate) fn ensure() -> std::io::Result<&'static Tokio> {
    let pid = std::process::id();
    if let Some(owned) = CURRENT.load().as_ref() {
        if owned.pid == pid {
            return Ok(owned.runtime);
        }
    }
    let made: &'static Tokio = Box::leak(Box::new(build()?));
    let mut chosen = made;
    CURRENT.rcu(|current| match current {
        // Another thread of this process published one first: that one is used (ours stays
        // unused, leaked like any runtime).
        Some(owned) if owned.pid == pid => {
            chosen = owned.runtime;
            Some(owned.clone())
        }
        _ => {
            chosen = made;
            Some(Arc::new(Owned { pid, runtime: made }))
        }
    });
    Ok(chosen)
}

/// This process's runtime. Every way into it passes [`ensure`] in this process first (a
/// `Kernel` is made by it, and refuses to run in another process), so it exists.
#[allow(
    clippy::panic,
    reason = "unreachable: a kernel is made through ensure(), and runs only in its own process"
)]
pub(crate) fn runtime() -> &'static Tokio {
    match ensure() {
        Ok(rt) => rt,
        Err(e) => panic!("sluice has no tokio runtime in this process: {e}"),
    }
}

fn build() -> std::io::Result<Tokio> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("sluice-kernel")
        .build()
}
