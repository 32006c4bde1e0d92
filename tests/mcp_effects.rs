//! Effects for the MCP servers people run (issue 45, docs/mcp-effects.md), against the real
//! reference servers from their registries: the catalog applies to each, paths resolve as the
//! filesystem server resolves them, git tools name their repository, a changed schema is not
//! trusted, overlays give or replace effects and are checked, and effects travel on through
//! `sluice serve`'s `tools/list` to an importer that trusts it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::collections::BTreeSet;
use std::os::unix::fs::symlink;
use std::path::Path;

use serde_json::{json, Value};
use sluice_kernel::access::Normalizers;
use sluice_kernel::model::McpEndpoint;
use sluice_kernel::order::Plan;
use sluice_kernel::transport::mcp::{
    import_manifests, EffectsCatalog, EffectsFile, ImportOptions, Imported,
};
use sluice_kernel::transport::ToolRegistry;
use sluice_kernel::{Batch, Call, Kernel};
use support::reference;
use support::{sluice, temp_dir};

async fn import(endpoint: &str, options: ImportOptions) -> Imported {
    let endpoint = McpEndpoint::parse(endpoint).unwrap();
    import_manifests(&endpoint, &options)
        .await
        .unwrap_or_else(|e| panic!("the import succeeds: {e}"))
}

fn registry(imported: &Imported) -> ToolRegistry {
    reference::registry_of(&imported.manifests)
}

/// The plan of `calls` (`(id, tool, input)`).
fn plan(r: &ToolRegistry, calls: &[(&str, &str, Value)]) -> Plan {
    let calls = calls
        .iter()
        .map(|(id, tool, input)| Call::new(*id, *tool, input.clone()))
        .collect();
    let plan = Plan::new(r, &Normalizers::default(), Batch::new("t", calls).unwrap());
    for c in &plan.calls {
        assert!(c.rejection.is_none(), "{}: {:?}", c.call.id, c.rejection);
    }
    plan
}

/// The accesses of call `i`, as `kind resource` texts.
fn accesses(plan: &Plan, i: usize) -> Vec<String> {
    plan.calls[i]
        .accesses
        .iter()
        .map(|a| format!("{} {}", a.kind.as_str(), a.resource))
        .collect()
}

fn conflicts(plan: &Plan, a: usize, b: usize) -> bool {
    plan.graph.predecessors(b).contains(&a)
}

fn real(p: &Path) -> String {
    std::fs::canonicalize(p).unwrap().display().to_string()
}

fn tool_names(imported: &Imported) -> BTreeSet<String> {
    imported
        .manifests
        .iter()
        .map(|m| m["metadata"]["mcpTool"].as_str().unwrap().to_owned())
        .collect()
}

/// Every entry of the catalog, against the real server it was written for: the server lists
/// exactly the tools the entry names, each entry's guard accepts the server's schema, and every
/// tool gets the catalog's effects, with no warning.
#[tokio::test]
async fn the_catalog_applies_to_every_reference_server() {
    let dir = temp_dir("effects-catalog");
    let memory_file = dir.join("memory.jsonl");
    let servers = [
        ("secure-filesystem-server", reference::filesystem(&[&dir])),
        ("memory-server", reference::memory(&memory_file)),
        ("mcp-git", reference::python("mcp_server_git")),
        ("mcp-fetch", reference::python("mcp_server_fetch")),
        ("mcp-servers/everything", reference::everything()),
    ];
    let catalog = EffectsCatalog::builtin();
    assert_eq!(catalog.servers().len(), servers.len());
    for (name, endpoint) in servers {
        let imported = import(&endpoint, ImportOptions::default()).await;
        assert_eq!(imported.server.0, name);
        assert!(
            imported.warnings.is_empty(),
            "{name}: {:?}",
            imported.warnings
        );
        let entry = catalog.server(name).expect("the catalog has the server");
        let listed = tool_names(&imported);
        let written: BTreeSet<String> = entry.tools.keys().cloned().collect();
        assert_eq!(
            listed, written,
            "{name}: the catalog names the server's tools"
        );
        for m in &imported.manifests {
            assert_eq!(
                m["metadata"]["sluice"]["effects"],
                json!(entry.origin),
                "{name}: {m}"
            );
            let report = sluice_kernel::model::validate(m, Default::default());
            assert!(report.is_valid(), "{name}: {:?}", report.errors);
        }
        // Every manifest registers (its path rules read).
        registry(&imported);
    }
}

/// Paths resolve as the filesystem server resolves them: relative to its allowed directory, `.`
/// and `..` resolved, links followed; what the server then writes is the file the resource names.
#[tokio::test]
async fn filesystem_paths_name_the_file_the_server_touches() {
    let dir = temp_dir("effects-fs-paths");
    let root = dir.join("repo");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::create_dir_all(root.join("docs")).unwrap();
    symlink(root.join("src"), root.join("alias")).unwrap();
    let endpoint = reference::filesystem(&[&root]);
    let imported = import(&endpoint, ImportOptions::default().with_prefix("fs")).await;
    let r = registry(&imported);
    let real_root = real(&root);
    let p = plan(
        &r,
        &[
            (
                "rel",
                "fs.write_file",
                json!({"path": "src/a.rs", "content": "1"}),
            ),
            (
                "abs",
                "fs.read_text_file",
                json!({"path": format!("{}/src/./a.rs", root.display())}),
            ),
            (
                "dots",
                "fs.read_text_file",
                json!({"path": "docs/../src/a.rs"}),
            ),
            ("link", "fs.read_text_file", json!({"path": "alias/a.rs"})),
            ("other", "fs.read_text_file", json!({"path": "docs/b.md"})),
        ],
    );
    let a = format!("reads fs:{real_root}/src/a.rs");
    assert_eq!(
        accesses(&p, 0),
        vec![format!("writes fs:{real_root}/src/a.rs")]
    );
    for i in 1..=3 {
        assert_eq!(accesses(&p, i), vec![a.clone()], "{}", p.call_id(i));
        assert!(conflicts(&p, 0, i), "{} waits for the write", p.call_id(i));
    }
    assert!(!conflicts(&p, 0, 4), "another file does not wait");

    // The server agrees: a write through the link and relative to the root lands in that file.
    let k = Kernel::builder().tools(r).build().unwrap();
    let batch = Batch::new(
        "t",
        vec![
            Call::new(
                "w",
                "fs.write_file",
                json!({"path": "alias/a.rs", "content": "fn main() {}"}),
            ),
            Call::new("r", "fs.read_text_file", json!({"path": "src/a.rs"})),
        ],
    )
    .unwrap();
    let out = k.run(batch).await.unwrap();
    for c in &out.results {
        assert_eq!(c.status, sluice_kernel::Status::Ok, "{c:?}");
    }
    assert_eq!(
        std::fs::read_to_string(root.join("src/a.rs")).unwrap(),
        "fn main() {}"
    );
    k.shutdown().await.unwrap();
}

/// Arrays give one access per element; a move writes both ends; a listing reads the directory's
/// entries, so it waits for a write inside the directory and not for one elsewhere.
#[tokio::test]
async fn arrays_moves_and_listings_name_what_they_touch() {
    let dir = temp_dir("effects-fs-shapes");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let imported = import(
        &reference::filesystem(&[&dir]),
        ImportOptions::default().with_prefix("fs"),
    )
    .await;
    let r = registry(&imported);
    let d = real(&dir);
    let p = plan(
        &r,
        &[
            (
                "many",
                "fs.read_multiple_files",
                json!({"paths": ["src/a.rs", "src/b.rs"]}),
            ),
            (
                "mv",
                "fs.move_file",
                json!({"source": "src/a.rs", "destination": "old/a.rs"}),
            ),
            ("ls", "fs.list_directory", json!({"path": "src"})),
            (
                "w-in",
                "fs.write_file",
                json!({"path": "src/c.rs", "content": ""}),
            ),
            (
                "w-out",
                "fs.write_file",
                json!({"path": "README.md", "content": ""}),
            ),
            ("ls-old", "fs.list_directory", json!({"path": "old"})),
        ],
    );
    assert_eq!(
        accesses(&p, 0),
        vec![
            format!("reads fs:{d}/src/a.rs"),
            format!("reads fs:{d}/src/b.rs")
        ]
    );
    let mv = accesses(&p, 1);
    assert!(mv.contains(&format!("writes fs:{d}/src/a.rs")), "{mv:?}");
    assert!(mv.contains(&format!("writes fs:{d}/old/a.rs")), "{mv:?}");
    assert!(
        conflicts(&p, 0, 1),
        "the move waits for the read of its source"
    );
    assert!(
        conflicts(&p, 1, 2),
        "the listing of src waits for the move out of it"
    );
    assert!(
        conflicts(&p, 2, 3),
        "a write inside src waits for its listing"
    );
    assert!(!conflicts(&p, 2, 4), "a write elsewhere does not");
    assert!(
        conflicts(&p, 1, 5),
        "the listing of old waits for the move into it"
    );
    assert!(!conflicts(&p, 3, 5), "and not for a write in src");
}

fn git(repo: &Path, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .status()
        .expect("these tests need git");
    assert!(ok.success(), "git {args:?}");
}

/// Git tools read or write the repository they name, and so meet the filesystem server's
/// writes inside it: one resource space for both servers.
#[tokio::test]
async fn git_tools_name_their_repository() {
    let dir = temp_dir("effects-git");
    let (a, b) = (dir.join("a"), dir.join("b"));
    for repo in [&a, &b] {
        std::fs::create_dir_all(repo).unwrap();
        git(repo, &["init", "-q"]);
        std::fs::write(repo.join("f.txt"), "1\n").unwrap();
    }
    let git_tools = import(
        &reference::python("mcp_server_git"),
        ImportOptions::default(),
    )
    .await;
    let fs_tools = import(
        &reference::filesystem(&[&dir]),
        ImportOptions::default().with_prefix("fs"),
    )
    .await;
    let r = reference::registry_of(&[git_tools.manifests.clone(), fs_tools.manifests].concat());
    let (sa, sb) = (a.display().to_string(), b.display().to_string());
    let p = plan(
        &r,
        &[
            (
                "add-a",
                "mcp-git.git_add",
                json!({"repo_path": sa, "files": ["f.txt"]}),
            ),
            ("status-b", "mcp-git.git_status", json!({"repo_path": sb})),
            (
                "commit-a",
                "mcp-git.git_commit",
                json!({"repo_path": sa, "message": "m"}),
            ),
            (
                "edit-b",
                "fs.write_file",
                json!({"path": "b/f.txt", "content": "2\n"}),
            ),
            ("log-a", "mcp-git.git_log", json!({"repo_path": sa})),
        ],
    );
    assert!(
        conflicts(&p, 0, 2),
        "a commit waits for the add in its repository"
    );
    assert!(!conflicts(&p, 0, 1), "another repository does not wait");
    assert!(conflicts(&p, 1, 3), "a write in b waits for b's status");
    assert!(
        !conflicts(&p, 0, 3) && !conflicts(&p, 2, 3),
        "and not for a's git"
    );
    assert!(conflicts(&p, 2, 4), "the log waits for the commit");

    // And the real server runs them.
    let k = Kernel::builder()
        .tools(registry(&git_tools))
        .build()
        .unwrap();
    let batch = Batch::new(
        "t",
        vec![
            Call::new(
                "add",
                "mcp-git.git_add",
                json!({"repo_path": sa, "files": ["f.txt"]}),
            ),
            Call::new("status", "mcp-git.git_status", json!({"repo_path": sa})),
        ],
    )
    .unwrap();
    let out = k.run(batch).await.unwrap();
    for c in &out.results {
        assert_eq!(c.status, sluice_kernel::Status::Ok, "{c:?}");
    }
    let status = out.results[1].output.as_ref().unwrap().to_string();
    assert!(status.contains("f.txt"), "{status}");
    k.shutdown().await.unwrap();
}

/// The memory server's graph is one resource: a read in the batch after a write waits for it
/// and sees what it wrote; fetch reads the URL it names.
#[tokio::test]
async fn the_memory_graph_is_one_resource_and_fetch_names_its_url() {
    let dir = temp_dir("effects-memory");
    let imported = import(
        &reference::memory(&dir.join("graph.jsonl")),
        ImportOptions::default().with_prefix("mem"),
    )
    .await;
    let r = registry(&imported);
    let entity = json!({"entities": [{"name": "Ada", "entityType": "person", "observations": ["wrote notes"]}]});
    let p = plan(
        &r,
        &[
            ("create", "mem.create_entities", entity.clone()),
            ("read", "mem.read_graph", json!({})),
            ("search", "mem.search_nodes", json!({"query": "Ada"})),
        ],
    );
    assert!(conflicts(&p, 0, 1) && conflicts(&p, 0, 2));
    assert!(!conflicts(&p, 1, 2), "two reads do not wait for each other");
    let k = Kernel::builder().tools(r).build().unwrap();
    let batch = Batch::new(
        "t",
        vec![
            Call::new("create", "mem.create_entities", entity),
            Call::new("read", "mem.read_graph", json!({})),
        ],
    )
    .unwrap();
    let out = k.run(batch).await.unwrap();
    let read = out.results[1].output.as_ref().unwrap().to_string();
    assert!(read.contains("Ada"), "{read}");
    k.shutdown().await.unwrap();

    let fetch = import(
        &reference::python("mcp_server_fetch"),
        ImportOptions::default(),
    )
    .await;
    let p = plan(
        &registry(&fetch),
        &[(
            "f",
            "mcp-fetch.fetch",
            json!({"url": "https://example.com/a?b=*"}),
        )],
    );
    assert_eq!(
        accesses(&p, 0),
        vec!["network net:https://example.com/a\\?b=\\*".to_owned()]
    );
    assert!(p.calls[0].is_read_only());
}

/// A catalog entry whose guard no longer matches the server's schema is not applied: a warning
/// names the tool, and it falls back to its hints (a write tool runs alone).
#[tokio::test]
async fn an_entry_for_another_schema_is_not_applied() {
    let dir = temp_dir("effects-guard");
    let mut entry = EffectsCatalog::builtin()
        .server("secure-filesystem-server")
        .unwrap()
        .clone();
    entry
        .tools
        .get_mut("write_file")
        .unwrap()
        .input
        .as_mut()
        .unwrap()
        .remove("content");
    let options = ImportOptions::default()
        .with_prefix("fs")
        .with_catalog(EffectsCatalog::from_servers(vec![entry]));
    let imported = import(&reference::filesystem(&[&dir]), options).await;
    assert_eq!(imported.warnings.len(), 1, "{:?}", imported.warnings);
    let w = &imported.warnings[0];
    assert!(
        w.contains("`write_file`") && w.contains("`content` is new"),
        "{w}"
    );
    let m = imported
        .manifests
        .iter()
        .find(|m| m["metadata"]["mcpTool"] == "write_file")
        .unwrap();
    assert_eq!(m["mutating"], true);
    assert!(m.get("effects").is_none(), "{m}");
    assert!(m["metadata"].get("sluice").is_none(), "{m}");
}

/// An overlay gives or replaces a tool's effects over the catalog's; one naming a tool the
/// server lacks is an error naming it.
#[tokio::test]
async fn overlays_replace_effects_and_name_a_missing_tool() {
    let dir = temp_dir("effects-overlay");
    let endpoint = reference::filesystem(&[&dir]);
    let overlay = EffectsFile::from_value(
        json!({"server": "secure-filesystem-server", "tools": {
            "write_file": {"paths": ["path"], "effects": [
                {"kind": "writes", "resource": "fs:{path}"},
                {"kind": "emits-event", "resource": "events:fs-changed"}]}}}),
        "ours.json",
    )
    .unwrap();
    let imported = import(
        &endpoint,
        ImportOptions::default()
            .with_prefix("fs")
            .with_overlay(overlay),
    )
    .await;
    let m = imported
        .manifests
        .iter()
        .find(|m| m["metadata"]["mcpTool"] == "write_file")
        .unwrap();
    assert_eq!(m["metadata"]["sluice"]["effects"], "overlay:ours.json");
    assert_eq!(m["effects"][1]["resource"], "events:fs-changed");
    let p = plan(
        &registry(&imported),
        &[("w", "fs.write_file", json!({"path": "x", "content": ""}))],
    );
    assert_eq!(
        accesses(&p, 0),
        vec![
            format!("writes fs:{}/x", real(&dir)),
            "emits-event events:fs-changed".to_owned()
        ]
    );

    let wrong = EffectsFile::from_value(
        json!({"server": "secure-filesystem-server", "tools": {
            "write_files": {"effects": [{"kind": "writes", "resource": "fs:*"}]}}}),
        "typo.json",
    )
    .unwrap();
    let e = import_manifests(
        &McpEndpoint::parse(&endpoint).unwrap(),
        &ImportOptions::default().with_overlay(wrong),
    )
    .await
    .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("typo.json") && text.contains("`write_files`"),
        "{text}"
    );
    assert!(
        text.contains("write_file)"),
        "the server's tools are listed: {text}"
    );
}

/// The CLI: `mcp import --effects` (TOML too) applies an overlay and reports where each tool's
/// effects came from; a bad overlay is exit 1 naming the tool; `validate --effects` checks an
/// overlay against the imported manifests.
#[test]
fn the_cli_applies_and_checks_overlays() {
    let dir = temp_dir("effects-cli");
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    let endpoint = reference::filesystem(&[&root]);
    let overlay = dir.join("effects.toml");
    std::fs::write(
        &overlay,
        r#"server = "secure-filesystem-server"
[tools.create_directory]
paths = ["path"]
effects = [{ kind = "writes", resource = "fs:{path}" }, { kind = "writes", resource = "fs:{path}/*" }]
"#,
    )
    .unwrap();
    let out = dir.join("tools");
    let o = overlay.display().to_string();
    let run = sluice(
        &[
            "mcp",
            "import",
            &endpoint,
            "--prefix",
            "fs",
            "--out",
            out.to_str().unwrap(),
            "--effects",
            &o,
        ],
        None,
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let summary = run.json();
    let from = |id: &str| {
        summary["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id)
            .unwrap()["effects_from"]
            .clone()
    };
    assert_eq!(from("fs.create_directory"), json!(format!("overlay:{o}")));
    assert_eq!(from("fs.write_file"), "catalog:filesystem");
    let written: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("fs.create_directory.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(written["effects"][1]["resource"], "fs:{path}/*");

    // validate: the overlay against the manifests imported from its server.
    let ok = sluice(
        &["validate", "--effects", &o, out.to_str().unwrap()],
        None,
        None,
    );
    assert_eq!(ok.code, 0, "{}{}", ok.stdout, ok.stderr);
    let bad = dir.join("bad.json");
    std::fs::write(
        &bad,
        json!({"server": "secure-filesystem-server", "tools": {"delete_file": {"effects": []}}})
            .to_string(),
    )
    .unwrap();
    let b = bad.display().to_string();
    let v = sluice(
        &["validate", "--effects", &b, out.to_str().unwrap()],
        None,
        None,
    );
    assert_eq!(v.code, 1, "{}", v.stdout);
    assert!(
        v.stdout.contains("/tools/delete_file") && v.stdout.contains("no tool `delete_file`"),
        "{}",
        v.stdout
    );
    let i = sluice(&["mcp", "import", &endpoint, "--effects", &b], None, None);
    assert_eq!(i.code, 1, "{}", i.stderr);
    assert!(
        i.stderr.contains("`delete_file`") && i.stderr.contains(&b),
        "{}",
        i.stderr
    );
    // A misspelt server would apply to nothing: an error naming it and the server there is.
    std::fs::write(&bad, r#"{"server": "filesystem", "tools": {}}"#).unwrap();
    let i = sluice(&["mcp", "import", &endpoint, "--effects", &b], None, None);
    assert_eq!(i.code, 1, "{}", i.stderr);
    assert!(
        i.stderr.contains("`filesystem`") && i.stderr.contains("`secure-filesystem-server`"),
        "{}",
        i.stderr
    );
    // Not an overlay at all: where and why.
    std::fs::write(
        &bad,
        r#"{"server": "s", "tools": {"t": {"effects": [{"kind": "reads", "resource": "a:{"}]}}}"#,
    )
    .unwrap();
    let v = sluice(&["validate", "--effects", &b], None, None);
    assert_eq!(v.code, 1, "{}", v.stdout);
    assert!(
        v.stdout.contains("/tools/t/effects/0/resource"),
        "{}",
        v.stdout
    );
    // --no-catalog: today's default, the hints alone.
    let hints = sluice(&["mcp", "import", &endpoint, "--no-catalog"], None, None);
    assert_eq!(hints.code, 0, "{}", hints.stderr);
    let write = hints
        .json()
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metadata"]["mcpTool"] == "write_file")
        .cloned()
        .unwrap();
    assert!(write.get("effects").is_none(), "{write}");
}

/// `sluice serve --mcp-server` adopts a server's tools with the catalog; its `tools/list`
/// carries each tool's effects in `_meta`; importing from it uses them only when trusted.
#[test]
fn effects_travel_on_to_an_importer_that_trusts_them() {
    let dir = temp_dir("effects-meta");
    let endpoint = reference::filesystem(&[&dir]);
    let g = support::gateway::start(&["--mcp-server", &format!("fs={endpoint}")]);
    let url = format!("mcp+http://{}/mcp", g.base.trim_start_matches("http://"));
    let untrusted = sluice(&["mcp", "import", &url, "--prefix", "up"], None, None);
    assert_eq!(untrusted.code, 0, "{}", untrusted.stderr);
    assert!(
        untrusted.stderr.contains("not marked trusted"),
        "{}",
        untrusted.stderr
    );
    let find = |all: &Value, tool: &str| {
        all.as_array()
            .unwrap()
            .iter()
            .find(|m| m["metadata"]["mcpTool"] == tool)
            .cloned()
            .unwrap_or_else(|| panic!("{tool} in {all}"))
    };
    let w = find(&untrusted.json(), "fs.write_file");
    assert!(
        !w.to_string().contains("fs:"),
        "untrusted: the hints only: {w}"
    );
    assert_eq!(w["mutating"], true, "{w}");

    let trusted = sluice(
        &["mcp", "import", &url, "--prefix", "up", "--trust-effects"],
        None,
        None,
    );
    assert_eq!(trusted.code, 0, "{}", trusted.stderr);
    let all = trusted.json();
    let w = find(&all, "fs.write_file");
    assert_eq!(w["metadata"]["sluice"]["effects"], "published");
    assert_eq!(
        w["effects"],
        json!([{"kind": "writes", "resource": "fs:{path}"}])
    );
    assert_eq!(
        w["metadata"]["sluice"]["paths"]["roots"],
        json!([real(&dir)])
    );
    // The MCP annotations stay derived from the effects.
    let ls = find(&all, "fs.list_directory");
    assert_eq!(ls["mutating"], false);
    assert_eq!(ls["metadata"]["mcpAnnotations"]["readOnlyHint"], true);
}

/// `--mcp-server` and its companions say what is wrong: exit 2 for a usage error, 1 for a server
/// that cannot be reached at start, each naming the flag or the server.
#[test]
fn the_mcp_server_flag_says_what_is_wrong() {
    let dir = temp_dir("effects-flags");
    let batch = dir.join("batch.json");
    std::fs::write(&batch, r#"{"tenant": "t", "calls": []}"#).unwrap();
    let b = batch.to_str().unwrap();
    let fs = reference::filesystem(&[&dir]);
    let overlay = dir.join("o.json");
    std::fs::write(
        &overlay,
        r#"{"server": "secure-filesystem-server", "tools": {}}"#,
    )
    .unwrap();
    let o = overlay.to_str().unwrap();
    let cases: Vec<(Vec<String>, i32, &str)> = vec![
        (
            vec!["--mcp-server".into(), "no-equals".into()],
            2,
            "expected NAME=URI",
        ),
        (vec!["--mcp-server".into(), format!("a.b={fs}")], 2, "`a.b`"),
        (
            vec![
                "--mcp-server".into(),
                format!("fs={fs}"),
                "--mcp-server".into(),
                format!("fs={fs}"),
            ],
            2,
            "`fs` is given twice",
        ),
        (
            vec![
                "--mcp-server".into(),
                format!("fs={fs}"),
                "--trust-effects".into(),
                "up".into(),
            ],
            2,
            "--trust-effects `up` names no --mcp-server",
        ),
        (
            vec!["--effects".into(), o.into()],
            2,
            "name the server with --mcp-server",
        ),
        (
            vec!["--mcp-server".into(), "fs=ftp://x".into()],
            2,
            "not usable",
        ),
        (
            vec![
                "--mcp-server".into(),
                "gone=mcp+stdio:///nonexistent/server-binary".into(),
            ],
            1,
            "/nonexistent/server-binary",
        ),
    ];
    for (extra, code, says) in cases {
        let mut args = vec!["run", "--batch", b];
        args.extend(extra.iter().map(String::as_str));
        let r = sluice(&args, None, None);
        assert_eq!(r.code, code, "{extra:?}: {}", r.stderr);
        assert!(r.stderr.contains(says), "{extra:?}: {}", r.stderr);
    }
    // And one that works: run adopts the server's tools and carries a call out.
    std::fs::write(
        &batch,
        json!({"tenant": "t", "calls": [
            {"id": "w", "tool": "fs.write_file", "input": {"path": "n.txt", "content": "hi"}},
            {"id": "r", "tool": "fs.read_text_file", "input": {"path": "n.txt"}}]})
        .to_string(),
    )
    .unwrap();
    let r = sluice(
        &[
            "run",
            "--batch",
            b,
            "--mcp-server",
            &format!("fs={fs}"),
            "--effects",
            o,
        ],
        None,
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let out = r.json();
    assert_eq!(out["results"][1]["output"]["content"], "hi", "{out}");
}
