//! The reference SDK's manifests (75, from the public Kindgi SDK: its tests, fixtures, templates
//! and docs), read in place from `../shared/compat/kindgi-sdk/` (or `$SLUICE_COMPAT_DIR`), and
//! Sluice held to the SDK's verdict on each. The corpus is not ours and is never copied into the
//! tree; a checkout without it fails here, saying where it looked.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::path::PathBuf;

use serde_json::Value;
use sluice_kernel::model::{read_manifests, validate, ValidateOptions};
use support::{read_json, sluice};

/// Where the corpus is.
fn corpus() -> PathBuf {
    let dir = std::env::var_os("SLUICE_COMPAT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/compat/kindgi-sdk")
        });
    assert!(
        dir.join("index.json").is_file(),
        "the reference SDK corpus is not at {} (set SLUICE_COMPAT_DIR to the kindgi-sdk folder \
         of ../shared/compat)",
        dir.display()
    );
    dir
}

/// Deliberate differences from the SDK's verdict: (file, why). Each is in
/// docs/compatibility.md too. There are none today: keep the list, and the reason, if one comes.
const DIFFERENCES: &[(&str, &str)] = &[];

/// The JSON pointer an SDK expectation names (`/needsSpec/env/X/default`, `spec.urlTemplate`,
/// `invalid-schema (input)`), if it names one.
fn expected_pointer(expect: &str) -> Option<String> {
    if let Some(p) = expect.split_whitespace().find(|w| w.starts_with('/')) {
        return Some(p.to_owned());
    }
    if expect.contains("spec.urlTemplate") {
        return Some("/spec/urlTemplate".into());
    }
    for part in ["input", "output"] {
        if expect.contains(&format!("({part})")) {
            return Some(format!("/{part}"));
        }
    }
    None
}

#[test]
fn every_sdk_manifest_gets_the_sdks_verdict() {
    let dir = corpus();
    let index = read_json(&dir.join("index.json"));
    let entries = index.as_array().expect("index.json is an array");
    assert_eq!(entries.len(), 75, "the corpus holds 75 manifests");
    let (mut valid, mut invalid) = (0, 0);
    for e in entries {
        let file = e["file"].as_str().unwrap();
        let upstream_valid = match e["upstream"].as_str() {
            Some("valid") => true,
            Some("invalid") => false,
            other => panic!("{file}: unknown upstream verdict {other:?}"),
        };
        if DIFFERENCES.iter().any(|(f, _)| *f == file) {
            continue;
        }
        let raws = read_manifests(&dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(raws.len(), 1, "{file}: one manifest per file");
        let report = validate(&raws[0].value, ValidateOptions::default());
        assert_eq!(
            report.is_valid(),
            upstream_valid,
            "{file} ({}): the SDK says {}, Sluice says {:?}",
            e["source"],
            e["upstream"],
            report.errors
        );
        if upstream_valid {
            valid += 1;
            continue;
        }
        invalid += 1;
        // Refused for the reason the SDK gives, where it names where.
        if let Some(pointer) = expected_pointer(e["expect"].as_str().unwrap_or("")) {
            assert!(
                report
                    .errors
                    .iter()
                    .any(|d| d.pointer.starts_with(&pointer)),
                "{file}: the SDK refuses it at {pointer}; Sluice's errors: {:?}",
                report.errors
            );
        }
        assert!(report.errors.iter().all(|d| !d.message.is_empty()));
    }
    assert_eq!((valid, invalid), (51, 24));
}

#[test]
fn the_valid_folder_validates_and_registers_in_one_run() {
    let valid = corpus().join("valid");
    let v = valid.to_str().unwrap();
    let run = sluice(&["validate", "--format", "json", v], None, None);
    assert_eq!(run.code, 0, "{}", run.stdout);
    let manifests = run.json()["manifests"].as_array().unwrap().clone();
    assert_eq!(manifests.len(), 51);
    assert!(manifests.iter().all(|m| m["valid"] == true));

    // Every (id, version) once: the files that repeat a pair are other tests' variants of it,
    // valid alone but not in one registry (`tools` refuses them, naming both places).
    let mut seen = std::collections::HashSet::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&valid)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut args: Vec<String> = vec!["tools".into(), "--all-versions".into()];
    for f in &files {
        let m = read_json(f);
        let pair = (m["id"].to_string(), m["version"].to_string());
        if seen.insert(pair) {
            args.extend(["--tools".into(), f.to_str().unwrap().to_owned()]);
        }
    }
    let dup = sluice(&["tools", "--tools", v], None, None);
    assert_eq!(dup.code, 1, "a registry refuses one (id, version) twice");
    assert!(dup.stderr.contains("defined twice"), "{}", dup.stderr);

    let mut json_args = args.clone();
    json_args.extend(["--format".into(), "json".into()]);
    let refs: Vec<&str> = json_args.iter().map(String::as_str).collect();
    let run = sluice(&refs, None, None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let listed: Vec<Value> = run.json().as_array().unwrap().clone();
    let versions_of = |id: &str| {
        let mut v: Vec<String> = listed
            .iter()
            .filter(|m| m["id"] == id)
            .map(|m| m["version"].as_str().unwrap().to_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(versions_of("acme.lookup"), ["1.0.0", "1.0.4"]);
    assert_eq!(versions_of("acme.verify-citation"), ["0.1.0", "1.0.0"]);

    // A call names the highest version, or exactly one.
    let batch = r#"{"tenant": "t", "calls": [
        {"id": "hi", "tool": "acme.lookup", "input": {"q": "x"}},
        {"id": "old", "tool": "acme.lookup@1.0.0", "input": {"id": "7", "q": "x"}}]}"#;
    let mut plan_args: Vec<&str> = vec!["plan", "--batch", "-"];
    plan_args.extend(refs.iter().skip(2).take_while(|a| **a != "--format"));
    let run = sluice(&plan_args, Some(batch), None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let plan = run.json();
    assert_eq!(plan["calls"][0]["tool"], "acme.lookup");
    assert_eq!(plan["calls"][0]["version"], "1.0.4");
    assert_eq!(plan["calls"][1]["tool"], "acme.lookup");
    assert_eq!(plan["calls"][1]["version"], "1.0.0");

    // Each API's export of the whole corpus keeps names unique and within the APIs' limits.
    for format in ["openai", "openai-responses", "anthropic", "gemini", "mcp"] {
        let mut a = refs[..refs.len() - 1].to_vec();
        a.push(format);
        let run = sluice(&a, None, None);
        assert_eq!(run.code, 0, "{format}: {}", run.stderr);
        let defs = run.json();
        let names: Vec<String> = match format {
            "openai" => defs
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["function"]["name"].as_str().unwrap().to_owned())
                .collect(),
            "gemini" => defs[0]["functionDeclarations"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["name"].as_str().unwrap().to_owned())
                .collect(),
            _ => defs
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["name"].as_str().unwrap().to_owned())
                .collect(),
        };
        assert_eq!(names.len(), listed.len(), "{format}");
        let unique: std::collections::HashSet<&String> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{format}: names collide");
        for n in &names {
            assert!(n.len() <= 64 || format == "mcp", "{format}: {n}");
            assert!(
                n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')),
                "{format}: {n}"
            );
        }
    }
}
