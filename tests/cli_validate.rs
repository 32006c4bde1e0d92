//! `sluice validate` against cli.md: JSON shape, text output, exit codes 0/1/2.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use support::{fixture, sluice, temp_dir};

#[test]
fn valid_corpus_exits_0_with_cli_json() {
    let dir = fixture("manifests/valid");
    let run = sluice(
        &["validate", "--format", "json", dir.to_str().unwrap()],
        None,
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v = run.json();
    let manifests = v["manifests"].as_array().unwrap();
    let expected = sluice_kernel::model::read_manifests(&dir).unwrap().len();
    assert!(expected >= 30);
    assert_eq!(manifests.len(), expected);
    for m in manifests {
        assert_eq!(m["valid"], true);
        assert!(m["path"].as_str().unwrap().ends_with(".json"));
        assert!(m["id"].as_str().unwrap().starts_with("fixture."));
        assert_eq!(m["errors"].as_array().unwrap().len(), 0);
        assert!(m["warnings"].is_array());
    }
    // Elements of an array file carry their index in the pointer.
    let lint = manifests
        .iter()
        .find(|m| m["id"] == "fixture.lint-undeclared-placeholder")
        .unwrap();
    assert_eq!(lint["warnings"][0]["pointer"], "/effects/0/resource");
}

#[test]
fn an_invalid_manifest_exits_1_naming_the_pointer() {
    let f = fixture("manifests/invalid/url-placeholder-host.json");
    let run = sluice(
        &["validate", "--format", "json", f.to_str().unwrap()],
        None,
        None,
    );
    assert_eq!(run.code, 1);
    let m = &run.json()["manifests"][0];
    assert_eq!(m["valid"], false);
    assert_eq!(m["errors"][0]["pointer"], "/spec/urlTemplate");
    assert!(m["errors"][0]["message"].as_str().unwrap().contains("host"));

    let text = sluice(&["validate", f.to_str().unwrap()], None, None);
    assert_eq!(text.code, 1);
    assert!(text.stdout.contains("INVALID"));
    assert!(text.stdout.contains("/spec/urlTemplate"));
}

#[test]
fn production_turns_filesystem_artifacts_into_errors() {
    let f = fixture("manifests/valid/lint-filesystem-artifact.json");
    let f = f.to_str().unwrap();
    assert_eq!(sluice(&["validate", f], None, None).code, 0);
    let run = sluice(
        &["validate", "--production", "--format", "json", f],
        None,
        None,
    );
    assert_eq!(run.code, 1);
    assert_eq!(
        run.json()["manifests"][0]["errors"][0]["pointer"],
        "/codeArtifactRef"
    );
}

#[test]
fn array_elements_and_duplicates_are_named() {
    let dir = temp_dir("validate-dup");
    let m = |id: &str| {
        serde_json::json!({"id": id, "description": "d", "version": "1.0.0",
                           "input": {"type": "object"}, "output": {}, "mutating": false})
    };
    std::fs::write(
        dir.join("a.json"),
        serde_json::to_string(&vec![m("x.one"), serde_json::json!({"id": "x.bad"})]).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.join("b.json"), m("x.one").to_string()).unwrap();
    let run = sluice(
        &["validate", "--format", "json", dir.to_str().unwrap()],
        None,
        None,
    );
    assert_eq!(run.code, 1);
    let v = run.json();
    let ms = v["manifests"].as_array().unwrap();
    assert_eq!(ms.len(), 3);
    assert_eq!(ms[0]["valid"], true);
    assert_eq!(ms[1]["valid"], false);
    assert_eq!(ms[1]["errors"][0]["pointer"], "/1");
    // The same (id, version) twice: each manifest is valid alone (a warning names the other
    // place), and a registry refuses to hold both.
    assert_eq!(ms[2]["valid"], true);
    let dup = ms[2]["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["pointer"] == "/id")
        .expect("a warning at /id");
    let msg = dup["message"].as_str().unwrap();
    assert!(msg.contains("a.json#/0"), "{msg}");
    let tools = sluice(
        &[
            "tools",
            "--tools",
            dir.join("b.json").to_str().unwrap(),
            "--tools",
            dir.join("b.json").to_str().unwrap(),
        ],
        None,
        None,
    );
    assert_eq!(tools.code, 1);
    assert!(tools.stderr.contains("defined twice"), "{}", tools.stderr);
}

#[test]
fn a_file_that_is_not_json_is_invalid_input() {
    let dir = temp_dir("validate-notjson");
    let f = dir.join("broken.json");
    std::fs::write(&f, "{\"id\": ").unwrap();
    let run = sluice(
        &["validate", "--format", "json", f.to_str().unwrap()],
        None,
        None,
    );
    assert_eq!(run.code, 1);
    let msg = run.json()["manifests"][0]["errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(msg.contains("line 1"), "{msg}");
}

#[test]
fn an_unreadable_path_or_bad_usage_exits_2() {
    let run = sluice(&["validate", "/no/such/file.json"], None, None);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("/no/such/file.json"));
    assert_eq!(sluice(&["validate"], None, None).code, 2);
    assert_eq!(
        sluice(&["validate", "--format", "yaml", "x"], None, None).code,
        2
    );
    assert!(!sluice(&["validate", "/no/such"], None, None)
        .stderr
        .contains("panicked"));
}

#[test]
fn help_explains_each_command() {
    let run = sluice(&["--help"], None, None);
    assert_eq!(run.code, 0);
    for cmd in ["validate", "plan"] {
        assert!(run.stdout.contains(cmd), "{}", run.stdout);
    }
}

/// Issue 22, finding 6: an integer the schema takes (no maximum) but Sluice cannot hold is an
/// error at its own pointer with the allowed range, never a confusing message at the root.
#[test]
fn integers_beyond_the_models_range_are_named_with_the_range() {
    let dir = support::temp_dir("validate-range");
    for (field, value) in [
        ("memMB", "1e20"),
        ("cpuMs", "1e30"),
        ("memMB", "18446744073709551616"),
    ] {
        let file = dir.join("m.json");
        let limits = if field == "memMB" {
            format!(r#"{{"memMB": {value}, "cpuMs": 1}}"#)
        } else {
            format!(r#"{{"memMB": 1, "cpuMs": {value}}}"#)
        };
        std::fs::write(
            &file,
            format!(
                r#"{{"id": "m", "description": "d", "version": "1.0.0", "input": {{}},
                   "output": {{}}, "limits": {limits}}}"#
            ),
        )
        .unwrap();
        let run = sluice(
            &["validate", "--format", "json", file.to_str().unwrap()],
            None,
            None,
        );
        assert_eq!(run.code, 1, "{value}");
        let e = &run.json()["manifests"][0]["errors"][0];
        assert_eq!(e["pointer"], format!("/limits/{field}"), "{value}");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("18446744073709551615"),
            "{e}"
        );
    }
}

#[test]
fn a_built_in_id_in_any_version_cannot_be_loaded() {
    let dir = temp_dir("validate-builtin-id");
    let f = dir.join("shadow.json");
    std::fs::write(
        &f,
        serde_json::json!({"id": "sluice.kv.get", "version": "9.0.0", "description": "shadow",
                           "input": {"type": "object"}, "output": {}})
        .to_string(),
    )
    .unwrap();
    let p = f.to_str().unwrap();
    let v = sluice(&["validate", "--format", "json", p], None, None);
    assert_eq!(v.code, 0, "valid alone");
    assert!(v.stdout.contains("a built-in tool's"), "{}", v.stdout);
    let run = sluice(
        &["run", "--tools", p, "--batch", "-"],
        Some(r#"{"calls": [{"id": "a", "tool": "sluice.kv.get", "input": {"key": "k"}}]}"#),
        None,
    );
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(run.stderr.contains("a built-in tool's"), "{}", run.stderr);
}
