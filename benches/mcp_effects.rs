#![allow(missing_docs)]
//! Effects for MCP servers (issue 45): the makespan of a realistic coding turn through the real
//! filesystem server (`@modelcontextprotocol/server-filesystem`, over stdio), by where its tools'
//! effects come from, in one run:
//!
//! - **catalog**: `sluice mcp import`'s default, the catalog's effects (files as `fs:` paths);
//! - **hints**: the same tools imported without the catalog (the behaviour before it): read-only
//!   tools read `<server>:*`, every other tool runs alone;
//! - **global lock**: one read/write lock on the whole filesystem (every read `reads fs:*`,
//!   every write `writes fs:*`);
//! - **serial**: the calls one after another (each its own batch).
//!
//! The turn, in the order a model writes it: edit `src/m0.rs`, read `src/m2.rs` and `lib/m3.rs`,
//! edit `lib/m1.rs`, read `src/m4.rs`, `lib/m5.rs` and `README.md`, search `vendor` for `*.toml`,
//! list `lib`. The repository: 8 modules of ~60 KB and a `vendor` tree of 200 files in 20
//! crates. Each configuration has its own server process; turns alternate between them, 30 each
//! after a warm-up; the median makespan and its ratio to the catalog's are reported.
//!
//! Run: `cargo bench --bench mcp_effects` (prints the figures).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice::kernel::model::McpEndpoint;
use sluice::kernel::run::Kernel;
use sluice::kernel::transport::mcp::{import_manifests, EffectsCatalog, ImportOptions};
use sluice::kernel::{Batch, Call, Status};

#[path = "../tests/support/mod.rs"]
mod support;

const TURNS: usize = 30;

fn repository(root: &Path) {
    for dir in ["src", "lib"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    for m in 0..8 {
        let dir = if m % 2 == 0 { "src" } else { "lib" };
        let mut text = "// rev 0\n".to_owned();
        for f in 0..1500 {
            text.push_str(&format!("pub fn f{f}(x: u64) -> u64 {{ x * {f} + {m} }}\n"));
        }
        std::fs::write(root.join(format!("{dir}/m{m}.rs")), text).unwrap();
    }
    std::fs::write(root.join("README.md"), "# repo\n".repeat(200)).unwrap();
    for d in 0..20 {
        let dir = root.join(format!("vendor/crate{d}/src"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            root.join(format!("vendor/crate{d}/Cargo.toml")),
            "[package]\n",
        )
        .unwrap();
        for f in 0..9 {
            std::fs::write(dir.join(format!("f{f}.rs")), "fn x() {}\n").unwrap();
        }
    }
}

/// The turn's calls; `rev` is the revision the two edited files are at.
fn turn(root: &str, rev: usize) -> Vec<(String, String, Value)> {
    let edit = |file: &str| {
        json!({"path": format!("{root}/{file}"),
               "edits": [{"oldText": format!("// rev {rev}\n"), "newText": format!("// rev {}\n", rev + 1)}]})
    };
    let read = |file: &str| json!({"path": format!("{root}/{file}")});
    vec![
        ("e0", "edit_file", edit("src/m0.rs")),
        ("r2", "read_text_file", read("src/m2.rs")),
        ("r3", "read_text_file", read("lib/m3.rs")),
        ("e1", "edit_file", edit("lib/m1.rs")),
        ("r4", "read_text_file", read("src/m4.rs")),
        ("r5", "read_text_file", read("lib/m5.rs")),
        ("rd", "read_text_file", read("README.md")),
        (
            "s",
            "search_files",
            json!({"path": format!("{root}/vendor"), "pattern": "*.toml"}),
        ),
        ("ls", "list_directory", read("lib")),
    ]
    .into_iter()
    .map(|(id, tool, input)| (id.to_owned(), format!("fs.{tool}"), input))
    .collect()
}

/// The catalog's manifests made one read/write lock on the filesystem.
fn global_lock(manifests: &[Value]) -> Vec<Value> {
    manifests
        .iter()
        .map(|m| {
            let mut m = m.clone();
            if let Some(Value::Array(effects)) = m.get_mut("effects") {
                for e in effects {
                    e["resource"] = json!("fs:*");
                }
            }
            m["metadata"].as_object_mut().unwrap().remove("sluice");
            m
        })
        .collect()
}

struct Config {
    name: &'static str,
    kernel: Kernel,
    serial: bool,
    makespans: Vec<Duration>,
}

async fn run_turn(c: &Config, calls: Vec<(String, String, Value)>) -> Duration {
    let start = Instant::now();
    let check = |r: &sluice::kernel::BatchResult| {
        for c in &r.results {
            assert_eq!(c.status, Status::Ok, "{c:?}");
        }
    };
    if c.serial {
        for (id, tool, input) in calls {
            let b = Batch::new("bench", vec![Call::new(id, tool, input)]).unwrap();
            check(&c.kernel.run(b).await.unwrap());
        }
    } else {
        let calls = calls
            .into_iter()
            .map(|(id, tool, input)| Call::new(id, tool, input))
            .collect();
        check(
            &c.kernel
                .run(Batch::new("bench", calls).unwrap())
                .await
                .unwrap(),
        );
    }
    start.elapsed()
}

type Client = rmcp::service::RunningService<rmcp::RoleClient, rmcp::model::ClientConfig>;

/// A client straight at its own server process, no Sluice: the server's own floor.
async fn straight(endpoint: &str) -> Client {
    use rmcp::ServiceExt;
    let cmd = support::reference::command(endpoint);
    rmcp::model::ClientConfig::new(
        rmcp::model::ClientCapabilities::default(),
        rmcp::model::Implementation::new("bench", "1.0.0"),
    )
    .serve(rmcp::transport::TokioChildProcess::new(cmd).unwrap())
    .await
    .unwrap()
}

/// The turn straight at the server: every call at once (`all_at_once`, as a runtime that runs a
/// turn's calls together does, edits racing) or one by one.
async fn straight_turn(
    c: &Client,
    calls: Vec<(String, String, Value)>,
    all_at_once: bool,
) -> Duration {
    let start = Instant::now();
    let one = |(_, tool, input): (String, String, Value)| async move {
        let Value::Object(args) = input else {
            unreachable!()
        };
        let name = tool.trim_start_matches("fs.").to_owned();
        let r = c
            .call_tool(rmcp::model::CallToolRequestParams::new(name).with_arguments(args))
            .await
            .unwrap();
        assert_ne!(r.is_error, Some(true), "{r:?}");
    };
    if all_at_once {
        futures::future::join_all(calls.into_iter().map(one)).await;
    } else {
        for call in calls {
            one(call).await;
        }
    }
    start.elapsed()
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let dir = support::temp_dir("bench-mcp-effects");
    let root = dir.join("repo");
    repository(&root);
    let root_text = std::fs::canonicalize(&root).unwrap().display().to_string();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let endpoint = McpEndpoint::parse(&support::reference::filesystem(&[&root])).unwrap();
        let options = ImportOptions::default().with_prefix("fs");
        let catalog = import_manifests(&endpoint, &options)
            .await
            .unwrap()
            .manifests;
        let hints = import_manifests(
            &endpoint,
            &options.clone().with_catalog(EffectsCatalog::empty()),
        )
        .await
        .unwrap()
        .manifests;
        let kernel = |manifests: &[Value]| {
            // Each kernel starts its own server process.
            Kernel::builder()
                .tools(support::reference::registry_of(manifests))
                .build()
                .unwrap()
        };
        let mut configs = vec![
            Config {
                name: "catalog",
                kernel: kernel(&catalog),
                serial: false,
                makespans: vec![],
            },
            Config {
                name: "hints (no catalog)",
                kernel: kernel(&hints),
                serial: false,
                makespans: vec![],
            },
            Config {
                name: "global read/write lock",
                kernel: kernel(&global_lock(&catalog)),
                serial: false,
                makespans: vec![],
            },
            Config {
                name: "serial",
                kernel: kernel(&catalog),
                serial: true,
                makespans: vec![],
            },
        ];
        let endpoint_text = support::reference::filesystem(&[&root]);
        let bare = straight(&endpoint_text).await;
        let (mut bare_at_once, mut bare_serial) = (Vec::new(), Vec::new());
        let mut rev = 0;
        for t in 0..TURNS + 3 {
            for c in &mut configs {
                let d = run_turn(c, turn(&root_text, rev)).await;
                rev += 1;
                if t >= 3 {
                    c.makespans.push(d);
                }
            }
            for (at_once, out) in [(true, &mut bare_at_once), (false, &mut bare_serial)] {
                let d = straight_turn(&bare, turn(&root_text, rev), at_once).await;
                rev += 1;
                if t >= 3 {
                    out.push(d);
                }
            }
        }
        let base = median(&mut configs[0].makespans.clone());
        println!("a coding turn through the filesystem server (9 calls), median of {TURNS}:");
        for c in &mut configs {
            let m = median(&mut c.makespans);
            println!(
                "  {:<24} {:>8.2} ms  {:>5.2}x the catalog's",
                c.name,
                m.as_secs_f64() * 1e3,
                m.as_secs_f64() / base.as_secs_f64()
            );
        }
        for (name, v) in [
            ("straight, all at once", &mut bare_at_once),
            ("straight, one by one", &mut bare_serial),
        ] {
            let m = median(v);
            println!(
                "  {:<24} {:>8.2} ms  {:>5.2}x the catalog's (no Sluice)",
                name,
                m.as_secs_f64() * 1e3,
                m.as_secs_f64() / base.as_secs_f64()
            );
        }
        bare.cancel().await.unwrap();
        for c in configs {
            c.kernel.shutdown().await.unwrap();
        }
    });
}
