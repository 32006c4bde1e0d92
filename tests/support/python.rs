//! Python packages for the tests that hold Sluice to official SDKs: installed with the machine's
//! pip into `target/<name>/py` from a pinned requirements file under tests/sdk/, reinstalled when
//! the file changes (a stamp copy sits beside the folder). `.ci/run` installs them first. A
//! machine without Python, pip or PyPI fails the test that needs them, saying so.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The folder holding the packages of `tests/sdk/<requirements>`, installed into
/// `target/<name>/py` first when needed. Test binaries run in parallel: a file lock makes one
/// install and the others wait.
pub fn packages(name: &str, requirements: &str) -> PathBuf {
    let dir = root().join("target").join(name);
    let py = dir.join("py");
    let wanted = root().join("tests/sdk").join(requirements);
    let stamp = dir.join(requirements);
    std::fs::create_dir_all(&dir).expect("the install folder can be created");
    let lock = std::fs::File::create(dir.join(".install-lock")).expect("the lock file opens");
    lock.lock().expect("the install lock is taken");
    if std::fs::read(&stamp).ok() != std::fs::read(&wanted).ok() {
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
            .unwrap_or_else(|e| panic!("these tests need python3 with pip, which cannot run: {e}"));
        assert!(
            out.status.success(),
            "pip could not install {} into {}:\n{}",
            wanted.display(),
            py.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::copy(&wanted, &stamp).expect("the stamp is written");
    }
    py
}

/// Runs `tests/sdk/<script>` with `py` on its path and `env` set; its standard output, after
/// asserting it exited 0.
pub fn run_script(script: &str, py: &Path, env: &[(&str, &str)]) -> String {
    let path = root().join("tests/sdk").join(script);
    let out = Command::new("python3")
        .arg(&path)
        .env("PYTHONPATH", py)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .envs(env.iter().copied())
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    print!("{stdout}");
    assert!(
        out.status.success(),
        "{} failed:\n{stdout}\n{}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
