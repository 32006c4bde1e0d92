//! The Python package (`bindings/python`, docs/python.md): built with maturin into a wheel,
//! installed into `target/python/pkg`, its pytest suite run (every guarantee from the handlers'
//! own clocks), and its Python held to ruff (`ruff check`, `ruff format --check`).
//!
//! What the build and the tests need (maturin, pytest, pytest-asyncio, ruff) pip installs into
//! `target/python-tools/py` from `tests/sdk/python-requirements.txt` (`.ci/run` does it first).
//! A machine without Python 3 or pip fails this test, saying so: it is never skipped. The
//! extension is built in a target directory of its own (`target/python/build`): the `cargo test`
//! that runs this test holds the workspace's.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::python::packages;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `python3 -m <args>`, or the tool `args[0]` that pip put in the tools' `bin/` (maturin
/// and ruff are programs), with the tools on Python's path; its output, after asserting it
/// passed.
fn python(tools: &Path, extra_path: Option<&Path>, cwd: &Path, args: &[&str]) -> String {
    let mut path = tools.to_path_buf().into_os_string();
    if let Some(p) = extra_path {
        path = std::env::join_paths([p, tools]).unwrap();
    }
    let bin = tools.join("bin");
    let search = std::env::join_paths(
        std::iter::once(bin).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let program = tools.join("bin").join(args[0]);
    let mut command = match program.exists() {
        true => Command::new(program),
        false => {
            let mut c = Command::new("python3");
            c.args(["-m", args[0]]);
            c
        }
    };
    let out = command
        .args(&args[1..])
        .current_dir(cwd)
        .env("PYTHONPATH", path)
        .env("PATH", search)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("CARGO_TARGET_DIR", root().join("target/python/build"))
        .output()
        .unwrap_or_else(|e| {
            panic!("the Python package's tests need python3, which cannot run: {e}")
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "python3 -m {}:\n{text}",
        args.join(" ")
    );
    text
}

#[test]
fn the_python_package_builds_and_passes_its_tests() {
    let tools = packages("python-tools", "python-requirements.txt");
    let package = root().join("bindings/python");
    let out = root().join("target/python");
    let wheels = out.join("wheels");
    let _ = std::fs::remove_dir_all(&wheels);
    // The dev profile: the tests check behaviour, the benchmark builds its own release wheel.
    python(
        &tools,
        None,
        &package,
        &[
            "maturin",
            "build",
            "--profile",
            "dev",
            "--out",
            wheels.to_str().unwrap(),
        ],
    );
    let wheel = std::fs::read_dir(&wheels)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .expect("maturin built a wheel");
    let pkg = out.join("pkg");
    let _ = std::fs::remove_dir_all(&pkg);
    python(
        &tools,
        None,
        &package,
        &[
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            pkg.to_str().unwrap(),
            wheel.to_str().unwrap(),
        ],
    );
    let report = python(
        &tools,
        Some(&pkg),
        &package,
        &["pytest", "-q", "-p", "no:cacheprovider", "tests"],
    );
    print!("{report}");
    assert!(report.contains(" passed"), "{report}");
    assert!(!report.contains("skipped"), "no test is skipped: {report}");
    python(&tools, None, &package, &["ruff", "check", "."]);
    python(&tools, None, &package, &["ruff", "format", "--check", "."]);
}
