//! Sluice against the official model-API SDKs: `openai`, `anthropic` and `google-genai` (Python),
//! pinned in tests/sdk/requirements.txt and installed on first use into
//! `target/model-sdks/py` with the machine's pip (`.ci/run` installs them there first). The
//! checks are in tests/sdk/model_sdks.py: every tool definition Sluice prints validates as the
//! SDK's tool type; responses built with the SDK's own model classes and serialized by the SDK
//! run as batches; every reply validates as the SDK's message parameter types. A machine without
//! Python, pip or PyPI fails this test, saying so: it is never skipped.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use support::python::{packages, run_script};

#[test]
fn the_official_sdks_accept_what_sluice_prints_and_sluice_runs_what_they_build() {
    let py = packages("model-sdks", "requirements.txt");
    let stdout = run_script(
        "model_sdks.py",
        &py,
        &[("SLUICE_BIN", env!("CARGO_BIN_EXE_sluice"))],
    );
    // Every group of checks ran (a script that stopped early cannot pass).
    for group in [
        "openai:",
        "openai-responses:",
        "anthropic:",
        "gemini:",
        "every format",
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("ok   {group}"))),
            "no `{group}` check ran:\n{stdout}"
        );
    }
    assert!(stdout.contains("checks passed"), "{stdout}");
}
