//! The built-in fs tools and symbolic links (issue 40, item 1): the resource of an fs access is
//! the file the OS will touch, computed once — what the policy judges, what the graph orders,
//! what provenance records and where the handler writes — and the handler opens it beneath a
//! directory handle that a link swapped in at the last moment cannot leave.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sluice_kernel::access::Normalizers;
use sluice_kernel::builtin::{self, BuiltinConfig};
use sluice_kernel::order::Plan;
use sluice_kernel::transport::{handler, ToolContext, ToolRegistry};
use sluice_kernel::{Batch, Call, Kernel};
use sluice_policy::{PolicyDocument, PolicyEngine};
use support::temp_dir;

fn kernel(config: BuiltinConfig) -> Kernel {
    Kernel::builder()
        .tools(builtin::registry(config).unwrap())
        .build()
        .unwrap()
}

async fn run_one(kernel: &Kernel, tenant: &str, tool: &str, input: Value) -> Value {
    let batch = Batch::new(tenant, vec![Call::new("c", tool, input)]).unwrap();
    let out = kernel.run(batch).await.unwrap();
    sluice::report::result_json(&out.results[0])
}

/// The accesses the plan gives each call, as `kind resource` texts.
fn planned(registry: &ToolRegistry, tenant: &str, calls: Vec<Call>) -> Plan {
    Plan::new(
        registry,
        &Normalizers::default(),
        Batch::new(tenant, calls).unwrap(),
    )
}

fn resources(plan: &Plan, i: usize) -> Vec<String> {
    plan.calls[i]
        .accesses
        .iter()
        .map(|a| a.resource.to_string())
        .collect()
}

fn real(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap()
}

#[tokio::test]
async fn a_write_through_a_dangling_link_does_not_leave_the_root() {
    let dir = temp_dir("fs-dangling");
    let root = dir.join("root");
    let out = dir.join("out");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    // The issue's report: `ln -s OUT/pwned.txt ROOT/evil`, then a write of `evil`.
    symlink(out.join("pwned.txt"), root.join("evil")).unwrap();
    let k = kernel(BuiltinConfig::new(&root));
    let r = run_one(
        &k,
        "acme",
        "sluice.fs.write",
        json!({"path": "evil", "content": "pwned"}),
    )
    .await;
    assert_eq!(r["error"]["code"], "path-escapes-root", "{r}");
    assert!(!out.join("pwned.txt").exists());
    // The plan names the file the OS would have touched, outside the root.
    let registry = builtin::registry(BuiltinConfig::new(&root)).unwrap();
    let plan = planned(
        &registry,
        "acme",
        vec![Call::new(
            "w",
            "sluice.fs.write",
            json!({"path": "evil", "content": ""}),
        )],
    );
    assert_eq!(
        resources(&plan, 0),
        vec![format!("fs:{}", real(&out).join("pwned.txt").display())]
    );
    // A dangling link to a file inside the root is followed to it: the write creates it.
    symlink("inside.txt", root.join("later")).unwrap();
    let r = run_one(
        &k,
        "acme",
        "sluice.fs.write",
        json!({"path": "later", "content": "made"}),
    )
    .await;
    assert_eq!(r["status"], "ok", "{r}");
    assert_eq!(
        std::fs::read_to_string(root.join("inside.txt")).unwrap(),
        "made"
    );
    assert_eq!(
        r["output"]["path"],
        root.join("inside.txt").to_string_lossy().as_ref()
    );
}

#[tokio::test]
async fn a_tenants_link_does_not_reach_another_tenants_root() {
    let dir = temp_dir("fs-tenant-link");
    let roots = dir.join("roots");
    std::fs::create_dir_all(roots.join("acme")).unwrap();
    std::fs::create_dir_all(roots.join("zeta")).unwrap();
    std::fs::write(roots.join("zeta/plan.txt"), "zeta's").unwrap();
    symlink(roots.join("zeta/plan.txt"), roots.join("acme/evil")).unwrap();
    symlink(roots.join("zeta/new.txt"), roots.join("acme/dangling")).unwrap();
    let k = kernel(BuiltinConfig::per_tenant(&roots));
    for path in ["evil", "dangling"] {
        let w = run_one(
            &k,
            "acme",
            "sluice.fs.write",
            json!({"path": path, "content": "acme was here"}),
        )
        .await;
        assert_eq!(w["error"]["code"], "path-escapes-root", "{path}: {w}");
    }
    let r = run_one(&k, "acme", "sluice.fs.read", json!({"path": "evil"})).await;
    assert_eq!(r["error"]["code"], "path-escapes-root", "{r}");
    assert_eq!(
        std::fs::read_to_string(roots.join("zeta/plan.txt")).unwrap(),
        "zeta's"
    );
    assert!(!roots.join("zeta/new.txt").exists());
    // A tenant's root that is itself a link into another's is refused, not followed.
    symlink(roots.join("zeta"), roots.join("mallory")).unwrap();
    let w = run_one(
        &k,
        "mallory",
        "sluice.fs.write",
        json!({"path": "plan.txt", "content": "mallory was here"}),
    )
    .await;
    assert_eq!(w["error"]["code"], "path-escapes-root", "{w}");
    assert_eq!(
        std::fs::read_to_string(roots.join("zeta/plan.txt")).unwrap(),
        "zeta's"
    );
}

#[tokio::test]
async fn a_deny_on_a_path_holds_through_an_alias() {
    let dir = temp_dir("fs-alias");
    let root = dir.join("root");
    std::fs::create_dir_all(root.join("protected")).unwrap();
    std::fs::write(root.join("protected/keep.txt"), "original").unwrap();
    symlink("protected", root.join("alias")).unwrap();
    let doc = PolicyDocument::from_value(&json!({"tenants": {"acme": {
        "default": "allow",
        "rules": [{"id": "protect", "decision": "deny", "effects": ["writes"],
                   "resource": format!("fs:{}/protected/*", root.display())}]
    }}}))
    .unwrap();
    let k = Kernel::builder()
        .tools(builtin::registry(BuiltinConfig::new(&root)).unwrap())
        .authorizer(PolicyEngine::new(doc))
        .approver(sluice_kernel::authorize::ApproveAll)
        .build()
        .unwrap();
    for path in [
        "alias/keep.txt",
        "./alias/../alias/keep.txt",
        "protected/keep.txt",
    ] {
        let w = run_one(
            &k,
            "acme",
            "sluice.fs.write",
            json!({"path": path, "content": "changed"}),
        )
        .await;
        assert_eq!(w["status"], "denied", "{path}: {w}");
        assert_eq!(w["error"]["code"], "denied", "{path}: {w}");
    }
    assert_eq!(
        std::fs::read_to_string(root.join("protected/keep.txt")).unwrap(),
        "original"
    );
    // Elsewhere the alias writes as usual.
    let w = run_one(
        &k,
        "acme",
        "sluice.fs.write",
        json!({"path": "free.txt", "content": "ok"}),
    )
    .await;
    assert_eq!(w["status"], "ok", "{w}");
}

#[tokio::test]
async fn two_spellings_through_a_link_are_one_resource() {
    let dir = temp_dir("fs-spellings");
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("target.txt"), "").unwrap();
    symlink("target.txt", root.join("link.txt")).unwrap();
    let registry = builtin::registry(BuiltinConfig::new(&root)).unwrap();
    let write = |id: &str, path: &str| {
        Call::new(id, "sluice.fs.write", json!({"path": path, "content": id}))
    };
    let plan = planned(
        &registry,
        "acme",
        vec![
            write("w1", "target.txt"),
            write("w2", "link.txt"),
            Call::new("r", "sluice.fs.read", json!({"path": "link.txt"})),
        ],
    );
    let target = format!("fs:{}", root.join("target.txt").display());
    for i in 0..3 {
        assert_eq!(resources(&plan, i), vec![target.clone()]);
    }
    assert_eq!(plan.graph.predecessors(1), vec![0]);
    assert_eq!(plan.graph.predecessors(2), vec![1]);
    // The handler receives the one canonical path, and provenance would record the same.
    assert_eq!(
        plan.calls[1].call.input["path"],
        root.join("target.txt").to_string_lossy().as_ref()
    );

    // Run: the writes are ordered, the read sees the second.
    let k = kernel(BuiltinConfig::new(&root));
    let batch = Batch::new(
        "acme",
        vec![
            write("w1", "target.txt"),
            write("w2", "link.txt"),
            Call::new("r", "sluice.fs.read", json!({"path": "link.txt"})),
        ],
    )
    .unwrap();
    let out = k.run(batch).await.unwrap();
    assert_eq!(out.results[2].output.as_ref().unwrap()["content"], "w2");
    assert!(std::fs::symlink_metadata(root.join("link.txt"))
        .unwrap()
        .file_type()
        .is_symlink());
}

/// A directory swapped for a link to outside the root between the plan and the write: the
/// handler opens beneath the root's handle, so the OS refuses to follow it out.
#[tokio::test]
async fn a_link_swapped_in_after_the_check_cannot_escape() {
    let dir = temp_dir("fs-swap");
    let root = dir.join("root");
    let out = dir.join("out");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    let sub = root.join("sub");
    let outside = out.clone();
    // A tool that holds `fs:ROOT/sub/x.txt` and, while it runs, swaps `sub` for a link to
    // `out`: the fs write planned behind it (when `sub` was a directory) runs after.
    let swapper = support::tool(
        "test.swap",
        json!([{"kind": "writes", "resource": format!("fs:{}/sub/x.txt", root.display())}]),
        true,
        handler(move |_ctx: ToolContext, _input: Value| {
            let sub = sub.clone();
            let outside = outside.clone();
            async move {
                std::fs::rename(&sub, sub.with_extension("old")).unwrap();
                symlink(&outside, &sub).unwrap();
                Ok(json!({}))
            }
        }),
    );
    let mut registry = builtin::registry(BuiltinConfig::new(&root)).unwrap();
    registry.insert(swapper).unwrap();
    let k = Kernel::builder().tools(registry).build().unwrap();
    let batch = Batch::new(
        "acme",
        vec![
            Call::new("swap", "test.swap", json!({})),
            Call::new(
                "w",
                "sluice.fs.write",
                json!({"path": "sub/x.txt", "content": "escaped"}),
            ),
        ],
    )
    .unwrap();
    let out_batch = k.run(batch).await.unwrap();
    let w = sluice::report::result_json(&out_batch.results[1]);
    assert_eq!(out_batch.results[0].status.as_str(), "ok");
    assert_eq!(w["error"]["code"], "path-escapes-root", "{w}");
    assert!(!out.join("x.txt").exists());
}
