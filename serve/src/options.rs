//! How the gateway serves: its options, and the token file that names the tenants.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::conn::ConnectionLimits;
use crate::error::ServeError;
use crate::trace::Telemetry;

/// How the gateway serves.
#[derive(Clone)]
#[non_exhaustive]
pub struct GatewayOptions {
    /// sha256 (lowercase hex) of each bearer token -> its tenant. Empty (and no operators): no
    /// tokens, every request is `default_tenant` (loopback only; the CLI enforces that).
    pub tokens: HashMap<String, String>,
    /// sha256 (lowercase hex) of each operator token: it reads every tenant's series on
    /// `/metrics` (a tenant's token reads only its own) and runs nothing.
    pub operators: HashSet<String>,
    /// The tenant of every request when there are no tokens, and of a stdio session.
    pub default_tenant: String,
    /// The largest request body taken (413 beyond; default 4 MiB).
    pub max_body: usize,
    /// How long a drain waits for calls in flight before cancelling them (default 30 s).
    pub drain_timeout: Duration,
    /// The most MCP sessions open at once; a new session beyond it gets 503 (default 1024).
    /// Idle sessions are closed by rmcp's keep-alive, so abandoned ones free their place.
    pub max_sessions: usize,
    /// How long a write to a client may stay blocked (the client stopped reading) before its
    /// connection is dropped (default 30 s). An SSE stream that has nothing to send is not
    /// blocked.
    pub write_timeout: Duration,
    /// The limits on connections: the cap and a peer's share, and the header, idle and body
    /// timeouts (see [`ConnectionLimits`]).
    pub connections: ConnectionLimits,
    /// Whether an MCP call's asks go to its client's user through MCP elicitation
    /// (`--approve elicit`). Without it, the kernel's approver answers.
    pub elicit: bool,
    /// Where each call's span goes (`--otlp`); `None`: no spans.
    pub telemetry: Option<Arc<Telemetry>>,
    /// What `/healthz` asks besides the drain: each check names a dependency (the shared
    /// domain's database, the provenance database) and says why it cannot serve; any `Err` makes
    /// `/healthz` answer 503 with it.
    pub health: Vec<HealthCheck>,
}

/// A dependency's health for `/healthz`: its name, and `Err(why)` while it cannot serve (any
/// error: the check of a kernel seam returns the kernel's, such as
/// [`sluice_kernel::Error::SharedDomainFailed`]).
pub type HealthCheck = (String, Arc<HealthProbe>);

/// The probe of a [`HealthCheck`].
pub type HealthProbe =
    dyn Fn() -> Result<(), Box<dyn std::error::Error + Send + Sync>> + Send + Sync;

impl std::fmt::Debug for GatewayOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayOptions")
            .field("tenants", &self.tokens.len())
            .field("operators", &self.operators.len())
            .field("default_tenant", &self.default_tenant)
            .field("max_body", &self.max_body)
            .field("drain_timeout", &self.drain_timeout)
            .field("max_sessions", &self.max_sessions)
            .field("write_timeout", &self.write_timeout)
            .field("connections", &self.connections)
            .field("elicit", &self.elicit)
            .field("telemetry", &self.telemetry.as_ref().map(|t| t.endpoint()))
            .field(
                "health",
                &self.health.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Default for GatewayOptions {
    fn default() -> Self {
        GatewayOptions {
            tokens: HashMap::new(),
            operators: HashSet::new(),
            default_tenant: "default".into(),
            max_body: 4 << 20,
            drain_timeout: Duration::from_secs(30),
            max_sessions: 1024,
            write_timeout: Duration::from_secs(30),
            connections: ConnectionLimits::default(),
            elicit: false,
            telemetry: None,
            health: Vec::new(),
        }
    }
}

impl GatewayOptions {
    /// Adds a dependency `/healthz` checks (see [`GatewayOptions::health`]).
    pub fn with_health_check(mut self, name: &str, check: Arc<HealthProbe>) -> Self {
        self.health.push((name.to_owned(), check));
        self
    }

    /// Sets the tenants' tokens (sha256 hex -> tenant).
    pub fn with_tokens(mut self, tokens: HashMap<String, String>) -> Self {
        self.tokens = tokens;
        self
    }

    /// Sets the operator tokens (sha256 hex): they read all of `/metrics` and run nothing.
    pub fn with_operators(mut self, operators: HashSet<String>) -> Self {
        self.operators = operators;
        self
    }

    /// Sets the tenants' and the operators' tokens as a token file gives them.
    pub fn with_token_file(self, file: TokenFile) -> Self {
        self.with_tokens(file.tenants)
            .with_operators(file.operators)
    }

    /// Whether requests must carry a token.
    pub fn requires_tokens(&self) -> bool {
        !self.tokens.is_empty() || !self.operators.is_empty()
    }

    /// Sets the default tenant.
    pub fn with_default_tenant(mut self, tenant: &str) -> Self {
        self.default_tenant = tenant.to_owned();
        self
    }

    /// Sets the body limit.
    pub fn with_max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// Sets the most MCP sessions open at once.
    pub fn with_max_sessions(mut self, n: usize) -> Self {
        self.max_sessions = n;
        self
    }

    /// Asks the user of the MCP client that sent a call, through elicitation, when the call's
    /// authorization asks.
    pub fn with_elicitation(mut self, elicit: bool) -> Self {
        self.elicit = elicit;
        self
    }

    /// Exports a span per call through `telemetry`.
    pub fn with_telemetry(mut self, telemetry: Arc<Telemetry>) -> Self {
        self.telemetry = Some(telemetry);
        self
    }

    /// Sets how long a blocked write may wait for a client that stopped reading.
    pub fn with_write_timeout(mut self, d: Duration) -> Self {
        self.write_timeout = d;
        self
    }

    /// Sets the connection limits.
    pub fn with_connections(mut self, limits: ConnectionLimits) -> Self {
        self.connections = limits;
        self
    }

    /// Sets the drain timeout.
    pub fn with_drain_timeout(mut self, d: Duration) -> Self {
        self.drain_timeout = d;
        self
    }
}

/// What a token file holds: each tenant's tokens, and the operators' (by their sha256).
#[derive(Debug, Clone, Default)]
pub struct TokenFile {
    /// sha256 (lowercase hex) -> tenant.
    pub tenants: HashMap<String, String>,
    /// sha256 (lowercase hex) of each operator token.
    pub operators: HashSet<String>,
}

/// Reads a token file: `{"tokens": [{"sha256": "<hex>", "tenant": "acme"}, {"sha256": "<hex>",
/// "operator": true}]}`. A token is a tenant's or an operator's, never both; one sha256 is listed
/// once.
pub fn read_tokens(path: &std::path::Path) -> Result<TokenFile, ServeError> {
    let fail = |why: String| ServeError::Tokens {
        path: path.display().to_string(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| fail(format!("not JSON: {e}")))?;
    let list = doc
        .get("tokens")
        .and_then(Value::as_array)
        .ok_or_else(|| fail("`/tokens` must be an array".into()))?;
    let mut out = TokenFile::default();
    for (i, t) in list.iter().enumerate() {
        let hash = t.get("sha256").and_then(Value::as_str).unwrap_or("");
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(fail(format!(
                "`/tokens/{i}/sha256` must be the 64 hex digits of the token's sha256 (the file \
                 never holds a token in the clear)"
            )));
        }
        let hash = hash.to_ascii_lowercase();
        if out.tenants.contains_key(&hash) || out.operators.contains(&hash) {
            return Err(fail(format!(
                "`/tokens/{i}/sha256` is listed twice: a token belongs to one tenant or operator"
            )));
        }
        let operator = match t.get("operator") {
            None | Some(Value::Bool(false)) => false,
            Some(Value::Bool(true)) => true,
            Some(_) => return Err(fail(format!("`/tokens/{i}/operator` must be a boolean"))),
        };
        match (t.get("tenant"), operator) {
            (Some(_), true) => {
                return Err(fail(format!(
                    "`/tokens/{i}`: an operator token has no tenant (it reads `/metrics` and runs \
                     nothing); give the tenant a token of its own"
                )))
            }
            (None, true) => {
                out.operators.insert(hash);
            }
            (tenant, false) => {
                let tenant = tenant.and_then(Value::as_str).unwrap_or("");
                if tenant.is_empty() {
                    return Err(fail(format!(
                        "`/tokens/{i}/tenant` must be a non-empty string (or the entry \
                         `\"operator\": true`)"
                    )));
                }
                out.tenants.insert(hash, tenant.to_owned());
            }
        }
    }
    Ok(out)
}

/// The lowercase hex sha256 of a token, as the token file holds it.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}
