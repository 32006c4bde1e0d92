//! Sluice against the official model-API SDKs: `openai`, `anthropic` and `google-genai` (Python),
//! pinned in tests/sdk/requirements.txt and installed on first use into
//! `target/model-sdks/py` with the machine's pip (`.ci/run` installs them there first). The
//! checks are in tests/sdk/model_sdks.py: every tool definition Sluice prints validates as the
//! SDK's tool type; responses built with the SDK's own model classes and serialized by the SDK
//! run as batches; every reply validates as the SDK's message parameter types. A machine without
//! Python, pip or PyPI fails this test, saying so: it is never skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The SDKs' folder, installed when its requirements stamp differs from tests/sdk's.
fn sdks() -> PathBuf {
    let dir = root().join("target/model-sdks");
    let py = dir.join("py");
    let wanted = root().join("tests/sdk/requirements.txt");
    let stamp = dir.join("requirements.txt");
    std::fs::create_dir_all(&dir).expect("target/model-sdks can be created");
    let lock = std::fs::File::create(dir.join(".install-lock")).expect("the lock file opens");
    lock.lock().expect("the install lock is taken");
    let current = std::fs::read(&stamp).ok();
    if current != std::fs::read(&wanted).ok() {
        let _ = std::fs::remove_dir_all(&py);
        let out = Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--target",
            ])
            .arg(&py)
            .arg("-r")
            .arg(&wanted)
            .output()
            .unwrap_or_else(|e| {
                panic!("the SDK tests need python3 with pip, which cannot run: {e}")
            });
        assert!(
            out.status.success(),
            "pip could not install the model SDKs ({}) into {}:\n{}",
            out.status,
            py.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::copy(&wanted, &stamp).expect("the stamp is written");
    }
    py
}

fn check(script: &Path, py: &Path) {
    let out = Command::new("python3")
        .arg(script)
        .env("PYTHONPATH", py)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("SLUICE_BIN", env!("CARGO_BIN_EXE_sluice"))
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    print!("{stdout}");
    assert!(
        out.status.success(),
        "{} failed:\n{stdout}\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
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

#[test]
fn the_official_sdks_accept_what_sluice_prints_and_sluice_runs_what_they_build() {
    let py = sdks();
    check(&root().join("tests/sdk/model_sdks.py"), &py);
}
