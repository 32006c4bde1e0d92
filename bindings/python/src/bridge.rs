//! Entering Python from the kernel's threads, safely up to the interpreter's exit.
//!
//! A tokio thread that wakes an asyncio loop (`call_soon_threadsafe`) releases the GIL inside
//! the loop's socket write and takes it again after. If the main thread meanwhile finishes and
//! the interpreter starts finalizing, CPython ends a thread that asks for the GIL from under it
//! (`PyThread_exit_thread`), which aborts the process when that thread is a Rust one. Measured
//! here: a benchmark whose last run completed from a tokio thread exited 134 or 139 in three
//! runs of three, with pyo3-async-runtimes' `future_into_py` completing the awaited future.
//!
//! So every entry goes through [`with_python`], counted; [`at_exit`] (an `atexit` hook the
//! Python layer registers at import, run before finalization) refuses new entries and, with
//! the GIL released, waits for those under way to leave.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

static INSIDE: AtomicUsize = AtomicUsize::new(0);
static EXITING: AtomicBool = AtomicBool::new(false);

/// Runs `f` with the GIL from any thread; `None` once the interpreter is exiting.
pub(crate) fn with_python<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> Option<R> {
    // Counted before the check: `at_exit` either sees this entry and waits, or this entry sees
    // the exit and stays out.
    INSIDE.fetch_add(1, Ordering::SeqCst);
    let out = match EXITING.load(Ordering::SeqCst) {
        true => None,
        false => Some(Python::attach(f)),
    };
    INSIDE.fetch_sub(1, Ordering::SeqCst);
    out
}

/// The interpreter is about to finalize: no thread of the kernel enters Python from now on,
/// and those inside leave first (waited for with the GIL released, at most 5 s).
#[pyfunction]
pub(crate) fn at_exit(py: Python<'_>) {
    EXITING.store(true, Ordering::SeqCst);
    py.detach(|| {
        let until = Instant::now() + Duration::from_secs(5);
        while INSIDE.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}
