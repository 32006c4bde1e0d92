//! Two agents on one repository (issue 45, item 6): two MCP clients at once, each round editing
//! one shared file, a file of its own, and reading a third, against the real filesystem server.
//!
//! - Through `sluice serve --mcp-server` (the catalog's effects): no edit of the shared file is
//!   lost or interleaved, and the provenance log shows that only the edits of the shared file
//!   were ordered: the other calls waited for nothing.
//! - Straight at the server (each client with its own server process on the same directory, as
//!   two agents each configured with the server would be), in the same test run: an edit is lost.
//!
//! Each round starts both clients' calls together (a barrier), so that the edits of the shared
//! file meet. The shared file is large, so the server's read-edit-write takes long enough to
//! overlap another; a loss straight at the server is then as good as certain within the rounds
//! it is given, and one loss is all this asserts.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};
use support::{reference, temp_dir};
use tokio::sync::Barrier;

type Client = RunningService<RoleClient, ClientConfig>;

/// Lines of filler in the shared file.
const FILLER: usize = 20_000;

fn config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("sluice-two-agents", "1.0.0"),
    )
}

async fn through_gateway(base: &str) -> Client {
    let url = format!("{base}/mcp");
    let transport = StreamableHttpClientTransport::with_client(
        reqwest::Client::new(),
        StreamableHttpClientTransportConfig::with_uri(url.as_str()),
    );
    config().serve(transport).await.expect("the handshake")
}

async fn straight(root: &Path) -> Client {
    let cmd = reference::command(&reference::filesystem(&[root]));
    config()
        .serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .expect("the handshake")
}

fn shared_text(a: usize, b: usize) -> String {
    let mut s = format!("A: {a}\nB: {b}\n");
    for i in 0..FILLER {
        s.push_str(&format!("filler line {i} of the shared file\n"));
    }
    s
}

fn setup(root: &Path) {
    std::fs::create_dir_all(root).unwrap();
    std::fs::write(root.join("shared.txt"), shared_text(0, 0)).unwrap();
    for own in ["a.txt", "b.txt"] {
        std::fs::write(root.join(own), "n: 0\n").unwrap();
    }
    std::fs::write(root.join("c.txt"), "read me\n").unwrap();
}

async fn call(c: &Client, tool: &str, args: Value) -> CallToolResult {
    let Value::Object(args) = args else {
        unreachable!()
    };
    c.call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
        .await
        .expect("the request is answered")
}

fn edit(path: &str, old: String, new: String) -> Value {
    json!({"path": path, "edits": [{"oldText": old, "newText": new}]})
}

/// What one agent saw: how many edits of the shared file it was told succeeded, and the first
/// failure (an edit whose text was gone: a lost update).
#[derive(Debug, Default)]
struct Seen {
    shared_ok: usize,
    own_ok: usize,
    reads_ok: usize,
    failure: Option<String>,
}

/// Runs `rounds` rounds of one agent (`me` is `A` or `B`), tools named `prefix<tool>`; stops at
/// its first failed call.
async fn agent(
    c: Arc<Client>,
    me: &'static str,
    prefix: &'static str,
    root: String,
    rounds: usize,
    barrier: Arc<Barrier>,
) -> Seen {
    let own = format!("{root}/{}.txt", me.to_lowercase());
    let (edit_tool, read_tool) = (
        format!("{prefix}edit_file"),
        format!("{prefix}read_text_file"),
    );
    let mut seen = Seen::default();
    for i in 1..=rounds {
        barrier.wait().await;
        if seen.failure.is_some() {
            continue; // keep meeting the barrier so the other agent is not stranded
        }
        let shared = call(
            &c,
            &edit_tool,
            edit(
                &format!("{root}/shared.txt"),
                format!("{me}: {}\n", i - 1),
                format!("{me}: {i}\n"),
            ),
        );
        let mine = call(
            &c,
            &edit_tool,
            edit(&own, format!("n: {}\n", i - 1), format!("n: {i}\n")),
        );
        let read = call(&c, &read_tool, json!({"path": format!("{root}/c.txt")}));
        let (shared, mine, read) = tokio::join!(shared, mine, read);
        for (r, count) in [
            (&shared, &mut seen.shared_ok),
            (&mine, &mut seen.own_ok),
            (&read, &mut seen.reads_ok),
        ] {
            match r.is_error {
                Some(true) => {
                    seen.failure.get_or_insert_with(|| {
                        format!("round {i}: {}", serde_json::to_string(&r.content).unwrap())
                    });
                }
                _ => *count += 1,
            }
        }
    }
    seen
}

async fn two_agents(
    a: Client,
    b: Client,
    prefix: &'static str,
    root: &Path,
    rounds: usize,
) -> (Seen, Seen) {
    let (a, b) = (Arc::new(a), Arc::new(b));
    let barrier = Arc::new(Barrier::new(2));
    let root = std::fs::canonicalize(root).unwrap().display().to_string();
    let ta = tokio::spawn(agent(a, "A", prefix, root.clone(), rounds, barrier.clone()));
    let tb = tokio::spawn(agent(b, "B", prefix, root, rounds, barrier));
    (ta.await.unwrap(), tb.await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_lose_no_edit_through_sluice_and_do_straight_at_the_server() {
    let dir = temp_dir("two-agents");
    let rounds = 12;

    // Through Sluice.
    let through = dir.join("through");
    setup(&through);
    let log = dir.join("log.jsonl");
    let g = support::gateway::start(&[
        "--mcp-server",
        &format!("fs={}", reference::filesystem(&[&through])),
        "--provenance",
        log.to_str().unwrap(),
    ]);
    let (a, b) = (
        through_gateway(&g.base).await,
        through_gateway(&g.base).await,
    );
    let (sa, sb) = two_agents(a, b, "fs.", &through, rounds).await;
    for (who, s) in [("A", &sa), ("B", &sb)] {
        assert_eq!(s.failure, None, "{who} through Sluice");
        assert_eq!(
            (s.shared_ok, s.own_ok, s.reads_ok),
            (rounds, rounds, rounds),
            "{who}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(through.join("shared.txt")).unwrap(),
        shared_text(rounds, rounds),
        "every edit of the shared file is there, none interleaved"
    );
    for own in ["a.txt", "b.txt"] {
        assert_eq!(
            std::fs::read_to_string(through.join(own)).unwrap(),
            format!("n: {rounds}\n")
        );
    }
    support::gateway::terminate(&g);
    let mut g = g;
    g.child.wait().unwrap();
    check_only_shared_edits_were_ordered(&log, &through, rounds);

    // Straight at the server, in the same run: one server process per agent, one directory.
    let straight_dir = dir.join("straight");
    setup(&straight_dir);
    let (a, b) = (straight(&straight_dir).await, straight(&straight_dir).await);
    let (sa, sb) = two_agents(a, b, "", &straight_dir, 40).await;
    let text = std::fs::read_to_string(straight_dir.join("shared.txt")).unwrap();
    let value = |who: &str| -> usize {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{who}: ")))
            .unwrap_or_else(|| panic!("the line of {who} is gone: interleaved"));
        line[3..].parse().unwrap()
    };
    let lost = sa.shared_ok - value("A") + sb.shared_ok - value("B");
    let failed = sa.failure.is_some() || sb.failure.is_some();
    assert!(
        lost > 0 || failed,
        "straight at the server, two agents lose an edit of the shared file: {sa:?} {sb:?}"
    );
    println!("straight at the server: {lost} edit(s) told successful are gone; A {sa:?}; B {sb:?}");
}

/// The provenance log of the run through Sluice (an edge for each call that waited for another):
/// every edit of the shared file was recorded, and only they ever waited, and only for each
/// other; the edits of each agent's own file and the reads never waited.
fn check_only_shared_edits_were_ordered(log: &Path, root: &Path, rounds: usize) {
    let shared = format!(
        "fs:{}/shared.txt",
        std::fs::canonicalize(root).unwrap().display()
    );
    let mut calls: HashMap<(String, String), Vec<String>> = HashMap::new();
    let mut edges: Vec<(String, String, String, String)> = Vec::new();
    for line in std::fs::read_to_string(log).unwrap().lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        let r = &r["record"];
        match r["type"].as_str() {
            Some("call") => {
                let resources = r["accesses"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a["resource"].as_str().unwrap().to_owned())
                    .collect();
                calls.insert(
                    (
                        r["batch"].as_str().unwrap().to_owned(),
                        r["call"].as_str().unwrap().to_owned(),
                    ),
                    resources,
                );
            }
            Some("edge") => edges.push((
                r["from_batch"].as_str().unwrap().to_owned(),
                r["from"].as_str().unwrap().to_owned(),
                r["to_batch"].as_str().unwrap().to_owned(),
                r["to"].as_str().unwrap().to_owned(),
            )),
            _ => {}
        }
    }
    let on_shared = |k: &(String, String)| calls.get(k).is_some_and(|r| r.contains(&shared));
    let shared_calls = calls.keys().filter(|k| on_shared(k)).count();
    assert_eq!(
        shared_calls,
        2 * rounds,
        "every edit of the shared file was recorded"
    );
    for (fb, f, tb, t) in &edges {
        let (from, to) = ((fb.clone(), f.clone()), (tb.clone(), t.clone()));
        assert!(
            on_shared(&from) && on_shared(&to),
            "only edits of the shared file are ordered: {from:?} -> {to:?} ({:?} -> {:?})",
            calls.get(&from),
            calls.get(&to)
        );
    }
    println!(
        "through Sluice: {} of {} edits of the shared file waited for the other agent's",
        edges.len(),
        2 * rounds
    );
}
