//! Numbers at the edge of the built-in tools (issue 40, item 4): an overflowing `incr` is an
//! error for that call and the value stays; huge, negative and fractional delays are refused by
//! the schema with a pointer; nothing is left dead.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use serde_json::{json, Value};
use sluice_kernel::builtin::{self, BuiltinConfig, KvStore};
use sluice_kernel::{Batch, Call, Kernel};

async fn one(kernel: &Kernel, tool: &str, input: Value) -> Value {
    let batch = Batch::new("acme", vec![Call::new("c", tool, input)]).unwrap();
    let out = kernel.run(batch).await.unwrap();
    sluice::report::result_json(&out.results[0])
}

#[tokio::test]
async fn an_overflowing_incr_fails_and_leaves_the_value() {
    let kv = KvStore::new();
    let k = Kernel::builder()
        .tools(builtin::registry(BuiltinConfig::default().with_kv(kv.clone())).unwrap())
        .build()
        .unwrap();
    let first = one(&k, "sluice.kv.incr", json!({"key": "n", "by": 1e308})).await;
    assert_eq!(first["status"], "ok", "{first}");
    // The report: the second stored null and the counter was dead ever after.
    let second = one(&k, "sluice.kv.incr", json!({"key": "n", "by": 1e308})).await;
    assert_eq!(second["status"], "error", "{second}");
    assert_eq!(second["error"]["code"], "overflow", "{second}");
    assert_eq!(kv.tenant("acme").get("n"), Some(json!(1e308)));
    let third = one(&k, "sluice.kv.incr", json!({"key": "n", "by": -1e308})).await;
    assert_eq!(third["output"]["value"], json!(0.0), "{third}");

    // Integers stay integers until they no longer fit, then become floats (no wrap-around).
    one(&k, "sluice.kv.put", json!({"key": "i", "value": i64::MAX})).await;
    let past = one(&k, "sluice.kv.incr", json!({"key": "i", "by": 1})).await;
    assert_eq!(past["status"], "ok", "{past}");
    assert_eq!(
        past["output"]["value"],
        json!(i64::MAX as f64 + 1.0),
        "{past}"
    );
    let small = one(&k, "sluice.kv.incr", json!({"key": "j", "by": 2.5})).await;
    assert_eq!(small["output"]["value"], json!(2.5), "{small}");
}

#[tokio::test]
async fn delays_out_of_range_are_refused_with_their_pointer() {
    let k = Kernel::builder()
        .tools(builtin::registry(BuiltinConfig::default()).unwrap())
        .build()
        .unwrap();
    let cases = [
        ("sluice.sleep", json!({"ms": 3_600_001}), "/ms"),
        ("sluice.sleep", json!({"ms": -1}), "/ms"),
        ("sluice.sleep", json!({"ms": 1.5}), "/ms"),
        ("sluice.sleep", json!({"ms": 1e300}), "/ms"),
        (
            "sluice.kv.get",
            json!({"key": "k", "delay_ms": 3_600_001}),
            "/delay_ms",
        ),
        (
            "sluice.kv.put",
            json!({"key": "k", "value": 1, "delay_ms": -5}),
            "/delay_ms",
        ),
        (
            "sluice.kv.incr",
            json!({"key": "k", "delay_ms": 0.5}),
            "/delay_ms",
        ),
        ("sluice.kv.incr", json!({"key": "k", "by": "1"}), "/by"),
    ];
    for (tool, input, pointer) in cases {
        let r = one(&k, tool, input.clone()).await;
        assert_eq!(r["error"]["code"], "invalid-input", "{tool} {input}: {r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(message.contains(pointer), "{tool} {input}: {message}");
    }
    // The largest delay is taken (and a zero sleep returns at once).
    let r = one(&k, "sluice.sleep", json!({"ms": 0})).await;
    assert_eq!(r["output"]["slept_ms"], 0, "{r}");
}
