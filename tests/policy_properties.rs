//! Property test: the indexed engine decides exactly as the naive linear evaluation of the same
//! rules, on random rules and accesses. Case counts follow proptest's default (256) unless
//! `PROPTEST_CASES` says otherwise.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use proptest::prelude::*;
use serde_json::{json, Value};
use sluice_kernel::access::{Access, Pattern};
use sluice_kernel::model::{EffectKind, Manifest};
use sluice_policy::{PolicyDocument, PolicyEngine};

fn resource() -> impl Strategy<Value = String> {
    prop_oneof![
        "kv:[ab]{1,2}",
        "kv:[ab]?\\*",
        "(kv|fs):\\*",
        Just("*".to_string()),
        "[kv:ab*?]{0,4}",
    ]
}

fn rule(i: usize) -> impl Strategy<Value = Value> {
    (
        prop::sample::select(vec!["allow", "ask", "deny"]),
        prop::option::of(prop::collection::vec(
            prop::sample::select(vec!["reads", "writes", "deletes", "network"]),
            1..3,
        )),
        prop::option::of(prop::collection::vec(
            prop::sample::select(vec!["t.*", "t.a", "u.b", "*"]),
            1..3,
        )),
        prop::option::of(resource()),
    )
        .prop_map(move |(d, e, t, r)| {
            let mut v = json!({"id": format!("r{i}"), "decision": d});
            if let Some(e) = e {
                v["effects"] = json!(e);
            }
            if let Some(t) = t {
                v["tools"] = json!(t);
            }
            if let Some(r) = r {
                v["resource"] = json!(r);
            }
            v
        })
}

fn rules() -> impl Strategy<Value = Vec<Value>> {
    (0usize..8).prop_flat_map(|n| (0..n).map(rule).collect::<Vec<_>>())
}

proptest! {
    #[test]
    fn the_index_decides_as_the_linear_scan(
        rules in rules(),
        default in prop::sample::select(vec!["allow", "ask", "deny"]),
        hitl in prop::option::of(prop::sample::select(vec!["never_ask", "ask_on_first_use", "always_ask"])),
        tool in prop::sample::select(vec!["t.a", "t.b", "u.b"]),
        read_only in any::<bool>(),
        approved in any::<bool>(),
        accesses in prop::collection::vec((prop::sample::select(vec!["reads", "writes", "deletes", "network"]), resource()), 0..4),
    ) {
        let mut tenant = json!({"default": default, "rules": rules});
        if let Some(m) = hitl { tenant["hitl"] = json!({"t.*": m}); }
        let doc = PolicyDocument::from_value(&json!({"tenants": {"acme": tenant}})).unwrap();
        let engine = PolicyEngine::new(doc.clone());
        if approved {
            use sluice_kernel::authorize::Authorizer;
            engine.remember_approval("acme", tool);
        }
        let manifest = Manifest::from_value(json!({"id": tool, "description": "d", "version": "1.0.0",
            "input": {}, "output": {}, "mutating": !read_only, "effects": []})).unwrap();
        let accesses: Vec<Access> = accesses.iter()
            .map(|(k, r)| Access::new(EffectKind::parse(k).unwrap(), Pattern::parse(r).unwrap()))
            .collect();
        let fast = engine.decide("acme", &manifest, &accesses);
        let slow = sluice_policy::linear::decide(&doc, "acme", tool, read_only, &accesses, approved);
        prop_assert_eq!(fast, slow);
        for a in &accesses {
            let f = engine.decide_access("acme", tool, a.kind, &a.resource).unwrap();
            let s = sluice_policy::linear::decide_access(&doc.tenants["acme"], tool, a);
            prop_assert_eq!((f.decision, f.by), s);
        }
    }
}
