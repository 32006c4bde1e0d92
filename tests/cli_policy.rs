//! The policy through the CLI: `plan --policy` explains, `run --policy` enforces, `policy check`
//! and `policy explain` answer, and bad policies fail cleanly.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use serde_json::{json, Value};
use support::{sluice, temp_dir};

fn policy(dir: &std::path::Path, doc: &Value) -> String {
    let p = dir.join(format!(
        "policy-{}.json",
        std::fs::read_dir(dir).unwrap().count()
    ));
    std::fs::write(&p, doc.to_string()).unwrap();
    p.to_string_lossy().into_owned()
}

fn acme() -> Value {
    json!({"tenants": {"acme": {
        "default": "deny",
        "rules": [
            {"id": "read-kv", "decision": "allow", "effects": ["reads"], "resource": "kv:*"},
            {"id": "write-kv", "decision": "allow", "effects": ["writes"], "resource": "kv:*"},
            {"id": "no-deletes", "decision": "deny", "effects": ["deletes"]},
            {"id": "careful-users", "decision": "ask", "effects": ["writes"], "resource": "kv:users/*"}
        ]
    }}})
}

fn batch() -> Value {
    json!({"tenant": "acme", "calls": [
        {"id": "put", "tool": "sluice.kv.put", "input": {"key": "users/1", "value": 2}},
        {"id": "get", "tool": "sluice.kv.get", "input": {"key": "users/1"}},
        {"id": "del", "tool": "sluice.kv.delete", "input": {"key": "users/1"}},
        {"id": "echo", "tool": "sluice.echo", "input": {}}
    ]})
}

#[test]
fn plan_shows_each_decision_and_its_reason() {
    let dir = temp_dir("cli-policy");
    let p = policy(&dir, &acme());
    let run = sluice(
        &["plan", "--batch", "-", "--policy", &p],
        Some(&batch().to_string()),
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v = run.json();
    let auth: Vec<(String, String)> = v["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["authorization"]["decision"].as_str().unwrap().to_owned(),
                c["authorization"]["by"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        auth,
        [
            ("ask".into(), "careful-users".into()),
            ("allow".into(), "read-kv".into()),
            ("deny".into(), "no-deletes".into()),
            ("allow".into(), "pure".into())
        ]
    );
}

#[test]
fn run_enforces_denials_and_fails_closed_on_asks() {
    let dir = temp_dir("cli-policy-run");
    let p = policy(&dir, &acme());
    let closed = sluice(
        &["run", "--batch", "-", "--policy", &p],
        Some(&batch().to_string()),
        None,
    );
    assert_eq!(closed.code, 0, "{}", closed.stderr);
    let v = closed.json();
    assert_eq!(v["results"][0]["status"], "rejected");
    assert!(v["results"][0]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("no-approver"));
    assert_eq!(
        v["results"][1]["status"], "ok",
        "the dependent of a rejected call runs"
    );
    assert_eq!(
        v["results"][1]["output"]["value"],
        Value::Null,
        "the rejected write did not happen"
    );
    assert_eq!(v["results"][2]["status"], "denied");
    assert!(v["results"][2]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("no-deletes"));
    assert_eq!(v["results"][2]["started_ms"], Value::Null);

    let open = sluice(
        &["run", "--batch", "-", "--policy", &p, "--approve", "all"],
        Some(&batch().to_string()),
        None,
    );
    let v = open.json();
    assert_eq!(v["results"][0]["status"], "ok");
    assert_eq!(v["results"][1]["output"]["value"], 2);
    assert_eq!(
        v["results"][2]["status"], "denied",
        "approval never overrides a deny"
    );

    // An unknown tenant is denied everything, pure calls included.
    let other =
        json!({"tenant": "globex", "calls": [{"id": "e", "tool": "sluice.echo", "input": {}}]});
    let v = sluice(
        &["run", "--batch", "-", "--policy", &p],
        Some(&other.to_string()),
        None,
    )
    .json();
    assert_eq!(v["results"][0]["status"], "denied");
    assert!(v["results"][0]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("unknown"));
}

#[test]
fn prompt_without_a_terminal_rejects() {
    let dir = temp_dir("cli-policy-prompt");
    let p = policy(&dir, &acme());
    // Run with no controlling terminal: the prompt cannot ask, so it fails closed.
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.args(["run", "--batch", "-", "--policy", &p, "--approve", "prompt"]);
    let out = support::sluice_detached(cmd, &batch().to_string());
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["results"][0]["status"], "rejected");
}

#[test]
fn check_and_explain() {
    let dir = temp_dir("cli-policy-check");
    let p = policy(&dir, &acme());
    let ok = sluice(&["policy", "check", &p], None, None);
    assert_eq!(ok.code, 0);
    assert!(ok.stdout.contains("valid"));
    let bad = policy(
        &dir,
        &json!({"tenants": {"acme": {"default": "maybe", "rules": [{"id": "x", "decision": "allow", "effects": ["flies"]}]}}}),
    );
    let run = sluice(&["policy", "check", &bad], None, None);
    assert_eq!(run.code, 1);
    assert!(run.stdout.contains("/tenants/acme/default"));
    assert!(run.stdout.contains("/tenants/acme/rules/0/effects/0"));
    assert_eq!(
        sluice(&["policy", "check", "/no/such.json"], None, None).code,
        2
    );
    let run = sluice(
        &["run", "--batch", "-", "--policy", &bad],
        Some(&batch().to_string()),
        None,
    );
    assert_eq!(run.code, 1, "an invalid policy stops the run");

    let x = sluice(
        &[
            "policy",
            "explain",
            "--policy",
            &p,
            "--tenant",
            "acme",
            "--tool",
            "sluice.kv.put",
            "--effect",
            "writes",
            "--resource",
            "kv:users/7",
            "--format",
            "json",
        ],
        None,
        None,
    );
    assert_eq!(x.code, 0, "{}", x.stderr);
    let v = x.json();
    assert_eq!(v["decision"], "ask");
    assert_eq!(v["by"], "careful-users");
    let applied: Vec<&str> = v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["applies"] == true)
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(applied, ["write-kv", "careful-users"]);
    let x = sluice(
        &[
            "policy",
            "explain",
            "--policy",
            &p,
            "--tenant",
            "acme",
            "--tool",
            "sluice.kv.get",
            "--effect",
            "reads",
            "--resource",
            "*",
        ],
        None,
        None,
    );
    assert!(x.stdout.contains("acme: deny by default"), "{}", x.stdout);
}
