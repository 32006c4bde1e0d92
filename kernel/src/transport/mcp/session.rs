//! Sessions: one per MCP endpoint, initialized once, shared by every call to it.
//!
//! An [`Endpoint`] holds what the tools on it ask of their server (gathered when the kernel is
//! built) and its current session. A call takes the session with a short lock that is never
//! held across the call itself (MCP servers take concurrent requests); only starting a session
//! waits on a second lock, so that concurrent first calls start one server, not many.
//!
//! A session ends when its server goes away (it exited, the connection broke, or the
//! memory watcher, [`super::memory`], killed it); the next call starts a new one.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{Peer, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::error::ErrorCode;
use crate::model::{Manifest, McpEndpoint, Sandbox};
use crate::transport::egress::{self, EgressOptions};
use crate::transport::handler::ToolError;

use super::death::Death;
use super::wire::call_error;
use super::{memory, sse};

/// How the kernel runs its MCP sessions.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct McpOptions {
    /// How long starting a server and the MCP handshake may take (default 60 s: an `npx -y`
    /// command line may install its package first).
    pub connect_timeout: Duration,
    /// How often a stdio server's resident memory is read when a tool on it declares
    /// `limits.memMB` (default 200 ms).
    pub memory_poll: Duration,
    /// The most requests a streamable HTTP session keeps in flight at once (default 64).
    pub http_max_in_flight: usize,
    /// How servers over HTTP and SSE are reached: the same egress checks as HTTP tools (metadata
    /// addresses refused, no redirects, no proxy unless opted in).
    pub egress: EgressOptions,
}

impl McpOptions {
    /// These options with this connect timeout.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// These options with this memory poll interval.
    pub fn with_memory_poll(mut self, every: Duration) -> Self {
        self.memory_poll = every;
        self
    }

    /// These options with this many requests in flight per HTTP session.
    pub fn with_http_max_in_flight(mut self, n: usize) -> Self {
        self.http_max_in_flight = n;
        self
    }

    /// These options with these egress options for servers over HTTP and SSE.
    pub fn with_egress(mut self, egress: EgressOptions) -> Self {
        self.egress = egress;
        self
    }

    /// The egress-checked client, once the endpoint's URL is judged.
    fn client_for(&self, url: &str) -> Result<reqwest::Client, String> {
        egress::judge(url, None, self.egress.allow_metadata)
            .map_err(|why| format!("the endpoint `{url}` is refused: {why}"))?;
        egress::client(self.egress)
    }
}

impl Default for McpOptions {
    fn default() -> Self {
        McpOptions {
            connect_timeout: Duration::from_secs(60),
            memory_poll: Duration::from_millis(200),
            http_max_in_flight: 64,
            egress: EgressOptions::default(),
        }
    }
}

/// What the tools on one endpoint ask of its server.
#[derive(Debug, Clone)]
struct EndpointConfig {
    endpoint: McpEndpoint,
    /// Some tool on it runs under `sandbox: strict`: the server's environment holds only `env`.
    strict: bool,
    /// Every `needsSpec.env` name declared by a tool on the endpoint, with the value the embedder
    /// supplied, else its `default`: set in the server's environment (under `strict`, all of it).
    env: BTreeMap<String, String>,
    /// The largest `limits.memMB` declared by a tool on the endpoint.
    mem_cap_mb: Option<u64>,
}

/// The MCP endpoints of a kernel and their sessions. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct McpSessions {
    endpoints: Arc<BTreeMap<String, Arc<Endpoint>>>,
}

/// What an endpoint's session is doing, for operators and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointStatus {
    /// The endpoint as written in the manifests.
    pub endpoint: String,
    /// Sessions started so far (a restart counts one more).
    pub starts: u64,
    /// Whether a live session is open now.
    pub live: bool,
    /// The server's process id (stdio endpoints with a live session).
    pub pid: Option<u32>,
    /// The memory cap the kernel enforces on the server, in MiB.
    pub mem_cap_mb: Option<u64>,
}

impl McpSessions {
    /// Gathers the endpoints of `manifests` (each carried out over MCP). `env` holds the
    /// environment values the embedder supplied for `needsSpec.env`.
    pub(crate) fn new<'a>(
        manifests: impl IntoIterator<Item = &'a Manifest>,
        env: &std::collections::HashMap<String, String>,
        options: &McpOptions,
    ) -> Self {
        let mut configs: BTreeMap<String, EndpointConfig> = BTreeMap::new();
        for m in manifests {
            let Some(endpoint) = &m.mcp_endpoint else {
                continue;
            };
            let c = configs
                .entry(endpoint.as_str().to_owned())
                .or_insert_with(|| EndpointConfig {
                    endpoint: endpoint.clone(),
                    strict: false,
                    env: BTreeMap::new(),
                    mem_cap_mb: None,
                });
            c.strict |= m.sandbox == Some(Sandbox::Strict);
            for (name, schema) in m.needs_spec.iter().flat_map(|n| n.env.iter().flatten()) {
                let value = env
                    .get(name)
                    .cloned()
                    .or_else(|| match schema.get("default") {
                        Some(Value::String(d)) => Some(d.clone()),
                        _ => None,
                    });
                if let Some(v) = value {
                    c.env.insert(name.clone(), v);
                }
            }
            if let Some(l) = m.limits {
                let mb = l.mem_mb.get();
                c.mem_cap_mb = Some(c.mem_cap_mb.map_or(mb, |cap| cap.max(mb)));
            }
        }
        let endpoints = configs
            .into_iter()
            .map(|(raw, config)| {
                let mut e = Endpoint::standalone(config.endpoint.clone(), options.clone());
                e.config = config;
                (raw, Arc::new(e))
            })
            .collect();
        McpSessions {
            endpoints: Arc::new(endpoints),
        }
    }

    /// The endpoint a tool names, when it is one of these.
    pub(crate) fn endpoint(&self, manifest: &Manifest) -> Option<Arc<Endpoint>> {
        self.endpoints
            .get(manifest.mcp_endpoint.as_ref()?.as_str())
            .cloned()
    }

    /// The status of every endpoint, in endpoint order.
    pub fn status(&self) -> Vec<EndpointStatus> {
        self.endpoints.values().map(|e| e.status()).collect()
    }

    /// Whether there is no endpoint at all.
    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }
}

/// One MCP endpoint: its configuration and its current session.
pub struct Endpoint {
    raw: Arc<str>,
    config: EndpointConfig,
    options: McpOptions,
    /// The current session; locked only to read or replace the pointer.
    current: Mutex<Option<Arc<Session>>>,
    /// Held while a session starts, so that concurrent first calls start one.
    starting: Arc<tokio::sync::Mutex<()>>,
    starts: AtomicU64,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("endpoint", &&*self.raw)
            .field("strict", &self.config.strict)
            .field("mem_cap_mb", &self.config.mem_cap_mb)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// An endpoint on its own (no tool asks anything of it), as `sluice mcp import` uses.
    pub fn standalone(endpoint: McpEndpoint, options: McpOptions) -> Self {
        Endpoint {
            raw: endpoint.as_str().into(),
            config: EndpointConfig {
                endpoint,
                strict: false,
                env: BTreeMap::new(),
                mem_cap_mb: None,
            },
            options,
            current: Mutex::new(None),
            starting: Arc::new(tokio::sync::Mutex::new(())),
            starts: AtomicU64::new(0),
        }
    }

    /// The live session, started (or started again) when there is none.
    ///
    /// The start runs in its own task holding the start lock: a call whose deadline passes
    /// while the server starts (an `npx -y` install, say) gives up waiting, but the start goes
    /// on, and the calls after it find the session ready instead of starting it again.
    pub(crate) async fn session(self: &Arc<Self>) -> Result<Arc<Session>, ToolError> {
        if let Some(s) = self.live() {
            return Ok(s);
        }
        let starting = self.starting.clone().lock_owned().await;
        if let Some(s) = self.live() {
            return Ok(s);
        }
        let me = self.clone();
        let task = tokio::spawn(async move {
            let _starting = starting;
            let started = tokio::time::timeout(me.options.connect_timeout, me.start()).await;
            let session = match started {
                Ok(result) => Arc::new(result?),
                Err(_) => {
                    return Err(ToolError::new(
                        ErrorCode::McpUnavailable,
                        format!(
                            "the MCP server `{}` did not finish its handshake within {} ms",
                            me.raw,
                            me.options.connect_timeout.as_millis()
                        ),
                    ))
                }
            };
            me.starts.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut slot) = me.current.lock() {
                *slot = Some(session.clone());
            }
            Ok(session)
        });
        task.await.unwrap_or_else(|e| {
            Err(ToolError::new(
                ErrorCode::McpUnavailable,
                format!("starting the MCP session with `{}` failed: {e}", self.raw),
            ))
        })
    }

    fn live(&self) -> Option<Arc<Session>> {
        let slot = self.current.lock().ok()?;
        slot.as_ref().filter(|s| s.is_live()).cloned()
    }

    fn status(&self) -> EndpointStatus {
        let live = self.live();
        EndpointStatus {
            endpoint: self.raw.to_string(),
            starts: self.starts.load(Ordering::Relaxed),
            live: live.is_some(),
            pid: live.and_then(|s| s.pid),
            mem_cap_mb: self.config.mem_cap_mb,
        }
    }

    async fn start(&self) -> Result<Session, ToolError> {
        let unavailable = |why: String| {
            ToolError::new(
                ErrorCode::McpUnavailable,
                format!("cannot start the MCP session with `{}`: {why}", self.raw),
            )
        };
        let death = Arc::new(Death::default());
        match &self.config.endpoint {
            McpEndpoint::Stdio { .. } => {
                let (transport, pid, stderr) = self.spawn().map_err(unavailable)?;
                let service = client_config().serve(transport).await.map_err(|e| {
                    let said = stderr.tail();
                    let said = if said.is_empty() {
                        String::new()
                    } else {
                        format!("; it said: {said}")
                    };
                    unavailable(format!("the handshake failed: {e}{said}"))
                })?;
                if let (Some(pid), Some(cap)) = (pid, self.config.mem_cap_mb) {
                    memory::watch(
                        self.raw.clone(),
                        pid,
                        cap,
                        self.options.memory_poll,
                        death.clone(),
                    );
                }
                Ok(Session::new(self.raw.clone(), service, pid, death))
            }
            McpEndpoint::Http { url, .. } => {
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .max_concurrent_requests(self.options.http_max_in_flight);
                let client = self.options.client_for(url.as_str()).map_err(unavailable)?;
                let transport = StreamableHttpClientTransport::with_client(client, config);
                let service = client_config()
                    .serve(transport)
                    .await
                    .map_err(|e| unavailable(format!("the handshake failed: {e}")))?;
                Ok(Session::new(self.raw.clone(), service, None, death))
            }
            McpEndpoint::Sse { url, .. } => {
                let client = self.options.client_for(url.as_str()).map_err(unavailable)?;
                let transport = sse::SseClientTransport::connect(client, url)
                    .await
                    .map_err(|e| unavailable(e.to_string()))?;
                let service = client_config()
                    .serve(transport)
                    .await
                    .map_err(|e| unavailable(format!("the handshake failed: {e}")))?;
                Ok(Session::new(self.raw.clone(), service, None, death))
            }
        }
    }

    /// Starts a stdio server: its own process group (so that the memory watcher and shutdown
    /// reach the processes it starts, as `npx` does), under `strict` only the declared
    /// environment, its standard error forwarded to tracing and kept for error messages.
    fn spawn(&self) -> Result<(TokioChildProcess, Option<u32>, StderrTail), String> {
        let argv = match self.config.endpoint.argv() {
            Some(Ok(argv)) => argv,
            Some(Err(e)) => return Err(e.to_string()),
            None => return Err("not a stdio endpoint".into()),
        };
        let Some((program, args)) = argv.split_first() else {
            return Err("the stdio endpoint names no program to run".into());
        };
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args).kill_on_drop(true);
        #[cfg(unix)]
        cmd.process_group(0);
        if self.config.strict {
            cmd.env_clear();
        }
        cmd.envs(&self.config.env);
        let (process, stderr) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run `{program}`: {e}"))?;
        let pid = process.id();
        let tail = StderrTail::default();
        if let Some(stderr) = stderr {
            let tail = tail.clone();
            let endpoint = self.raw.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::debug!(target: "sluice::mcp", endpoint = &*endpoint, "{line}");
                    tail.push(line);
                }
            });
        }
        Ok((process, pid, tail))
    }
}

fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("sluice", env!("CARGO_PKG_VERSION")),
    )
}

/// The last lines a stdio server wrote to standard error.
#[derive(Debug, Clone, Default)]
struct StderrTail(Arc<Mutex<VecDeque<String>>>);

impl StderrTail {
    const LINES: usize = 5;

    fn push(&self, line: String) {
        if let Ok(mut q) = self.0.lock() {
            if q.len() == Self::LINES {
                q.pop_front();
            }
            q.push_back(line);
        }
    }

    fn tail(&self) -> String {
        self.0
            .lock()
            .map(|q| q.iter().cloned().collect::<Vec<_>>().join(" | "))
            .unwrap_or_default()
    }
}

/// One initialized MCP session.
pub(crate) struct Session {
    endpoint: Arc<str>,
    service: RunningService<RoleClient, ClientConfig>,
    pid: Option<u32>,
    death: Arc<Death>,
}

impl Session {
    fn new(
        endpoint: Arc<str>,
        service: RunningService<RoleClient, ClientConfig>,
        pid: Option<u32>,
        death: Arc<Death>,
    ) -> Self {
        Session {
            endpoint,
            service,
            pid,
            death,
        }
    }

    pub(crate) fn peer(&self) -> &Peer<RoleClient> {
        self.service.peer()
    }

    fn is_live(&self) -> bool {
        !self.death.is_declared()
            && !self.service.is_closed()
            && !self.service.peer().is_transport_closed()
    }

    /// Resolves when the session is declared dead, with the reason.
    pub(crate) async fn died(&self) -> ToolError {
        self.death.wait().await;
        self.death.reason().unwrap_or_else(|| {
            ToolError::new(
                ErrorCode::McpServerExited,
                format!("the MCP server `{}` went away", self.endpoint),
            )
        })
    }

    /// The error of a failed call. A broken transport ends the session, so that the next call
    /// starts a new one; a session already declared dead reports why it died.
    pub(crate) fn failure(&self, remote: &str, e: ServiceError) -> ToolError {
        if let Some(why) = self.death.reason() {
            return why;
        }
        let broken = matches!(
            e,
            ServiceError::TransportClosed | ServiceError::TransportSend(_)
        );
        let err = call_error(&self.endpoint, remote, e);
        if broken {
            self.death.declare(err.clone());
        }
        err
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.death.end();
        // rmcp closes the transport when the service drops; the group signal also reaches the
        // processes the server started (an `npx` launcher's node child).
        #[cfg(unix)]
        if let Some(pid) = self.pid {
            if !self.service.peer().is_transport_closed() {
                memory::signal_group(pid, memory::Signal::Terminate);
            }
        }
    }
}
