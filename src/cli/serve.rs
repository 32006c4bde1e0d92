//! `sluice serve`: the gateway (docs/serve.md): MCP over streamable HTTP and the batch API on
//! `--listen`, or one MCP session over stdio.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::ValueEnum;
use sluice::kernel::authorize::{
    ApprovalFuture, ApprovalOutcome, ApprovalRequest, ApproveAll, RejectAll,
};
use sluice::kernel::builtin::{self, KvStore};
use sluice::serve::{
    read_tokens, serve_http, serve_stdio, ConnectionLimits, Gateway, GatewayOptions, Telemetry,
    TokenFile,
};

use super::common::{bind_endpoints, load_tools, DomainArgs, LogArgs, Root};
use super::failure::Failure;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A manifest file or a directory of *.json manifests (repeatable). The built-in tools are
    /// always registered.
    #[arg(long = "tools", num_args = 1.., action = clap::ArgAction::Append)]
    tools: Vec<PathBuf>,
    /// Binds an MCP endpoint to an MCP tool whose manifest names none: `ID=URI` (repeatable).
    #[arg(long = "mcp-endpoint", value_name = "ID=URI")]
    mcp_endpoint: Vec<String>,
    #[command(flatten)]
    packs: super::common::PackArgs,
    #[command(flatten)]
    mcp_servers: super::adopt::McpServerArgs,
    /// Where to listen: MCP at `/mcp`, the batch API under `/v1/`, `/healthz`, `/metrics`. Port
    /// 0 picks a free port; the first line on stdout says which.
    #[arg(long, default_value = "127.0.0.1:7878", conflicts_with = "stdio")]
    listen: SocketAddr,
    /// One MCP session over standard input and output instead (as `--tenant`).
    #[arg(long)]
    stdio: bool,
    /// A policy document: every access is authorized per tenant.
    #[arg(long)]
    policy: Option<PathBuf>,
    /// The bearer tokens: `{"tokens": [{"sha256": "<hex>", "tenant": "acme"}]}`; an entry
    /// `{"sha256": "<hex>", "operator": true}` reads every tenant's `/metrics` and runs nothing
    /// (a tenant's token reads only its own series). Without it the address must be a loopback
    /// one, and every request is `--tenant`.
    #[arg(long)]
    tokens: Option<PathBuf>,
    /// The tenant without tokens, and of a stdio session.
    #[arg(long, default_value = "default")]
    tenant: String,
    /// The provenance log and its checkpoints.
    #[command(flatten)]
    log: LogArgs,
    /// The shared conflict domain (PostgreSQL), for several gateways.
    #[command(flatten)]
    domain: DomainArgs,
    /// Who answers asks: `none` rejects (fail closed), `all` approves, `elicit` asks the user of
    /// the MCP client that sent the call (a client that cannot be asked, and the batch API, are
    /// rejected).
    #[arg(long, value_enum, default_value = "none")]
    approve: ApproveMode,
    /// Export one OpenTelemetry span per call to this OTLP/HTTP collector (`http://HOST:4318`
    /// gets `/v1/traces`; a URL with a path is used as written).
    #[arg(long, value_name = "URL")]
    otlp: Option<String>,
    /// The directory the built-in fs tools are confined to. Default: the current directory.
    /// Every tenant reaches the same files there (their conflicting calls of one file are
    /// ordered against each other); `--root-per-tenant` keeps them apart.
    #[arg(long, conflicts_with = "root_per_tenant")]
    root: Option<PathBuf>,
    /// Gives each tenant a root of its own for the built-in fs tools: `DIR/<tenant>`, made on
    /// its first write. A tenant's name must then be a directory name (letters, digits, `.`,
    /// `_`, `-`, not starting with `.`).
    #[arg(long, value_name = "DIR")]
    root_per_tenant: Option<PathBuf>,
    /// The most calls running at once (default: no cap).
    #[arg(long)]
    max_concurrency: Option<usize>,
    /// The largest request body taken (413 beyond).
    #[arg(long, value_name = "BYTES", default_value_t = 4 << 20)]
    max_body: usize,
    /// The most MCP sessions open at once (a new one beyond gets 503; idle ones are closed).
    #[arg(long, default_value_t = 1024)]
    max_sessions: usize,
    /// How long a write to a client that stopped reading may stay blocked before its connection
    /// is dropped.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    write_timeout: u64,
    /// How long a request's header may take to arrive, from its first byte; a slower client's
    /// connection is closed.
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    header_read_timeout: u64,
    /// How long a connection may stay open with no request in progress (keep-alive idle); an
    /// open SSE stream is a request in progress.
    #[arg(long, value_name = "SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    idle_timeout: u64,
    /// How long a request's body may take to arrive after its header (408 beyond).
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    body_read_timeout: u64,
    /// The most connections open at once; one beyond is closed at accept. Default: the
    /// process's descriptor limit (raised to its hard limit at start) less 64, at most 4,096.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_connections: Option<u64>,
    /// The most connections one peer address may hold, so that one address cannot take every
    /// place. Default: a quarter of `--max-connections`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_connections_per_peer: Option<u64>,
    /// How long a shutdown waits for calls in flight before cancelling them.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    drain_timeout: u64,
    /// Send HTTP tools' and MCP servers' requests through the proxy the environment names.
    #[arg(long)]
    proxy_from_env: bool,
}

/// The connection limits the flags set.
fn connection_limits(args: &Args) -> ConnectionLimits {
    let mut limits = ConnectionLimits::default();
    limits.header_read_timeout = Duration::from_secs(args.header_read_timeout);
    limits.idle_timeout = Duration::from_secs(args.idle_timeout);
    limits.body_read_timeout = Duration::from_secs(args.body_read_timeout);
    let count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    limits.max = args.max_connections.map(count);
    limits.per_peer = args.max_connections_per_peer.map(count);
    limits
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ApproveMode {
    None,
    All,
    Elicit,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let tokens = match &args.tokens {
        Some(p) => read_tokens(p).map_err(|e| Failure {
            code: 2,
            message: e.to_string(),
        })?,
        None => Default::default(),
    };
    if tokens.tenants.is_empty()
        && tokens.operators.is_empty()
        && !args.stdio
        && !args.listen.ip().is_loopback()
    {
        return Err(Failure {
            code: 2,
            message: format!(
                "`--listen {}` is not a loopback address: without `--tokens` the gateway serves \
                 loopback only (anyone who reaches it would run tools)",
                args.listen
            ),
        }
        .into());
    }
    let engine = args
        .policy
        .as_deref()
        .map(super::policy::load)
        .transpose()?;
    let root = match &args.root_per_tenant {
        Some(dir) => {
            check_tenant_roots(dir, &tokens, &args.tenant)?;
            Root::PerTenant(dir)
        }
        None => Root::from(args.root.as_deref()),
    };
    let mut registry = load_tools(&args.tools, root, KvStore::new())?;
    bind_endpoints(&mut registry, &args.mcp_endpoint)?;
    args.mcp_servers.adopt(&mut registry)?;
    let packs = args
        .packs
        .register(&mut registry, Some(args.proxy_from_env))?;
    let mut builder =
        super::common::kernel_builder(registry, args.max_concurrency, args.proxy_from_env)?;
    let engine = engine.map(Arc::new);
    if let Some(engine) = &engine {
        builder = builder.authorizer_arc(engine.clone());
    }
    builder = match args.approve {
        ApproveMode::All => builder.approver(ApproveAll),
        ApproveMode::None => builder.approver(RejectAll),
        // MCP calls are asked through their client; what reaches the kernel's approver is an
        // ask nobody can answer (the batch API's).
        ApproveMode::Elicit => builder.approver(|_request: ApprovalRequest| {
            Box::pin(async {
                Ok(ApprovalOutcome::Rejected {
                    by: "no-elicitation".into(),
                    reason: "only an MCP client's user can approve (`--approve elicit`); the \
                             batch API has nobody to ask"
                        .into(),
                })
            }) as ApprovalFuture
        }),
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let _inside = runtime.enter();
    let log = runtime.block_on(args.log.open())?;
    if let Some(log) = &log {
        builder = builder.provenance_arc(log.sink());
    }
    let domain = runtime.block_on(args.domain.connect())?;
    if let Some(d) = &domain {
        builder = builder.shared_domain(d.clone());
    }
    runtime.block_on(super::common::check_packs(&packs))?;
    let kernel = builder.build()?;
    let options = GatewayOptions::default()
        .with_token_file(tokens)
        .with_default_tenant(&args.tenant)
        .with_max_body(args.max_body)
        .with_max_sessions(args.max_sessions)
        .with_drain_timeout(Duration::from_secs(args.drain_timeout))
        .with_write_timeout(Duration::from_secs(args.write_timeout))
        .with_connections(connection_limits(&args))
        .with_elicitation(args.approve == ApproveMode::Elicit);
    let options = match &domain {
        Some(d) => {
            let d = d.clone();
            options.with_health_check(
                "the shared conflict domain",
                Arc::new(move || Ok(d.health()?)),
            )
        }
        None => options,
    };
    let options = match &log {
        Some(crate::cli::common::OpenLog::Pg(l)) => {
            let l = l.clone();
            options.with_health_check("the provenance log", Arc::new(move || Ok(l.health()?)))
        }
        _ => options,
    };
    let options = match &args.otlp {
        Some(url) => {
            options.with_telemetry(Arc::new(Telemetry::otlp(url).map_err(|e| Failure {
                code: 2,
                message: e.to_string(),
            })?))
        }
        None => options,
    };
    // The policy (the kernel's authorizer) also hides from each tenant the tools it denies.
    let last = kernel.clone();
    let gateway = Arc::new(Gateway::new(kernel, options)?);
    let served = runtime.block_on(async {
        if args.stdio {
            let served = serve_stdio(gateway.clone(), &args.tenant).await;
            // The session is over: its calls end, the last spans go out.
            gateway.drain().await;
            return served;
        }
        let listener = tokio::net::TcpListener::bind(args.listen).await?;
        let addr = listener.local_addr()?;
        outln!("listening on http://{addr}");
        serve_http(gateway.clone(), listener, shutdown_signal()).await
    });
    drop(gateway);
    // The kernel's ordered close: the shared domain settled and closed, the MCP sessions closed
    // inside the runtime, then the log flushed and closed (its last checkpoint written).
    if let Err(e) = runtime.block_on(last.shutdown()) {
        eprintln!("sluice: {e}");
    }
    drop(_inside);
    drop(runtime);
    // Dropping the log joins its writer, which `shutdown` has closed.
    drop(log);
    served.map_err(|e| Failure {
        code: 2,
        message: format!("cannot serve: {e}"),
    })?;
    Ok(ExitCode::SUCCESS)
}

/// With a root per tenant, every tenant the gateway can serve must have a directory name; the
/// directory that holds them is made when missing.
fn check_tenant_roots(dir: &Path, tokens: &TokenFile, default: &str) -> anyhow::Result<()> {
    let refuse = |why: String| -> anyhow::Error {
        Failure {
            code: 2,
            message: why,
        }
        .into()
    };
    let served: Vec<&str> = if tokens.tenants.is_empty() {
        vec![default]
    } else {
        tokens.tenants.values().map(String::as_str).collect()
    };
    for tenant in served {
        if !builtin::is_directory_name(tenant) {
            return Err(refuse(format!(
                "`--root-per-tenant {}`: the tenant `{tenant}` cannot name a directory (letters, \
                 digits, `.`, `_`, `-`, not starting with `.`): rename it in the token file or \
                 `--tenant`",
                dir.display()
            )));
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| {
        refuse(format!(
            "`--root-per-tenant {}`: cannot make the directory: {e}",
            dir.display()
        ))
    })
}

/// SIGTERM or SIGINT.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
