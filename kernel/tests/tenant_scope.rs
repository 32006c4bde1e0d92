//! Tenants and the resources they reach: a per-tenant resource of one tenant never waits for
//! another's, and a resource shared between tenants (a [`TenantScope::Shared`] tool: one root,
//! one remote service) keeps its conflicting calls in submission order across tenants, so two
//! tenants' increments of one counter lose nothing. On tokio's paused clock: deterministic.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use sluice_kernel::builtin::{self, BuiltinConfig};
use sluice_kernel::run::Kernel;
use sluice_kernel::transport::{handler, TenantScope, Tool, ToolContext};
use sluice_kernel::{Batch, Call, Status};

/// `c.incr`: a counter outside the kernel (think of a remote service) that loses updates when
/// two calls overlap: it reads, waits 10 ms, and stores what it read plus one.
fn racy_counter(scope: TenantScope, count: Arc<Mutex<i64>>) -> Tool {
    support::tool(
        "c.incr",
        json!([{"kind": "reads", "resource": "counter:{key}"},
               {"kind": "writes", "resource": "counter:{key}"}]),
        true,
        handler(move |_ctx: ToolContext, _input: Value| {
            let count = count.clone();
            async move {
                let read = *count.lock().unwrap();
                tokio::time::sleep(Duration::from_millis(10)).await;
                *count.lock().unwrap() = read + 1;
                Ok(json!({"count": read + 1}))
            }
        }),
    )
    .with_scope(scope)
}

/// Two tenants' batches of `n` increments each of one key, run at once; the final count.
async fn two_tenants_increment(scope: TenantScope, n: usize) -> i64 {
    let count = Arc::new(Mutex::new(0));
    let kernel = Kernel::builder()
        .tool(racy_counter(scope, count.clone()))
        .build()
        .unwrap();
    let batch = |tenant: &str| {
        let calls = (0..n)
            .map(|i| Call::new(format!("{tenant}-{i}"), "c.incr", json!({"key": "hits"})))
            .collect();
        Batch::new(tenant, calls).unwrap()
    };
    let (a, z) = tokio::join!(kernel.run(batch("acme")), kernel.run(batch("zeta")));
    for r in a.unwrap().results.iter().chain(&z.unwrap().results) {
        assert_eq!(r.status, Status::Ok, "{:?}", r.error);
    }
    assert_eq!(kernel.shared_load(), (0, 0), "the commons is empty again");
    let c = *count.lock().unwrap();
    c
}

#[tokio::test(start_paused = true)]
async fn two_tenants_increments_of_one_shared_counter_are_all_kept() {
    assert_eq!(two_tenants_increment(TenantScope::Shared, 5).await, 10);
}

/// The same traffic with the tool declared per tenant: the kernel keeps the tenants apart, so
/// their increments overlap and some are lost. What the shared scope is there to prevent, and
/// proof that the counter above can tell.
#[tokio::test(start_paused = true)]
async fn declared_per_tenant_the_same_counter_loses_updates() {
    assert!(two_tenants_increment(TenantScope::PerTenant, 5).await < 10);
}

#[tokio::test(start_paused = true)]
async fn per_tenant_calls_never_wait_for_another_tenant() {
    // acme holds kv:k for 1 s; zeta's put of its own kv:k starts at once.
    let kv = builtin::KvStore::default();
    let kernel = Kernel::builder()
        .tools(builtin::registry(BuiltinConfig::new(".").with_kv(kv.clone())).unwrap())
        .build()
        .unwrap();
    let slow = Batch::new(
        "acme",
        vec![Call::new(
            "a",
            "sluice.kv.incr",
            json!({"key": "k", "delay_ms": 1000}),
        )],
    )
    .unwrap();
    let quick = Batch::new(
        "zeta",
        vec![Call::new(
            "z",
            "sluice.kv.put",
            json!({"key": "k", "value": "zeta's"}),
        )],
    )
    .unwrap();
    let began = tokio::time::Instant::now();
    let (a, z) = tokio::join!(kernel.run(slow), async {
        let r = kernel.run(quick).await;
        (r, began.elapsed())
    });
    let (z, zeta_done) = z;
    assert_eq!(z.unwrap().results[0].status, Status::Ok);
    assert_eq!(a.unwrap().results[0].status, Status::Ok);
    assert!(zeta_done < Duration::from_millis(1000), "{zeta_done:?}");
    // Each tenant's store has its own key.
    assert_eq!(kv.tenant("acme").get("k"), Some(json!(1)));
    assert_eq!(kv.tenant("zeta").get("k"), Some(json!("zeta's")));
    assert_eq!(kv.tenant("other").get("k"), None);
}

#[test]
fn who_shares_what_by_default() {
    let scope = |registry: &sluice_kernel::transport::ToolRegistry, id: &str| {
        registry.get(id).unwrap().scope()
    };
    // One root for everyone: its files are shared; a root per tenant: they are not. The kv
    // memory is always the tenant's own.
    let shared = builtin::registry(BuiltinConfig::new(".")).unwrap();
    let apart = builtin::registry(BuiltinConfig::per_tenant("roots")).unwrap();
    for id in ["sluice.fs.read", "sluice.fs.write"] {
        assert_eq!(scope(&shared, id), TenantScope::Shared, "{id}");
        assert_eq!(scope(&apart, id), TenantScope::PerTenant, "{id}");
    }
    for id in ["sluice.kv.get", "sluice.kv.put", "sluice.kv.incr"] {
        assert_eq!(scope(&shared, id), TenantScope::PerTenant, "{id}");
    }
    // A declarative HTTP tool is one service for every tenant, still once the kernel has
    // given it its HTTP handler.
    let manifest = json!({"id": "svc.get", "description": "remote", "version": "1.0.0",
        "input": {"type": "object"}, "output": {}, "mutating": false,
        "effects": [{"kind": "reads", "resource": "svc:x"}],
        "spec": {"kind": "http", "method": "GET", "urlTemplate": "http://127.0.0.1:9/x"}});
    let tool = Tool::new(
        sluice_kernel::model::Manifest::from_value(manifest).unwrap(),
        sluice_kernel::model::ManifestSource::built_in(),
        None,
    )
    .unwrap();
    assert_eq!(tool.scope(), TenantScope::Shared);
    let kernel = Kernel::builder().tool(tool).build().unwrap();
    assert_eq!(scope(kernel.tools(), "svc.get"), TenantScope::Shared);
}
