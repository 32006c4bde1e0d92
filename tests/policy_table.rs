//! A hand-written table for every rule of semantics.md section 4, including the bypass shapes
//! other agent runtimes' users have reported. Each row: the policy's rules, a call, the decision
//! and the reason it must give.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use serde_json::{json, Value};
use sluice_kernel::access::{Access, Pattern};
use sluice_kernel::authorize::{DecidedBy, Decision};
use sluice_kernel::model::{EffectKind, Manifest};
use sluice_policy::{PolicyDocument, PolicyEngine};

fn tool(id: &str, read_only: bool) -> Manifest {
    Manifest::from_value(json!({"id": id, "description": "d", "version": "1.0.0",
        "input": {}, "output": {}, "mutating": !read_only, "effects": []}))
    .unwrap()
}

fn access(kind: &str, resource: &str) -> Access {
    Access::new(
        EffectKind::parse(kind).unwrap(),
        Pattern::parse(resource).unwrap(),
    )
}

fn engine(tenant: Value) -> PolicyEngine {
    PolicyEngine::new(PolicyDocument::from_value(&json!({"tenants": {"acme": tenant}})).unwrap())
}

struct Row {
    name: &'static str,
    tenant: Value,
    tool: &'static str,
    read_only: bool,
    accesses: Vec<(&'static str, &'static str)>,
    expect: (Decision, &'static str),
}

fn rows() -> Vec<Row> {
    use Decision::*;
    let r =
        |name, tenant, tool, read_only, accesses: Vec<(&'static str, &'static str)>, expect| Row {
            name,
            tenant,
            tool,
            read_only,
            accesses,
            expect,
        };
    vec![
        r(
            "default is deny when unstated",
            json!({}),
            "t.read",
            true,
            vec![("reads", "kv:a")],
            (Deny, "default"),
        ),
        r(
            "stated default applies",
            json!({"default": "allow"}),
            "t.read",
            true,
            vec![("reads", "kv:a")],
            (Allow, "default"),
        ),
        r(
            "allow rule containing the access",
            json!({"rules": [{"id": "a", "decision": "allow", "resource": "memory:*"}]}),
            "t.read",
            true,
            vec![("reads", "memory:facts")],
            (Allow, "a"),
        ),
        r(
            "`*` is never contained by a narrower allow",
            json!({"rules": [{"id": "a", "decision": "allow", "resource": "memory:*"}]}),
            "t.read",
            true,
            vec![("reads", "*")],
            (Deny, "default"),
        ),
        r(
            "an overlapping but wider access is not allowed",
            json!({"rules": [{"id": "a", "decision": "allow", "resource": "fs:/r/src/*"}]}),
            "t.read",
            true,
            vec![("reads", "fs:/r/*")],
            (Deny, "default"),
        ),
        r(
            "a broad allow never beats a deny",
            json!({"rules": [
            {"id": "all", "decision": "allow"},
            {"id": "no-secrets", "decision": "deny", "resource": "fs:/r/.env"}]}),
            "t.read",
            true,
            vec![("reads", "fs:/r/.env")],
            (Deny, "no-secrets"),
        ),
        r(
            "a deny on fs:/r/c* applies to fs:/r/*",
            json!({"default": "allow", "rules": [
            {"id": "no-c", "decision": "deny", "resource": "fs:/r/c*"}]}),
            "t.read",
            true,
            vec![("reads", "fs:/r/*")],
            (Deny, "no-c"),
        ),
        r(
            "ask applies by overlap and beats allow",
            json!({"rules": [
            {"id": "all", "decision": "allow"},
            {"id": "careful", "decision": "ask", "effects": ["writes"], "resource": "fs:/repo/*"}]}),
            "t.read",
            true,
            vec![("writes", "fs:*")],
            (Ask, "careful"),
        ),
        r(
            "deny beats ask",
            json!({"rules": [
            {"id": "q", "decision": "ask"}, {"id": "no", "decision": "deny", "effects": ["deletes"]}]}),
            "t.read",
            true,
            vec![("reads", "kv:a"), ("deletes", "kv:a")],
            (Deny, "no"),
        ),
        r(
            "the effects filter limits a rule",
            json!({"default": "allow", "rules": [
            {"id": "no-deletes", "decision": "deny", "effects": ["deletes"]}]}),
            "t.read",
            true,
            vec![("reads", "kv:a")],
            (Allow, "default"),
        ),
        r(
            "the tools filter limits a rule",
            json!({"default": "allow", "rules": [
            {"id": "no-acme", "decision": "deny", "tools": ["acme.*"]}]}),
            "other.tool",
            true,
            vec![("reads", "kv:a")],
            (Allow, "default"),
        ),
        r(
            "the tools filter matches by pattern",
            json!({"default": "allow", "rules": [
            {"id": "no-acme", "decision": "deny", "tools": ["acme.*"]}]}),
            "acme.deploy",
            true,
            vec![("reads", "kv:a")],
            (Deny, "no-acme"),
        ),
        r(
            "the call takes its strictest access",
            json!({"rules": [
            {"id": "reads-ok", "decision": "allow", "effects": ["reads"]}]}),
            "t.read",
            true,
            vec![("reads", "kv:a"), ("writes", "kv:b")],
            (Deny, "default"),
        ),
        r(
            "the first applicable rule in document order is named",
            json!({"rules": [
            {"id": "first", "decision": "allow", "resource": "kv:*"},
            {"id": "second", "decision": "allow", "resource": "kv:a"}]}),
            "t.read",
            true,
            vec![("reads", "kv:a")],
            (Allow, "first"),
        ),
        r(
            "a pure call is allowed when no tool rule matches; the default never applies",
            json!({"default": "deny"}),
            "t.read",
            true,
            vec![],
            (Allow, "pure"),
        ),
        r(
            "a pure call takes the strictest matching tool rule",
            json!({"rules": [
            {"id": "ok", "decision": "allow", "tools": ["t.*"]},
            {"id": "stop", "decision": "deny", "tools": ["t.read"]}]}),
            "t.read",
            true,
            vec![],
            (Deny, "stop"),
        ),
        r(
            "a rule with effects is no tool rule for pure calls",
            json!({"rules": [
            {"id": "stop", "decision": "deny", "tools": ["t.read"], "effects": ["reads"]}]}),
            "t.read",
            true,
            vec![],
            (Allow, "pure"),
        ),
        r(
            "a tool rule applies to every access of its tools",
            json!({"rules": [
            {"id": "trusted", "decision": "allow", "tools": ["t.read"]}]}),
            "t.read",
            true,
            vec![("reads", "*"), ("network", "net:x")],
            (Allow, "trusted"),
        ),
        r(
            "a mutating tool asks on first use",
            json!({"default": "allow"}),
            "t.write",
            false,
            vec![("writes", "kv:a")],
            (Ask, "mode:ask_on_first_use"),
        ),
        r(
            "hitl tightens a read-only tool",
            json!({"default": "allow", "hitl": {"t.*": "always_ask"}}),
            "t.read",
            true,
            vec![("reads", "kv:a")],
            (Ask, "mode:always_ask"),
        ),
        r(
            "hitl never loosens a mutating tool",
            json!({"default": "allow", "hitl": {"t.write": "never_ask"}}),
            "t.write",
            false,
            vec![("writes", "kv:a")],
            (Ask, "mode:ask_on_first_use"),
        ),
        r(
            "the strictest matching hitl entry wins",
            json!({"default": "allow", "hitl": {"t.*": "ask_on_first_use", "t.read": "always_ask"}}),
            "t.read",
            true,
            vec![("reads", "kv:a")],
            (Ask, "mode:always_ask"),
        ),
        r(
            "a deny is not turned into an ask by the mode",
            json!({"hitl": {"*": "always_ask"}}),
            "t.read",
            true,
            vec![("reads", "kv:a")],
            (Deny, "default"),
        ),
        r(
            "an escaped star in a rule is literal",
            json!({"rules": [
            {"id": "lit", "decision": "allow", "resource": "kv:\\*"}]}),
            "t.read",
            true,
            vec![("reads", "kv:abc")],
            (Deny, "default"),
        ),
    ]
}

#[test]
fn every_row_of_the_table() {
    for row in rows() {
        let e = engine(row.tenant.clone());
        let accesses: Vec<Access> = row.accesses.iter().map(|(k, r)| access(k, r)).collect();
        let auth = e.decide("acme", &tool(row.tool, row.read_only), &accesses);
        assert_eq!(
            (auth.decision, auth.by.to_string().as_str()),
            row.expect,
            "row `{}`",
            row.name
        );
        // The linear reference agrees on every row.
        let doc = PolicyDocument::from_value(&json!({"tenants": {"acme": row.tenant}})).unwrap();
        let lin =
            sluice_policy::linear::decide(&doc, "acme", row.tool, row.read_only, &accesses, false);
        assert_eq!(
            (lin.decision, lin.by.to_string().as_str()),
            row.expect,
            "linear, row `{}`",
            row.name
        );
    }
}

/// The text of a rule named `default` is the default's text (the contract's tokens), but the
/// decision says which it is, and so does the message a refused call carries.
#[test]
fn a_rule_named_default_is_not_the_default() {
    let e = engine(json!({"default": "deny", "rules": [
        {"id": "default", "decision": "deny", "effects": ["deletes"]}
    ]}));
    let t = tool("t.rm", false);
    let by_rule = e.decide("acme", &t, &[access("deletes", "kv:a")]);
    assert_eq!(by_rule.decision, Decision::Deny);
    assert_eq!(by_rule.by, DecidedBy::rule("default"));
    assert_ne!(by_rule.by, DecidedBy::Default);
    assert_eq!(by_rule.by.describe(), "rule `default`");
    let by_default = e.decide("acme", &t, &[access("writes", "kv:a")]);
    assert_eq!(by_default.by, DecidedBy::Default);
    assert_eq!(by_rule.by.to_string(), by_default.by.to_string());
    assert!(by_default
        .by
        .describe()
        .contains("the tenant's default decision"));
}

#[test]
fn an_unknown_tenant_is_denied_everything() {
    let e = engine(json!({"default": "allow"}));
    for accesses in [vec![], vec![access("reads", "kv:a")]] {
        let auth = e.decide("globex", &tool("t.read", true), &accesses);
        assert_eq!(
            (auth.decision, auth.by.to_string().as_str()),
            (Decision::Deny, "unknown-tenant")
        );
    }
}

#[test]
fn first_use_approvals_are_remembered_and_revocable() {
    use sluice_kernel::authorize::Authorizer;
    let e = engine(json!({"default": "allow"}));
    let t = tool("t.write", false);
    let a = [access("writes", "kv:a")];
    let first = e.decide("acme", &t, &a);
    assert!(first.first_use);
    e.remember_approval("acme", "t.write");
    assert_eq!(e.decide("acme", &t, &a).decision, Decision::Allow);
    e.revoke_approval("acme", "t.write");
    assert_eq!(e.decide("acme", &t, &a).decision, Decision::Ask);
}

#[test]
fn documents_with_errors_are_refused_whole_with_pointers() {
    let bad = json!({"tenants": {"acme": {
        "default": "sometimes",
        "rules": [
            {"id": "a", "decision": "allow", "effects": ["teleports"]},
            {"id": "a", "decision": "deny"},
            {"decision": "allow", "extra": 1},
            {"id": "b", "decision": "allow", "resource": "kv:\\"}
        ],
        "hitl": {"t.*": "often"},
        "colour": "blue"
    }}});
    let err = PolicyDocument::from_value(&bad).unwrap_err();
    let sluice_policy::PolicyError::Invalid { problems } = err else {
        panic!("invalid expected")
    };
    let pointers: Vec<&str> = problems.iter().map(|p| p.pointer.as_str()).collect();
    for expected in [
        "/tenants/acme/default",
        "/tenants/acme/rules/0/effects/0",
        "/tenants/acme/rules/1/id",
        "/tenants/acme/rules/2",
        "/tenants/acme/rules/2/extra",
        "/tenants/acme/rules/3/resource",
        "/tenants/acme/hitl/t.*",
        "/tenants/acme/colour",
    ] {
        assert!(
            pointers.contains(&expected),
            "{expected} missing from {pointers:?}"
        );
    }
}

#[test]
fn a_reload_swaps_whole_and_a_bad_file_leaves_the_old_policy() {
    let dir = std::env::temp_dir().join(format!("sluice-policy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.json");
    let bad = dir.join("bad.json");
    let toml = dir.join("p.toml");
    std::fs::write(
        &good,
        json!({"tenants": {"acme": {"default": "allow"}}}).to_string(),
    )
    .unwrap();
    std::fs::write(
        &bad,
        json!({"tenants": {"acme": {"default": "allow", "rules": [{"id": "x"}]}}}).to_string(),
    )
    .unwrap();
    std::fs::write(&toml, "[tenants.acme]\ndefault = \"deny\"\n[[tenants.acme.rules]]\nid = \"r\"\ndecision = \"allow\"\neffects = [\"reads\"]\n").unwrap();
    let e = PolicyEngine::from_path(&toml).unwrap();
    let t = tool("t.read", true);
    assert_eq!(
        e.decide("acme", &t, &[access("reads", "kv:a")]).by,
        DecidedBy::rule("r")
    );
    e.reload_from_path(&good).unwrap();
    assert_eq!(
        e.decide("acme", &t, &[access("writes", "kv:a")]).by,
        DecidedBy::Default
    );
    assert!(e.reload_from_path(&bad).is_err());
    assert_eq!(
        e.decide("acme", &t, &[access("writes", "kv:a")]).decision,
        Decision::Allow,
        "old policy stays"
    );
}
