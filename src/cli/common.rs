//! What several commands share: loading tools and batches.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;
use sluice::kernel::builtin::{self, BuiltinConfig, KvStore};
use std::sync::Arc;

use sluice::kernel::model::{parse_json, read_manifests, PackIndex};
use sluice::kernel::run::{Kernel, KernelBuilder};
use sluice::kernel::transport::egress::EgressOptions;
use sluice::kernel::transport::http::{HttpOptions, HttpSynthesizer};
#[cfg(feature = "mcp")]
use sluice::kernel::transport::mcp::McpOptions;
use sluice::kernel::transport::pack::{PackOptions, PackService, PackToken};
use sluice::kernel::transport::{EnvSecrets, ToolRegistry};
use sluice::kernel::Batch;
use sluice::provenance::{CheckpointOptions, Durability, LogOptions, ProvenanceLog};

use super::failure::Failure;

/// The inputs `plan` and `run` share.
#[derive(Debug, clap::Args)]
pub(crate) struct BatchInput {
    /// A manifest file or a directory of *.json manifests (repeatable, or several after one
    /// flag). The built-in tools are always registered.
    #[arg(long = "tools", num_args = 1.., action = clap::ArgAction::Append)]
    pub(crate) tools: Vec<PathBuf>,
    /// The batch document (`-` for standard input).
    #[arg(long)]
    pub(crate) batch: PathBuf,
    /// The directory the built-in fs tools are confined to. Default: the current directory.
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Binds an MCP endpoint to an MCP tool whose manifest names none: `ID=URI` or
    /// `ID@VERSION=URI`, URI `mcp+stdio://…`, `mcp+http://…` or `mcp+sse://…` (repeatable).
    #[arg(long = "mcp-endpoint", value_name = "ID=URI")]
    pub(crate) mcp_endpoint: Vec<String>,
    #[command(flatten)]
    pub(crate) packs: PackArgs,
    #[command(flatten)]
    pub(crate) mcp_servers: super::adopt::McpServerArgs,
}

impl BatchInput {
    /// The built-in tools (fs confined to the root), the manifests under `--tools` with the
    /// `--mcp-endpoint` bindings, the tools of each `--mcp-server`, and each `--pack`'s tools (carried out by its service when
    /// `online`; `plan` reads the index only).
    pub(crate) fn registry(
        &self,
        online: Option<bool>,
    ) -> anyhow::Result<(ToolRegistry, Vec<Arc<PackService>>)> {
        let mut registry = load_tools(&self.tools, self.root.as_deref(), KvStore::new())?;
        bind_endpoints(&mut registry, &self.mcp_endpoint)?;
        self.mcp_servers.adopt(&mut registry)?;
        let packs = self.packs.register(&mut registry, online)?;
        Ok((registry, packs))
    }
}

/// `--pack INDEX=URL`: the Kindgi packs whose tools a command loads (docs/packs.md).
#[derive(Debug, Default, clap::Args)]
pub(crate) struct PackArgs {
    /// A Kindgi pack: its index (`python -m kindgi.pack index` writes it) and the URL of its pack
    /// service, `INDEX=URL`, the token read from `KINDGI_PACK_SERVICE_TOKEN`, or
    /// `INDEX=URL,token-env=NAME` to read it from NAME (repeatable). `validate`, `tools` and
    /// `plan` read the index only and take `INDEX` alone too.
    #[arg(long = "pack", value_name = "INDEX=URL")]
    pub(crate) pack: Vec<String>,
}

/// One `--pack`, parsed.
#[derive(Debug)]
pub(crate) struct PackSpec {
    pub(crate) index: PathBuf,
    pub(crate) url: Option<String>,
    pub(crate) token_env: String,
}

impl PackSpec {
    pub(crate) fn parse(text: &str) -> anyhow::Result<Self> {
        let usage = |why: &str| -> anyhow::Error {
            Failure {
                code: 2,
                message: format!(
                    "`--pack {text}`: {why}; expected INDEX=URL or INDEX=URL,token-env=NAME, \
                     e.g. --pack ledger/index.json=http://127.0.0.1:8080"
                ),
            }
            .into()
        };
        let (index, rest) = match text.split_once('=') {
            Some((i, r)) => (i.trim(), Some(r.trim())),
            None => (text.trim(), None),
        };
        if index.is_empty() {
            return Err(usage("the index path is empty"));
        }
        let (url, token_env) = match rest {
            None => (None, sluice::kernel::transport::pack::TOKEN_ENV.to_owned()),
            Some(r) => match r.rsplit_once(",token-env=") {
                Some((u, env)) if !env.trim().is_empty() => (Some(u.trim()), env.trim().to_owned()),
                Some(_) => return Err(usage("`token-env=` names no variable")),
                None => (
                    Some(r),
                    sluice::kernel::transport::pack::TOKEN_ENV.to_owned(),
                ),
            },
        };
        if url.is_some_and(str::is_empty) {
            return Err(usage("the URL is empty"));
        }
        Ok(PackSpec {
            index: PathBuf::from(index),
            url: url.map(str::to_owned),
            token_env,
        })
    }
}

impl PackArgs {
    /// Registers every pack's tools. `online: None` reads the indexes only (the tools cannot
    /// run); `Some(proxy_from_env)` makes each pack's service (a URL and a token are required)
    /// and returns them, for [`check_packs`].
    pub(crate) fn register(
        &self,
        registry: &mut ToolRegistry,
        online: Option<bool>,
    ) -> anyhow::Result<Vec<Arc<PackService>>> {
        let mut services = Vec::new();
        for text in &self.pack {
            let spec = PackSpec::parse(text)?;
            let index = PackIndex::read(&spec.index)?;
            let Some(proxy_from_env) = online else {
                for raw in index.tools {
                    registry.insert_raw(raw)?;
                }
                continue;
            };
            let Some(url) = &spec.url else {
                return Err(Failure {
                    code: 2,
                    message: format!(
                        "`--pack {text}`: name the pack service's URL to run its tools \
                         (--pack {}=http://HOST:PORT)",
                        spec.index.display()
                    ),
                }
                .into());
            };
            let token =
                PackToken::from_env(&index.pack_id, &spec.token_env).map_err(|e| Failure {
                    code: 2,
                    message: format!("--pack: {e}"),
                })?;
            let options = PackOptions::default()
                .with_egress(EgressOptions::default().with_proxy_from_env(proxy_from_env));
            let service = PackService::new(&index, url, token, options).map_err(|e| Failure {
                code: 2,
                message: format!("--pack: {e}"),
            })?;
            service.register(&index, registry)?;
            services.push(service);
        }
        Ok(services)
    }
}

/// Checks each pack service against its index (`GET /v1/info`) before anything runs: a service
/// that serves another pack, tool or version (or refuses the token) is exit 1; one that cannot be
/// reached is a warning (its calls fail `pack-unavailable` until it is back, then work).
pub(crate) async fn check_packs(services: &[Arc<PackService>]) -> anyhow::Result<()> {
    for service in services {
        match service.check().await {
            Ok(()) => {}
            Err(e @ sluice::kernel::Error::PackUnavailable { .. }) => {
                eprintln!(
                    "sluice: warning: {e}; its tools' calls fail `pack-unavailable` until it is \
                     back"
                );
            }
            Err(e) => {
                return Err(Failure {
                    code: 1,
                    message: format!("--pack: {e}"),
                }
                .into())
            }
        }
    }
    Ok(())
}

/// Applies `--mcp-endpoint ID=URI` bindings.
pub(crate) fn bind_endpoints(
    registry: &mut ToolRegistry,
    bindings: &[String],
) -> anyhow::Result<()> {
    for b in bindings {
        let Some((id, uri)) = b.split_once('=') else {
            return Err(Failure {
                code: 2,
                message: format!(
                    "`--mcp-endpoint {b}`: expected ID=URI, e.g. \
                     acme.weather=mcp+stdio://weather-server"
                ),
            }
            .into());
        };
        registry.bind_mcp_endpoint(id.trim(), uri.trim())?;
    }
    Ok(())
}

/// Where the built-in fs tools are confined.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Root<'a> {
    /// The current directory, one for every tenant.
    Current,
    /// This directory, one for every tenant.
    Shared(&'a Path),
    /// `DIR/<tenant>` for each tenant.
    PerTenant(&'a Path),
}

impl<'a> From<Option<&'a Path>> for Root<'a> {
    fn from(root: Option<&'a Path>) -> Self {
        root.map_or(Root::Current, Root::Shared)
    }
}

/// The built-in tools (fs tools confined to `root`) plus every manifest under `paths`. A manifest
/// may not take a built-in tool's id, in any version (it would become `sluice.…`'s highest).
pub(crate) fn load_tools<'a>(
    paths: &[PathBuf],
    root: impl Into<Root<'a>>,
    kv: KvStore,
) -> anyhow::Result<ToolRegistry> {
    let canonical = |r: &Path| {
        std::fs::canonicalize(r).map_err(|e| Failure {
            code: 2,
            message: format!("cannot use `{}` as the root: {e}", r.display()),
        })
    };
    let config = match root.into() {
        Root::Current => BuiltinConfig::new(
            std::env::current_dir().context("cannot read the current directory")?,
        ),
        Root::Shared(r) => BuiltinConfig::new(canonical(r)?),
        Root::PerTenant(r) => BuiltinConfig::per_tenant(canonical(r)?),
    };
    let mut registry = builtin::registry(config.with_kv(kv))?;
    let builtins: Vec<String> = registry.iter().map(|t| t.id().to_owned()).collect();
    for path in paths {
        for raw in read_manifests(path)? {
            if let Some(id) = raw.value.get("id").and_then(Value::as_str) {
                if builtins.iter().any(|b| b == id) {
                    return Err(Failure {
                        code: 1,
                        message: format!(
                            "the manifest at {} takes the id `{id}`, a built-in tool's: \
                             choose another id",
                            raw.source
                        ),
                    }
                    .into());
                }
            }
            registry.insert_raw(raw)?;
        }
    }
    Ok(registry)
}

/// Reads a JSON document from a file, or from standard input for `-`.
pub(crate) fn read_json_arg(path: &Path) -> anyhow::Result<Value> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| Failure {
                code: 2,
                message: format!("cannot read the batch from standard input: {e}"),
            })?;
        return Ok(parse_json(Path::new("<stdin>"), &text)?);
    }
    Ok(sluice::kernel::model::read_json(path)?)
}

/// Reads and parses a batch document.
pub(crate) fn read_batch(path: &Path) -> anyhow::Result<Batch> {
    let doc = read_json_arg(path)?;
    Ok(Batch::from_value(&doc)?)
}

/// A kernel builder for `run` and `serve`: the tools (unrunnable ones accepted: their calls end
/// `no-handler`), `needsSpec.env` values from this process's environment by the declared name,
/// secrets from the environment, the concurrency cap, and the proxy opt-in.
pub(crate) fn kernel_builder(
    registry: ToolRegistry,
    max_concurrency: Option<usize>,
    proxy_from_env: bool,
) -> anyhow::Result<KernelBuilder> {
    let declared_env: std::collections::BTreeSet<String> = registry
        .iter()
        .filter_map(|t| t.manifest().needs_spec.as_ref()?.env.as_ref())
        .flat_map(|env| env.keys().cloned())
        .collect();
    let mut builder = Kernel::builder().tools(registry);
    for name in &declared_env {
        if let Ok(value) = std::env::var(name) {
            builder = builder.env(name, &value);
        }
    }
    let mut builder = builder.secrets(EnvSecrets).allow_unrunnable_tools(true);
    if let Some(n) = max_concurrency {
        builder = builder.max_concurrency(n);
    }
    if proxy_from_env {
        let http = HttpOptions::default().with_proxy_from_env(true);
        builder = builder.synthesizer(
            "http",
            HttpSynthesizer::new(http).map_err(anyhow::Error::msg)?,
        );
        #[cfg(feature = "mcp")]
        {
            let egress = EgressOptions::default().with_proxy_from_env(true);
            builder = builder.mcp_options(McpOptions::default().with_egress(egress));
        }
    }
    Ok(builder)
}

/// The shared conflict domain options `run` and `serve` share (docs/scale.md).
#[derive(Debug, clap::Args)]
pub(crate) struct DomainArgs {
    /// Share each tenant's conflict domain with every process pointing at this PostgreSQL
    /// database (`postgres://USER@HOST:PORT/DB`): conflicting calls never overlap across them.
    #[arg(long, value_name = "URL")]
    domain: Option<String>,
    /// How long after its last heartbeat a process that died stops blocking the others (each
    /// process is judged by its own lease); at least 0.3.
    #[arg(long, value_name = "SECS", default_value_t = 10.0, requires = "domain")]
    lease: f64,
    /// How long a call waits for an unreachable database before it ends `domain-unavailable`
    /// (also the bound on a connection attempt and a statement); the process reconnects on its
    /// own meanwhile.
    #[arg(long, value_name = "SECS", default_value_t = 5.0, requires = "domain")]
    db_timeout: f64,
}

impl DomainArgs {
    /// Connects to the shared domain (`None` without `--domain`); exit 2 naming the database
    /// when it cannot be reached (fail closed). Call inside the runtime the kernel runs on.
    pub(crate) async fn connect(
        &self,
    ) -> anyhow::Result<Option<std::sync::Arc<sluice_postgres::PgDomain>>> {
        let Some(url) = &self.domain else {
            return Ok(None);
        };
        let secs = |flag: &str, v: f64| {
            if v.is_finite() && (0.0..=86_400.0).contains(&v) {
                Ok(std::time::Duration::from_secs_f64(v))
            } else {
                Err(Failure {
                    code: 2,
                    message: format!("{flag} {v}: a number of seconds is expected"),
                })
            }
        };
        let options = sluice_postgres::PgOptions::new(secs("--lease", self.lease)?)
            .unavailable_after(secs("--db-timeout", self.db_timeout)?);
        sluice_postgres::PgDomain::connect_with(url, options)
            .await
            .map(Some)
            .map_err(|e| {
                let message = match e {
                    sluice_postgres::PgError::Options(why) => {
                        format!("--lease/--db-timeout: {why}")
                    }
                    e => format!("--domain: {e}"),
                };
                Failure { code: 2, message }.into()
            })
    }
}

/// The provenance options `run` and `serve` share.
#[derive(Debug, clap::Args)]
pub(crate) struct LogArgs {
    /// Append a record of every call, conflict edge and the batch to this provenance log: a file
    /// (created if missing; a torn last line is repaired), or `postgres://…`, one hash chain per
    /// tenant shared by every process pointing at it (docs/scale.md).
    #[arg(long, value_name = "FILE|URL")]
    pub(crate) provenance: Option<PathBuf>,
    /// `durable`: a call's record is on disk (committed, for PostgreSQL) before its result is
    /// reported; `buffered`: faster.
    #[arg(long, value_enum, default_value = "durable")]
    durability: DurabilityMode,
    /// Append a signed checkpoint of the log to `LOG.checkpoints` every N records (and one when
    /// the run ends); needs `--key` and `--provenance` (a file).
    #[arg(long, value_name = "N", requires = "key", requires = "provenance",
          value_parser = clap::value_parser!(u64).range(1..))]
    checkpoint_every: Option<u64>,
    /// The signer key checkpoints are signed with (`sluice provenance keygen` writes one).
    #[arg(long, value_name = "KEYFILE", requires = "checkpoint_every")]
    key: Option<PathBuf>,
    /// The checkpoints' origin line (default: the key's name).
    #[arg(long, requires = "checkpoint_every")]
    origin: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DurabilityMode {
    Durable,
    Buffered,
}

/// An open provenance log: a file, or a database's shared chains.
pub(crate) enum OpenLog {
    File(std::sync::Arc<ProvenanceLog>),
    Pg(std::sync::Arc<sluice_postgres::PgProvenance>),
}

impl OpenLog {
    /// The log as the kernel's sink.
    pub(crate) fn sink(&self) -> std::sync::Arc<dyn sluice::kernel::provenance::ProvenanceSink> {
        match self {
            OpenLog::File(l) => l.clone(),
            OpenLog::Pg(l) => l.clone(),
        }
    }

    /// How messages name it (a database without its password).
    pub(crate) fn name(&self) -> String {
        match self {
            OpenLog::File(l) => l.path().display().to_string(),
            OpenLog::Pg(l) => l.url().to_owned(),
        }
    }
}

impl LogArgs {
    /// Opens the log (`None` without `--provenance`), with its checkpoints. A database that
    /// cannot be reached is exit 2, naming it. Call inside the runtime the kernel runs on.
    pub(crate) async fn open(&self) -> anyhow::Result<Option<OpenLog>> {
        let Some(path) = &self.provenance else {
            return Ok(None);
        };
        let durability = match self.durability {
            DurabilityMode::Durable => Durability::Durable,
            DurabilityMode::Buffered => Durability::Buffered,
        };
        if let Some(url) = path
            .to_str()
            .filter(|u| sluice_postgres::is_postgres_url(u))
        {
            if self.checkpoint_every.is_some() {
                return Err(Failure {
                    code: 2,
                    message: "--checkpoint-every: signed checkpoints are written beside a log file; for a \
                              PostgreSQL chain, sign one with `sluice provenance checkpoint \
                              postgres://… --tenant T --key KEYFILE`"
                        .into(),
                }
                .into());
            }
            let log = sluice_postgres::PgProvenance::connect(url, durability)
                .await
                .map_err(|e| Failure {
                    code: 2,
                    message: format!("--provenance: {e}"),
                })?;
            return Ok(Some(OpenLog::Pg(log)));
        }
        let mut options = LogOptions::new(durability);
        if let (Some(every), Some(key)) = (self.checkpoint_every, &self.key) {
            let key = super::provenance::read_signer_key(key)?;
            let mut c = CheckpointOptions::new(key, every);
            if let Some(origin) = &self.origin {
                c = c.with_origin(origin);
            }
            options = options.with_checkpoints(c);
        }
        Ok(Some(OpenLog::File(std::sync::Arc::new(
            super::provenance::open(path, options)?,
        ))))
    }
}
