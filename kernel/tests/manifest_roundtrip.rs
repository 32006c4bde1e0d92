//! Property test: any manifest built from the schema's shapes parses, serializes and parses back
//! to the same value, and the JSON Schema accepts what the serde model accepts.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use proptest::prelude::*;
use serde_json::{json, Map, Value};
use sluice_kernel::model::{schema_accepts, Manifest};

fn opt<T: std::fmt::Debug + Clone + 'static>(
    s: impl Strategy<Value = T> + 'static,
) -> impl Strategy<Value = Option<T>> {
    prop::option::of(s)
}

fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_.-]{0,10}"
}

fn effect() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(vec![
            "reads",
            "writes",
            "deletes",
            "network",
            "spawns-run",
            "emits-event",
            "external-side-effect",
            "sensitive-data-egress",
        ]),
        opt("[a-z]{1,4}:[a-z*{}/]{0,8}"),
        opt("[a-z ]{0,10}"),
    )
        .prop_map(|(k, r, n)| {
            let mut e = json!({"kind": k});
            if let Some(r) = r {
                e["resource"] = json!(r);
            }
            if let Some(n) = n {
                e["notes"] = json!(n);
            }
            e
        })
}

fn spec() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(vec!["GET", "POST", "PUT", "PATCH", "DELETE"]),
        opt(prop::collection::vec((name(), "[a-z{}]{0,6}"), 0..3)),
        opt(prop_oneof![
            Just(json!({"kind": "bearer", "secretRef": {"envName": "E", "name": "n"}})),
            Just(json!({"kind": "header", "headerName": "X-K",
                        "secretRef": {"envName": "E", "name": "n"}})),
        ]),
        opt(prop_oneof![
            Just(json!({"kind": "json-input"})),
            Just(json!({"kind": "input-passthrough"})),
            "[a-z {}]{0,8}".prop_map(|t| json!({"kind": "text", "template": t})),
        ]),
        opt(1u64..100_000),
        opt(any::<bool>()),
        opt((100u16..600, 100u16..600)),
    )
        .prop_map(|(method, headers, auth, body, timeout, parse, status)| {
            let mut s = json!({"kind": "http", "method": method,
                               "urlTemplate": "https://api.example.com/{id}"});
            if let Some(h) = headers {
                s["headers"] = h
                    .into_iter()
                    .map(|(n, v)| json!({"name": n, "value": v}))
                    .collect();
            }
            if let Some(a) = auth {
                s["authorization"] = a;
            }
            if let Some(b) = body {
                s["requestBody"] = b;
            }
            if let Some(t) = timeout {
                s["timeoutMs"] = json!(t);
            }
            if let Some(p) = parse {
                s["parseJson"] = json!(p);
            }
            if let Some((a, b)) = status {
                s["successStatus"] = json!({"min": a, "max": b});
            }
            s
        })
}

fn manifest() -> impl Strategy<Value = Value> {
    let core = (
        name(),
        "[A-Za-z ]{1,20}",
        (0u32..20, 0u32..20, 0u32..20),
        opt(prop::collection::vec((name(), opt(any::<bool>())), 0..3)),
        opt(prop::collection::vec(effect(), 0..4)),
        opt(prop::sample::select(vec!["auto", "native", "mcp"])),
        opt(prop::sample::select(vec![
            "mcp+stdio://npx -y server",
            "mcp+http://127.0.0.1:9/mcp",
            "mcp+sse://h.example/sse",
        ])),
    );
    let rest = (
        opt(prop::sample::select(vec![
            "none",
            "context-isolated",
            "strict",
        ])),
        opt(any::<bool>()),
        opt((1u64..4096, 1u64..60_000)),
        opt(prop_oneof![
            Just(json!({"kind": "none"})),
            Just(json!({"kind": "unrestricted"})),
            prop::collection::vec("[a-z.]{1,10}", 0..3)
                .prop_map(|h| json!({"kind": "allowlist", "hosts": h})),
        ]),
        opt(prop_oneof![
            Just(json!({"env": {"A": {"type": "string", "default": "x"}}, "capabilities": ["c"]})),
            Just(json!({"secrets": {"S": {"type": "string"}}, "bindings": ["b"], "config": {}})),
        ]),
        opt(prop_oneof![
            Just(json!({"kind": "oci", "imageRef": "i", "modulePath": "/m",
                        "artifactVersion": "20260101.1"})),
            Just(json!({"kind": "filesystem", "modulePath": "/dev/t.js"})),
        ]),
        opt(spec()),
        opt(Just(json!({"author": "x", "n": 1}))),
    );
    (core, rest).prop_map(
        |(
            (id, desc, (a, b, c), needs, effects, transport, endpoint),
            (sandbox, mutating, limits, network, needs_spec, artifact, spec, metadata),
        )| {
            let mut m = Map::new();
            m.insert("id".into(), json!(id));
            m.insert("description".into(), json!(desc));
            m.insert("version".into(), json!(format!("{a}.{b}.{c}")));
            m.insert("input".into(), json!({"type": "object"}));
            m.insert("output".into(), json!({}));
            let mut put = |k: &str, v: Option<Value>| {
                if let Some(v) = v {
                    m.insert(k.into(), v);
                }
            };
            put(
                "needs",
                needs.map(|n| {
                    n.into_iter()
                        .map(|(name, o)| match o {
                            Some(o) => json!({"name": name, "optional": o}),
                            None => json!({"name": name}),
                        })
                        .collect()
                }),
            );
            put("effects", effects.map(Value::from));
            put("transport", transport.map(Value::from));
            put("mcpEndpoint", endpoint.map(Value::from));
            put("sandbox", sandbox.map(Value::from));
            put("mutating", mutating.map(Value::from));
            put(
                "limits",
                limits.map(|(m, c)| json!({"memMB": m, "cpuMs": c})),
            );
            put("network", network);
            put("needsSpec", needs_spec);
            put("codeArtifactRef", artifact);
            put("spec", spec);
            put("metadata", metadata);
            Value::Object(m)
        },
    )
}

proptest! {
    #[test]
    fn parse_serialize_parse_is_the_identity(v in manifest()) {
        prop_assert!(schema_accepts(&v), "the schema refuses {}", v);
        let m = Manifest::from_value(v.clone()).map_err(|e| TestCaseError::fail(format!("{e}: {v}")))?;
        // Absent fields stay absent: serialization gives back the very document.
        prop_assert_eq!(m.to_value(), v);
        prop_assert_eq!(Manifest::from_value(m.to_value()).unwrap(), m);
    }

    #[test]
    fn schema_and_model_agree_on_mutated_documents(
        v in manifest(), key in prop::sample::select(vec![
            "id", "version", "mutating", "limits", "network", "sandbox", "transport", "spec",
            "effects", "needs", "codeArtifactRef", "needsSpec", "mcpEndpoint", "extra",
        ]), junk in prop_oneof![
            Just(json!(null)), Just(json!(0)), Just(json!("")), Just(json!({})),
            Just(json!([])), Just(json!({"kind": "none", "x": 1})), Just(json!("1.2")),
        ]
    ) {
        let mut v = v;
        v[key] = junk;
        prop_assert_eq!(schema_accepts(&v), Manifest::from_value(v.clone()).is_ok(), "{}", v);
    }
}
