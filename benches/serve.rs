#![allow(missing_docs)]
//! Gateway load (issue: `sluice serve`): 16 concurrent MCP sessions x 500 calls of a 1 ms tool
//! over streamable HTTP, through the gateway (the whole pipeline: authentication, the MCP
//! session, validation, accesses, the tenant's conflict domain, dispatch, metrics), against the
//! same tool served by a bare rmcp server, in the same run, on loopback. Reports errors,
//! throughput, p50 and p99 latency and their ratios; then checks the conflict order under load
//! with the handlers' own clocks (16 sessions writing 4 keys: no two calls of one key overlap);
//! then that the tenant's state returns to idle (calls in flight, conflict index, tenants held);
//! then the resident memory of a `sluice serve` process of its own, idle, after one load and
//! after eight (it must not grow with the loads).
//!
//! Run: `cargo bench --bench serve` (prints the figures; exits non-zero if an invariant fails).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    ContentBlock, Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Tool as McpTool,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{
    StreamableHttpClientTransport, StreamableHttpServerConfig, StreamableHttpService,
};
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Map, Value};
use sluice::kernel::model::{Manifest, ManifestSource};
use sluice::kernel::run::Kernel;
use sluice::kernel::transport::{handler, Tool, ToolContext};
use sluice::serve::{serve_http, Gateway, GatewayOptions};

const SESSIONS: usize = 16;
const CALLS: usize = 500;
const TOOL_MS: u64 = 1;

/// The bare server: one tool that sleeps 1 ms.
#[derive(Clone)]
struct Bare;

impl ServerHandler for Bare {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema: Map<String, Value> = serde_json::from_value(json!({"type": "object"})).unwrap();
        Ok(ListToolsResult::with_all_items(vec![McpTool::new(
            "bench.sleep",
            "sleeps 1 ms",
            Arc::new(schema),
        )]))
    }

    async fn call_tool(
        &self,
        _r: CallToolRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        tokio::time::sleep(Duration::from_millis(TOOL_MS)).await;
        let mut r = CallToolResult::success(vec![ContentBlock::text("{\"slept\":true}")]);
        r.structured_content = Some(json!({"slept": true}));
        Ok(r.into())
    }
}

async fn serve_bare() -> String {
    let service = StreamableHttpService::new(
        || Ok(Bare),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                break;
            };
            let _ = sock.set_nodelay(true);
            let svc = hyper_util::service::TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(sock), svc)
                    .await;
            });
        }
    });
    format!("http://{addr}/mcp")
}

/// When each call of a key ran, by the handler's own clock.
type Spans = Arc<Mutex<Vec<(String, Instant, Instant)>>>;

fn tool(manifest: Value, h: Arc<dyn sluice::kernel::transport::Handler>) -> Tool {
    let mut m = json!({"description": "bench", "version": "1.0.0",
                       "input": {"type": "object"}, "output": {}});
    for (k, v) in manifest.as_object().unwrap() {
        m[k] = v.clone();
    }
    Tool::new(
        Manifest::from_value(m).unwrap(),
        ManifestSource::built_in(),
        Some(h),
    )
    .unwrap()
}

async fn serve_gateway(spans: Spans) -> (String, Arc<Gateway>) {
    let sleep = tool(
        json!({"id": "bench.sleep", "mutating": false}),
        handler(|_c: ToolContext, _i: Value| async move {
            tokio::time::sleep(Duration::from_millis(TOOL_MS)).await;
            Ok(json!({"slept": true}))
        }),
    );
    let write = tool(
        json!({"id": "bench.write", "mutating": true,
               "effects": [{"kind": "writes", "resource": "bench:{key}"}]}),
        handler(move |_c: ToolContext, input: Value| {
            let spans = spans.clone();
            async move {
                let start = Instant::now();
                tokio::time::sleep(Duration::from_millis(TOOL_MS)).await;
                let key = input["key"].as_str().unwrap_or("").to_owned();
                spans.lock().unwrap().push((key, start, Instant::now()));
                Ok(json!({"written": true}))
            }
        }),
    );
    let kernel = Kernel::builder().tool(sleep).tool(write).build().unwrap();
    let gateway = Arc::new(Gateway::new(kernel, GatewayOptions::default()).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let g = gateway.clone();
    tokio::spawn(async move { serve_http(g, listener, std::future::pending()).await });
    (format!("http://{addr}/mcp"), gateway)
}

async fn client(url: &str) -> RunningService<RoleClient, ClientConfig> {
    let config = StreamableHttpClientTransportConfig::with_uri(url);
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("sluice-bench", "1.0.0"),
    )
    .serve(transport)
    .await
    .unwrap()
}

struct Load {
    errors: usize,
    latencies: Vec<Duration>,
    wall: Duration,
}

impl Load {
    fn pct(&self, p: f64) -> f64 {
        let i = ((self.latencies.len() as f64 - 1.0) * p).round() as usize;
        self.latencies[i].as_secs_f64() * 1000.0
    }
    fn throughput(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64()
    }
}

/// `SESSIONS` sessions, each making `CALLS` calls one after another; `args(session, i)` names
/// the tool and its arguments.
async fn load(
    url: &str,
    args: impl Fn(usize, usize) -> (&'static str, Value) + Copy + Send + 'static,
) -> Load {
    let mut clients = Vec::new();
    for _ in 0..SESSIONS {
        clients.push(client(url).await);
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (s, c) in clients.iter().enumerate() {
        let peer = c.peer().clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(CALLS);
            let mut errors = 0;
            for i in 0..CALLS {
                let (name, a) = args(s, i);
                let p = CallToolRequestParams::new(name)
                    .with_arguments(a.as_object().cloned().unwrap_or_default());
                let t = Instant::now();
                match peer.call_tool(p).await {
                    Ok(r) if r.is_error != Some(true) => {}
                    _ => errors += 1,
                }
                lat.push(t.elapsed());
            }
            (lat, errors)
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await.unwrap();
        latencies.extend(l);
        errors += e;
    }
    let wall = start.elapsed();
    for c in clients {
        let _ = c.cancel().await;
    }
    latencies.sort();
    Load {
        errors,
        latencies,
        wall,
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` would pass nothing we need.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let spans: Spans = Arc::default();
        let bare_url = serve_bare().await;
        let (gw_url, gateway) = serve_gateway(spans.clone()).await;

        // Warm both up, then measure each twice, interleaved, keeping the better run of each.
        let sleep = |_s: usize, _i: usize| ("bench.sleep", json!({}));
        let _ = load(&bare_url, sleep).await;
        let _ = load(&gw_url, sleep).await;
        let mut bare = load(&bare_url, sleep).await;
        let mut gw = load(&gw_url, sleep).await;
        let bare2 = load(&bare_url, sleep).await;
        let gw2 = load(&gw_url, sleep).await;
        if bare2.pct(0.5) < bare.pct(0.5) {
            bare = bare2;
        }
        if gw2.pct(0.5) < gw.pct(0.5) {
            gw = gw2;
        }
        println!(
            "{SESSIONS} sessions x {CALLS} calls of a {TOOL_MS} ms tool over streamable HTTP, loopback"
        );
        for (name, l) in [("bare rmcp server", &bare), ("sluice serve", &gw)] {
            println!(
                "  {name:17} errors {:>3}  throughput {:>7.0} calls/s  p50 {:>6.2} ms  p99 {:>6.2} ms",
                l.errors,
                l.throughput(),
                l.pct(0.5),
                l.pct(0.99)
            );
        }
        println!(
            "  ratio (gateway / bare): p50 {:.2}x (goal <= 1.2x), p99 {:.2}x (goal <= 1.5x), throughput {:.2}x",
            gw.pct(0.5) / bare.pct(0.5),
            gw.pct(0.99) / bare.pct(0.99),
            gw.throughput() / bare.throughput()
        );
        assert_eq!(gw.errors, 0, "the gateway answered every call");

        // The conflict order under load: 16 sessions write 4 keys; calls of one key never overlap.
        let write = |s: usize, i: usize| ("bench.write", json!({"key": format!("k{}", (s + i) % 4)}));
        let conflicting = load(&gw_url, write).await;
        let mut spans = spans.lock().unwrap().clone();
        spans.sort_by_key(|(k, s, _)| (k.clone(), *s));
        let overlaps = spans
            .windows(2)
            .filter(|w| w[0].0 == w[1].0 && w[1].1 < w[0].2)
            .count();
        println!(
            "  conflicting writes: {} calls on 4 keys, errors {}, overlaps of one key {} (must be 0), throughput {:.0} calls/s",
            spans.len(),
            conflicting.errors,
            overlaps,
            conflicting.throughput()
        );
        assert_eq!(overlaps, 0, "two writes of one key overlapped");

        // Back to idle: nothing in flight, the conflict index empty, no tenant held.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let load_after = gateway.kernel().tenant_load("default");
        println!(
            "  after the load: calls in flight / conflict index {:?}, tenants held {}",
            load_after,
            gateway.kernel().tenants_held(),
        );
        assert_eq!(load_after, (0, 0));
        assert_eq!(gateway.kernel().tenants_held(), 0);

        process_memory().await;
    });
}

/// The memory of a `sluice serve` process of its own (this process also holds the clients and
/// the bare server): resident memory when idle after start, after one load and after seven more,
/// and its own gauge of calls in flight. The kernel's state empties after each load (above); the
/// process's memory must not grow with the number of loads.
async fn process_memory() {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sluice serve starts");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_owned();
    let url = format!("{base}/mcp");
    let pid = child.id();
    let settle = || tokio::time::sleep(Duration::from_secs(2));
    settle().await;
    let fresh = rss_kib(pid);
    let sleep = |_s: usize, _i: usize| ("sluice.sleep", json!({"ms": TOOL_MS}));
    let first = load(&url, sleep).await;
    settle().await;
    let after_one = rss_kib(pid);
    let mut errors = first.errors;
    let mut series = vec![after_one];
    for _ in 0..7 {
        errors += load(&url, sleep).await.errors;
        settle().await;
        series.push(rss_kib(pid));
    }
    let after_eight = rss_kib(pid);
    let metrics = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let in_flight = metrics
        .lines()
        .find(|l| l.starts_with("sluice_calls_in_flight{"))
        .unwrap_or("sluice_calls_in_flight (none)")
        .to_owned();
    let _ = child.kill();
    let _ = child.wait();
    println!(
        "  a `sluice serve` process: RSS idle {fresh} KiB, after 1 load {after_one} KiB, after 8 loads {after_eight} KiB ({:+.1}% from 1 to 8 loads; after each: {series:?}); {in_flight}; errors {errors}",
        (after_eight as f64 / after_one as f64 - 1.0) * 100.0
    );
    assert_eq!(errors, 0);
    assert!(in_flight.ends_with(" 0"), "{in_flight}");
}
