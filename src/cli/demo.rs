//! `sluice demo`: one coding agent's turn run three ways — serially, behind one global
//! read/write lock, and with Sluice — under one policy, with the same results; then through the
//! gateway (`sluice serve`): the turn as an OpenAI answer posted to the batch API, and two MCP
//! sessions editing one file at once.
//!
//! The turn's tools are real (they read, search and edit files in a scratch workspace, keep
//! memory in the kv store, and call an HTTP service the demo starts on loopback) with latencies
//! like an agent's tools have: file reads 40 ms, edits 60 ms, a search 120 ms, memory 50 ms, the
//! service 80 ms.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice::kernel::authorize::{ApprovalOutcome, ApprovalRequest, Authorizer};
use sluice::kernel::builtin::{self, BuiltinConfig, KvStore};
use sluice::kernel::model::{Manifest, ManifestSource};
use sluice::kernel::run::Kernel;
use sluice::kernel::transport::{handler, Tool, ToolContext, ToolError};
use sluice::kernel::{Batch, BatchResult, Call, CallResult, Status};
use sluice::policy::{PolicyDocument, PolicyEngine};
use sluice::provenance::{read_records, verify_file, Durability, ProvenanceLog};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::run::to_text;
use sluice::serve::{serve_http, Gateway, GatewayOptions};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The folder the demo writes into (default: a new folder under the system's temp dir).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// The turn, as the model emitted it.
fn turn() -> Vec<Call> {
    let c = |id: &str, tool: &str, input: Value| Call::new(id, tool, input);
    vec![
        c(
            "read-parser",
            "demo.read_file",
            json!({"path": "src/parser.rs"}),
        ),
        c(
            "read-main",
            "demo.read_file",
            json!({"path": "src/main.rs"}),
        ),
        c("search-todo", "demo.search", json!({"query": "TODO"})),
        c("fetch-issue", "demo.fetch_issue", json!({"id": 42})),
        c(
            "edit-parser-1",
            "demo.edit_file",
            json!({"path": "src/parser.rs", "find": "todo!()", "replace": "parse_expr(input)"}),
        ),
        c(
            "recall",
            "sluice.kv.get",
            json!({"key": "memory/facts", "delay_ms": 50}),
        ),
        c(
            "edit-parser-2",
            "demo.edit_file",
            json!({"path": "src/parser.rs", "find": "// TODO: errors", "replace": "// errors are reported by parse_expr"}),
        ),
        c(
            "edit-lexer",
            "demo.edit_file",
            json!({"path": "src/lexer.rs", "find": "// TODO", "replace": "// tokens carry spans"}),
        ),
        c(
            "remember",
            "sluice.kv.put",
            json!({"key": "memory/facts", "value": "the parser delegates to parse_expr", "delay_ms": 50}),
        ),
        c(
            "drop-cache",
            "sluice.kv.delete",
            json!({"key": "memory/cache"}),
        ),
        c(
            "update-readme",
            "demo.edit_file",
            json!({"path": "README.md", "find": "WIP", "replace": "Parser done (issue 42)"}),
        ),
        c(
            "reread-parser",
            "demo.read_file",
            json!({"path": "src/parser.rs"}),
        ),
    ]
}

fn policy(root: &Path) -> anyhow::Result<PolicyDocument> {
    let r = root.display();
    Ok(PolicyDocument::from_value(&json!({"tenants": {"demo": {
        "default": "deny",
        "rules": [
            {"id": "read-workspace", "decision": "allow", "effects": ["reads"], "resource": format!("fs:{r}/*")},
            {"id": "edit-sources", "decision": "allow", "effects": ["writes"], "resource": format!("fs:{r}/src/*")},
            {"id": "readme-needs-review", "decision": "ask", "effects": ["writes"], "resource": format!("fs:{r}/README.md")},
            {"id": "docs-writes", "decision": "allow", "effects": ["writes"], "resource": format!("fs:{r}/README.md")},
            {"id": "memory", "decision": "allow", "effects": ["reads", "writes"], "resource": "kv:memory/*"},
            {"id": "no-deletes", "decision": "deny", "effects": ["deletes"]},
            {"id": "issue-tracker", "decision": "allow", "effects": ["network"], "resource": "net:127.0.0.1"}
        ]
    }}}))?)
}

/// The workspace the agent edits.
fn workspace(dir: &Path) -> anyhow::Result<PathBuf> {
    let root = dir.join("workspace");
    std::fs::create_dir_all(root.join("src"))?;
    std::fs::write(
        root.join("src/main.rs"),
        "mod lexer;\nmod parser;\nfn main() { parser::parse(\"1+2\"); }\n",
    )?;
    std::fs::write(
        root.join("src/parser.rs"),
        "// TODO: errors\npub fn parse(input: &str) { todo!() }\n",
    )?;
    std::fs::write(root.join("src/lexer.rs"), "// TODO\npub struct Token;\n")?;
    std::fs::write(root.join("README.md"), "# calc\nStatus: WIP\n")?;
    Ok(std::fs::canonicalize(root)?)
}

/// A tiny issue tracker on loopback: `GET /issues/<id>` answers after 80 ms.
async fn issue_tracker() -> anyhow::Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = sock.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(buf.get(..n).unwrap_or_default());
                let id = req
                    .split_whitespace()
                    .nth(1)
                    .and_then(|p| p.strip_prefix("/issues/"))
                    .unwrap_or("0")
                    .to_owned();
                tokio::time::sleep(Duration::from_millis(80)).await;
                let body = json!({"id": id, "title": "Parser panics on `1+2`", "state": "open"})
                    .to_string();
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(resp.as_bytes()).await;
            });
        }
    });
    Ok(addr)
}

fn manifest(v: Value) -> anyhow::Result<Manifest> {
    Ok(Manifest::from_value(v)?)
}

/// The demo's tools: real work on the workspace, with an agent tool's latency.
fn tools(root: &Path, tracker: std::net::SocketAddr, kv: KvStore) -> anyhow::Result<Vec<Tool>> {
    let root = Arc::new(root.to_owned());
    let abs = {
        let root = root.clone();
        move |v: &Value| -> Value {
            let mut v = v.clone();
            if let Some(p) = v.get("path").and_then(Value::as_str) {
                let absolute =
                    json!(builtin::lexical_absolute(&root, Path::new(p)).to_string_lossy());
                if let Some(o) = v.as_object_mut() {
                    o.insert("path".into(), absolute);
                }
            }
            v
        }
    };
    let path_schema = json!({"type": "object", "required": ["path"],
        "properties": {"path": {"type": "string"}, "find": {"type": "string"}, "replace": {"type": "string"}}});
    let r = root.clone();
    let read = Tool::new(
        manifest(json!({"id": "demo.read_file", "version": "1.0.0", "description": "Read a file of the workspace.",
            "input": path_schema, "output": {"type": "object"}, "mutating": false,
            "effects": [{"kind": "reads", "resource": "fs:{path}"}]}))?,
        ManifestSource::built_in(),
        Some(handler(move |_c: ToolContext, input: Value| {
            let r = r.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(40)).await;
                let p = r.join(input.get("path").and_then(Value::as_str).unwrap_or(""));
                let content = tokio::fs::read_to_string(&p).await
                    .map_err(|e| ToolError::new("io", e.to_string()))?;
                Ok(json!({"path": input.get("path").cloned().unwrap_or_default(), "content": content}))
            }
        })),
    )?
    .with_access_input(abs.clone());
    let r = root.clone();
    let edit = Tool::new(
        manifest(json!({"id": "demo.edit_file", "version": "1.0.0", "description": "Replace text in a file of the workspace.",
            "input": path_schema, "output": {"type": "object"}, "mutating": true,
            "effects": [{"kind": "reads", "resource": "fs:{path}"}, {"kind": "writes", "resource": "fs:{path}"}]}))?,
        ManifestSource::built_in(),
        Some(handler(move |_c: ToolContext, input: Value| {
            let r = r.clone();
            async move {
                let p = r.join(input.get("path").and_then(Value::as_str).unwrap_or(""));
                let before = tokio::fs::read_to_string(&p).await
                    .map_err(|e| ToolError::new("io", e.to_string()))?;
                tokio::time::sleep(Duration::from_millis(60)).await;
                let find = input.get("find").and_then(Value::as_str).unwrap_or("");
                if !before.contains(find) {
                    return Err(ToolError::new("not-found", format!("`{find}` is not in the file")));
                }
                let after = before.replacen(find, input.get("replace").and_then(Value::as_str).unwrap_or(""), 1);
                tokio::fs::write(&p, &after).await.map_err(|e| ToolError::new("io", e.to_string()))?;
                Ok(json!({"path": input.get("path").cloned().unwrap_or_default(), "bytes": after.len()}))
            }
        })),
    )?
    .with_access_input(abs);
    let r = root.clone();
    let search = Tool::new(
        manifest(
            json!({"id": "demo.search", "version": "1.0.0", "description": "Find the lines holding a word, in every file of the workspace.",
            "input": {"type": "object", "required": ["query"], "properties": {"query": {"type": "string"}}},
            "output": {"type": "object"}, "mutating": false,
            "effects": [{"kind": "reads", "resource": format!("fs:{}/*", root.display())}]}),
        )?,
        ManifestSource::built_in(),
        Some(handler(move |_c: ToolContext, input: Value| {
            let r = r.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(120)).await;
                let q = input
                    .get("query")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                let mut hits = Vec::new();
                for rel in ["README.md", "src/lexer.rs", "src/main.rs", "src/parser.rs"] {
                    let text = tokio::fs::read_to_string(r.join(rel))
                        .await
                        .unwrap_or_default();
                    for (n, line) in text.lines().enumerate() {
                        if line.contains(&q) {
                            hits.push(format!("{rel}:{}: {line}", n + 1));
                        }
                    }
                }
                Ok(json!({"query": q, "hits": hits}))
            }
        })),
    )?;
    let fetch = Tool::new(
        manifest(
            json!({"id": "demo.fetch_issue", "version": "1.0.0", "description": "Fetch an issue from the tracker.",
            "input": {"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}}},
            "output": {"type": "object"}, "mutating": false,
            "effects": [{"kind": "network", "resource": "net:127.0.0.1"}],
            "network": {"kind": "allowlist", "hosts": ["127.0.0.1"]},
            "spec": {"kind": "http", "method": "GET", "urlTemplate": format!("http://{tracker}/issues/{{id}}")}}),
        )?,
        ManifestSource::built_in(),
        None,
    )?;
    let mut out = vec![read, edit, search, fetch];
    out.extend(
        builtin::tools(BuiltinConfig::new((*root).clone()).with_kv(kv))?
            .into_iter()
            .filter(|t| t.id().starts_with("sluice.kv")),
    );
    Ok(out)
}

/// How one of the three runs orders the calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    Serial,
    GlobalLock,
    Sluice,
}

struct Outcome {
    result: BatchResult,
    files: Vec<(String, String)>,
    kv: Vec<(String, Value)>,
}

async fn run_way(out: &Path, way: Way, tracker: std::net::SocketAddr) -> anyhow::Result<Outcome> {
    let name = match way {
        Way::Serial => "serial",
        Way::GlobalLock => "global-lock",
        Way::Sluice => "sluice",
    };
    let dir = out.join(name);
    let root = workspace(&dir)?;
    let kv = KvStore::new();
    let log_path = out.join("provenance.jsonl");
    let log = if way == Way::Sluice {
        let _ = std::fs::remove_file(&log_path);
        Some(Arc::new(ProvenanceLog::open(
            &log_path,
            Durability::Durable,
        )?))
    } else {
        None
    };
    let kernel = demo_kernel(&root, tracker, &kv, log.clone())?;
    let result = match way {
        Way::Sluice => kernel.run(Batch::new("demo", turn())?).await?,
        _ => baseline(&kernel, way == Way::GlobalLock).await?,
    };
    if let Some(l) = log {
        l.flush().await.map_err(|e| anyhow::anyhow!(e))?;
    }
    Ok(Outcome {
        result,
        files: files(&root)?,
        kv: kv.tenant("demo").snapshot(),
    })
}

/// The workspace's files after a run.
fn files(root: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let mut files = Vec::new();
    for rel in ["README.md", "src/lexer.rs", "src/main.rs", "src/parser.rs"] {
        files.push((rel.to_owned(), std::fs::read_to_string(root.join(rel))?));
    }
    Ok(files)
}

/// The kernel every way runs on: the demo's tools in `root`, memory in `kv` (with a stale cache
/// entry), the policy (with the earlier session's first-use approvals), an automatic reviewer,
/// and the provenance log when there is one.
fn demo_kernel(
    root: &Path,
    tracker: std::net::SocketAddr,
    kv: &KvStore,
    log: Option<Arc<ProvenanceLog>>,
) -> anyhow::Result<Kernel> {
    kv.tenant("demo").put("memory/cache", json!("stale"));
    let engine = Arc::new(PolicyEngine::new(policy(root)?));
    // Approved in an earlier session: first uses of these tools do not ask again.
    for t in ["demo.edit_file", "sluice.kv.put", "sluice.kv.delete"] {
        engine.remember_approval("demo", t);
    }
    let mut b = Kernel::builder()
        .authorizer_arc(engine)
        .approver(|_r: ApprovalRequest| async {
            Ok(ApprovalOutcome::Approved {
                by: "demo-reviewer (automatic)".into(),
            })
        });
    for t in tools(root, tracker, kv.clone())? {
        b = b.tool(t);
    }
    if let Some(l) = log {
        b = b.provenance_arc(l);
    }
    Ok(b.build()?)
}

/// Serially, or behind one fair read/write lock taken in submission order (read-only tools share
/// it, every other tool holds it alone): each call runs through the same kernel and policy.
async fn baseline(kernel: &Kernel, rw_lock: bool) -> anyhow::Result<BatchResult> {
    let lock = Arc::new(tokio::sync::RwLock::new(()));
    let start = Instant::now();
    let mut tasks = Vec::new();
    let mut results: Vec<CallResult> = Vec::new();
    for call in turn() {
        let read_only = kernel
            .tools()
            .get(&call.tool)
            .is_some_and(|t| t.access_plan().is_read_only());
        let k = kernel.clone();
        let one = move |call: Call| async move {
            let t0 = start.elapsed();
            let mut r = k.run(Batch::new("demo", vec![call])?).await?;
            let mut c = r.results.remove(0);
            c.started = c.started.map(|s| s + t0);
            c.ended = c.ended.map(|e| e + t0);
            anyhow::Ok(c)
        };
        if !rw_lock {
            results.push(one(call).await?);
        } else if read_only {
            let guard = lock.clone().read_owned().await;
            tasks.push(tokio::spawn(async move {
                let r = one(call).await;
                drop(guard);
                r
            }));
        } else {
            let guard = lock.clone().write_owned().await;
            tasks.push(tokio::spawn(async move {
                let r = one(call).await;
                drop(guard);
                r
            }));
        }
    }
    for t in tasks {
        results.push(t.await??);
    }
    let makespan = results
        .iter()
        .filter_map(|r| r.ended)
        .max()
        .unwrap_or_default();
    Ok(BatchResult {
        batch_id: "baseline".into(),
        tenant: "demo".into(),
        results,
        makespan,
    })
}

/// The turn through the gateway, and two clients editing one file at once.
struct GatewayRun {
    /// Each call's status, by id, from `/v1/run`.
    statuses: Vec<(String, String)>,
    files: Vec<(String, String)>,
    kv: Vec<(String, Value)>,
    /// What the client whose edit had to wait was told, if one had to.
    progress: Vec<String>,
    /// Whether the file the two sessions edited holds both edits.
    both_edits: bool,
}

/// Records the progress notifications a demo MCP client receives.
#[derive(Clone, Default)]
struct ProgressLog(Arc<std::sync::Mutex<Vec<String>>>);

impl rmcp::ClientHandler for ProgressLog {
    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _ctx: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        if let (Some(m), Ok(mut seen)) = (params.message, self.0.lock()) {
            seen.push(m);
        }
    }
}

/// `sluice serve` in process on loopback, in front of the same tools and policy: the turn as
/// one OpenAI ChatCompletion posted to `/v1/run`, then two MCP sessions editing one file at once.
async fn through_gateway(out: &Path, tracker: std::net::SocketAddr) -> anyhow::Result<GatewayRun> {
    use rmcp::ServiceExt;
    let root = workspace(&out.join("gateway"))?;
    let kv = KvStore::new();
    let kernel = demo_kernel(&root, tracker, &kv, None)?;
    let gateway = Arc::new(Gateway::new(
        kernel,
        GatewayOptions::default().with_default_tenant("demo"),
    )?);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(serve_http(
        gateway.clone(),
        listener,
        stop.clone().cancelled_owned(),
    ));

    // The model's answer, as OpenAI's API returns it.
    let tool_calls: Vec<Value> = turn()
        .iter()
        .map(|c| {
            json!({"id": c.id, "type": "function", "function": {
                "name": gateway.names().name(&c.tool), "arguments": c.input.to_string()}})
        })
        .collect();
    let completion = json!({"id": "chatcmpl-demo", "object": "chat.completion", "choices": [{
        "index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": null, "tool_calls": tool_calls}}]});
    let ran: Value = reqwest::Client::new()
        .post(format!("{base}/v1/run?batch-format=openai"))
        .header("content-type", "application/json")
        .body(completion.to_string())
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let statuses = ran
        .get("results")
        .and_then(Value::as_array)
        .map(|rs| {
            rs.iter()
                .map(|r| {
                    let field = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
                    (field("id"), field("status"))
                })
                .collect()
        })
        .unwrap_or_default();
    let (files_after, kv_after) = (files(&root)?, kv.tenant("demo").snapshot());

    // Two sessions edit src/main.rs at once: the second waits for the first, and says so.
    let url = format!("{base}/mcp");
    let connect = |log: ProgressLog| {
        let url = url.clone();
        async move {
            let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url);
            log.serve(transport).await
        }
    };
    let (one, two) = (ProgressLog::default(), ProgressLog::default());
    let a = connect(one.clone()).await?;
    let b = connect(two.clone()).await?;
    let edit = |find: &str, replace: &str| {
        rmcp::model::CallToolRequestParams::new("demo.edit_file").with_arguments(
            json!({"path": "src/main.rs", "find": find, "replace": replace})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        )
    };
    let (ra, rb) = tokio::join!(
        a.call_tool(edit("mod lexer;", "mod lexer; // tokens")),
        b.call_tool(edit("fn main()", "pub fn main()"))
    );
    let (ra, rb) = (ra?, rb?);
    let main = std::fs::read_to_string(root.join("src/main.rs"))?;
    let both_edits = ra.is_error != Some(true)
        && rb.is_error != Some(true)
        && main.contains("mod lexer; // tokens")
        && main.contains("pub fn main()");
    let mut progress: Vec<String> = Vec::new();
    for log in [&one, &two] {
        if let Ok(seen) = log.0.lock() {
            if seen.iter().any(|m| m.starts_with("waiting")) {
                progress.extend(seen.iter().cloned());
            }
        }
    }
    let _ = a.cancel().await;
    let _ = b.cancel().await;
    stop.cancel();
    server.await??;
    Ok(GatewayRun {
        statuses,
        files: files_after,
        kv: kv_after,
        progress,
        both_edits,
    })
}

fn comparable(o: &Outcome) -> Value {
    json!({
        "results": o.result.results.iter().map(|r| json!({"id": r.id, "status": r.status,
            "output": r.output, "error": r.error.as_ref().map(|e| &e.code)})).collect::<Vec<_>>(),
        "files": o.files, "kv": o.kv,
    })
}

/// An SVG with one lane per way and one bar per call.
fn svg(ways: &[(&str, &BatchResult)]) -> String {
    let span = ways
        .iter()
        .map(|(_, r)| r.makespan.as_secs_f64())
        .fold(0.001, f64::max);
    let (left, width, row, gap) = (150.0, 760.0, 14.0, 36.0);
    let rows = ways.first().map_or(0, |(_, r)| r.results.len()) as f64;
    let lane = rows * row + gap;
    let height = lane * ways.len() as f64 + 30.0;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{height}" font-family="monospace" font-size="10">"#,
        w = left + width + 20.0
    );
    let _ = write!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (k, (name, r)) in ways.iter().enumerate() {
        let top = 20.0 + k as f64 * lane;
        let _ = write!(
            s,
            r#"<text x="4" y="{}" font-weight="bold">{name}: {:.0} ms</text>"#,
            top - 4.0,
            r.makespan.as_secs_f64() * 1e3
        );
        for (i, c) in r.results.iter().enumerate() {
            let y = top + i as f64 * row;
            let _ = write!(s, r#"<text x="4" y="{}">{}</text>"#, y + 10.0, c.id);
            if let (Some(a), Some(b)) = (c.started, c.ended) {
                let x = left + a.as_secs_f64() / span * width;
                let w = ((b - a).as_secs_f64() / span * width).max(2.0);
                let color = match c.status {
                    Status::Ok => "#3b82f6",
                    _ => "#ef4444",
                };
                let _ = write!(
                    s,
                    r##"<rect x="{x:.1}" y="{:.1}" width="{w:.1}" height="{:.1}" fill="{color}"/>"##,
                    y + 2.0,
                    row - 3.0
                );
            } else {
                let _ = write!(
                    s,
                    r##"<text x="{left}" y="{}" fill="#ef4444">{} (never ran)</text>"##,
                    y + 10.0,
                    c.status
                );
            }
        }
    }
    s.push_str("</svg>\n");
    s
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let out = args.out.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("sluice-demo-{}", std::process::id()))
    });
    std::fs::create_dir_all(&out)?;
    let out = std::fs::canonicalize(&out)?;
    let rt = tokio::runtime::Runtime::new()?;
    let tracker = rt.block_on(issue_tracker())?;
    outln!(
        "One coding agent's turn: {} tool calls, run three ways under one policy.",
        turn().len()
    );
    outln!(
        "(The demo's tools do real file, memory and HTTP work, with an agent tool's latencies.)\n"
    );
    let serial = rt.block_on(run_way(&out, Way::Serial, tracker))?;
    outln!(
        "1. Serially, one call at a time:\n{}",
        to_text(&serial.result)
    );
    let locked = rt.block_on(run_way(&out, Way::GlobalLock, tracker))?;
    outln!(
        "2. Behind one global read/write lock (read-only tools together, every other alone):\n{}",
        to_text(&locked.result)
    );
    let sluice = rt.block_on(run_way(&out, Way::Sluice, tracker))?;
    outln!(
        "3. With Sluice (calls that conflict in order, the rest at once):\n{}",
        to_text(&sluice.result)
    );

    let same =
        comparable(&serial) == comparable(&sluice) && comparable(&locked) == comparable(&sluice);
    let gateway = rt.block_on(through_gateway(&out, tracker))?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    outln!(
        "Results, files and memory identical in all three runs: {}",
        if same { "yes" } else { "NO" }
    );
    outln!(
        "Makespan: serial {:.0} ms, global lock {:.0} ms, Sluice {:.0} ms: Sluice is {:.1}x faster than serial and {:.1}x faster than the lock.\n",
        ms(serial.result.makespan), ms(locked.result.makespan), ms(sluice.result.makespan),
        ms(serial.result.makespan) / ms(sluice.result.makespan),
        ms(locked.result.makespan) / ms(sluice.result.makespan)
    );
    outln!(
        "Decisions (policy: deny unless a rule allows; deletes denied; README edits need review):"
    );
    for r in &sluice.result.results {
        let a = r
            .authorization
            .as_ref()
            .map(|a| format!("{} by {}", a.decision, a.by))
            .unwrap_or_else(|| "-".into());
        let who = r
            .approver
            .as_ref()
            .map(|w| format!(", approved by {w}"))
            .unwrap_or_default();
        outln!("  {:<14} {:<9} {a}{who}", r.id, r.status.as_str());
    }
    let log_path = out.join("provenance.jsonl");
    let verified = verify_file(&log_path)
        .map_err(|e| anyhow::anyhow!("the provenance log does not verify: {e}"))?;
    let records = read_records(&log_path)
        .map_err(|e| anyhow::anyhow!("the provenance log does not verify: {e}"))?;
    outln!("\nProvenance edges (who waited for whom, and why):");
    for rec in &records {
        if let sluice::kernel::provenance::Record::Edge(e) = rec {
            outln!(
                "  {:<14} -> {:<14} {:<18} {}{}",
                e.from,
                e.to,
                e.kind,
                e.resource,
                if e.causal { "  (causal)" } else { "" }
            );
        }
    }
    let statuses: Vec<(String, String)> = sluice
        .result
        .results
        .iter()
        .map(|r| (r.id.clone(), r.status.as_str().to_owned()))
        .collect();
    let gateway_same =
        gateway.statuses == statuses && gateway.files == sluice.files && gateway.kv == sluice.kv;
    outln!("\n4. Through the gateway (`sluice serve`, here in process on loopback):");
    outln!(
        "  The turn as the OpenAI ChatCompletion the model sent, POSTed to /v1/run?batch-format=openai:"
    );
    outln!(
        "  {} results; statuses, files and memory identical to run 3: {}.",
        gateway.statuses.len(),
        if gateway_same { "yes" } else { "NO" }
    );
    outln!("  Two MCP sessions edit src/main.rs at once (tools/call each):");
    match gateway.progress.iter().find(|m| m.starts_with("waiting")) {
        Some(m) => outln!("  the second was told, while it waited: \"{m}\""),
        None => outln!("  (neither had to wait: the first was done before the second arrived)"),
    }
    outln!(
        "  both edits kept: {}",
        if gateway.both_edits { "yes" } else { "NO" }
    );
    outln!(
        "  Put it in front of your MCP client: `sluice serve --tools DIR`, then point the client \
         at http://127.0.0.1:7878/mcp (README)."
    );
    let same = same && gateway_same && gateway.both_edits;
    let svg_path = out.join("timeline.svg");
    std::fs::write(
        &svg_path,
        svg(&[
            ("serial", &serial.result),
            ("global lock", &locked.result),
            ("sluice", &sluice.result),
        ]),
    )?;
    outln!(
        "\nWrote {} (verified: {} records, head {}) and {}.",
        log_path.display(),
        verified.records,
        &verified.head[..16],
        svg_path.display()
    );
    Ok(if same {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
