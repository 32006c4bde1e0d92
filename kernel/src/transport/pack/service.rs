//! One pack service: its token and options, the check of `/v1/info` against the index, and a
//! call's `invoke` with its retries and the meaning of its answer.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::wire::{error_of, head, issues_text, map_code, wire_ctx, PROTOCOL};
use crate::error::{Error, ErrorCode, Result};
use crate::model::PackIndex;
use crate::transport::context::ToolContext;
use crate::transport::egress::{self, source_chain, EgressOptions};
use crate::transport::handler::ToolError;

/// The environment variable the token is read from unless the operator names another.
pub const TOKEN_ENV: &str = "KINDGI_PACK_SERVICE_TOKEN";

/// A pack service's token: sent as `kindgi-pack-token`, never shown.
#[derive(Clone)]
pub struct PackToken(String);

impl PackToken {
    /// A token (surrounding whitespace removed, as the service reads its own).
    pub fn new(token: &str) -> Self {
        PackToken(token.trim().to_owned())
    }

    /// The token in the environment variable `name`; [`Error::PackConfig`] naming the variable
    /// (never a value) when it is unset or empty.
    pub fn from_env(pack: &str, name: &str) -> Result<Self> {
        match std::env::var(name) {
            Ok(v) if !v.trim().is_empty() => Ok(PackToken::new(&v)),
            _ => Err(Error::PackConfig {
                pack: pack.to_owned(),
                why: format!("its token is read from the environment variable `{name}`, which is unset or empty"),
            }),
        }
    }

    fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for PackToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PackToken([redacted])")
    }
}

/// How the kernel talks to pack services.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PackOptions {
    /// How services are reached: the same egress checks as HTTP tools (metadata addresses
    /// refused, no redirects, no proxy unless opted in).
    pub egress: EgressOptions,
    /// How long a call with no deadline keeps retrying `503 overloaded` (default 120 s, the
    /// deadline a pack service gives a call that names none).
    pub retry_budget: Duration,
    /// The largest answer read (default 16 MiB); a larger one ends the call `too-large`.
    pub max_response_bytes: u64,
    /// How long `GET /v1/info` may take (default 10 s).
    pub info_timeout: Duration,
}

impl Default for PackOptions {
    fn default() -> Self {
        PackOptions {
            egress: EgressOptions::default(),
            retry_budget: Duration::from_secs(120),
            max_response_bytes: 16 * 1024 * 1024,
            info_timeout: Duration::from_secs(10),
        }
    }
}

impl PackOptions {
    /// These options with these egress options.
    pub fn with_egress(mut self, egress: EgressOptions) -> Self {
        self.egress = egress;
        self
    }

    /// These options with this retry budget for calls without a deadline.
    pub fn with_retry_budget(mut self, budget: Duration) -> Self {
        self.retry_budget = budget;
        self
    }
}

/// One pack service: the index's identity, where the service is, and whether it was found to
/// agree with the index. Shared by the handlers of the pack's tools.
pub struct PackService {
    pack_id: String,
    pack_version: Option<String>,
    artifact_version: Option<String>,
    /// Each tool's versions, as the index declares them.
    tools: BTreeMap<String, BTreeSet<String>>,
    url: String,
    invoke_url: url::Url,
    info_url: url::Url,
    token: PackToken,
    client: reqwest::Client,
    options: PackOptions,
    /// Whether `/v1/info` was found to agree with the index since the service was last
    /// unreachable.
    agreed: AtomicBool,
    /// One check at a time.
    checking: tokio::sync::Mutex<()>,
}

impl fmt::Debug for PackService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PackService")
            .field("pack", &self.pack_id)
            .field("url", &self.url)
            .field("tools", &self.tools.len())
            .field("agreed", &self.agreed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl PackService {
    /// The service at `url` (its base: `/v1/invoke` and `/v1/info` are under it) for the pack
    /// `index` declares. Refuses a URL that does not parse, is not http(s), or is a metadata
    /// address ([`Error::PackConfig`]).
    pub fn new(
        index: &PackIndex,
        url: &str,
        token: PackToken,
        options: PackOptions,
    ) -> Result<Arc<Self>> {
        let refuse = |why: String| Error::PackConfig {
            pack: index.pack_id.clone(),
            why,
        };
        let base = egress::judge(url, None, options.egress.allow_metadata)
            .map_err(|why| refuse(format!("the service URL `{url}` is refused: {why}")))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(refuse(format!(
                "the service URL `{url}` is not http or https"
            )));
        }
        let join = |path: &str| {
            let mut u = base.clone();
            let prefix = u.path().trim_end_matches('/').to_owned();
            u.set_path(&format!("{prefix}{path}"));
            u.set_query(None);
            u
        };
        let client = egress::client(options.egress).map_err(refuse)?;
        let mut tools: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (id, version) in index.tool_versions() {
            tools.entry(id).or_default().insert(version);
        }
        Ok(Arc::new(PackService {
            pack_id: index.pack_id.clone(),
            pack_version: index.pack_version.clone(),
            artifact_version: index.artifact_version.clone(),
            tools,
            url: url.to_owned(),
            invoke_url: join("/v1/invoke"),
            info_url: join("/v1/info"),
            token,
            client,
            options,
            agreed: AtomicBool::new(false),
            checking: tokio::sync::Mutex::new(()),
        }))
    }

    /// The pack's id.
    pub fn pack_id(&self) -> &str {
        &self.pack_id
    }

    /// The service's URL as given.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Reads `GET /v1/info` and compares it with the index: [`Error::PackMismatch`] naming every
    /// difference (or a refused token), [`Error::PackUnavailable`] when the service cannot be
    /// reached or answers something else. Once it agrees, calls skip the check until the service
    /// is next found unreachable.
    pub async fn check(&self) -> Result<()> {
        let _one = self.checking.lock().await;
        self.agreed.store(false, Ordering::Release);
        let info = self.read_info().await?;
        let differences = self.differences(&info);
        if !differences.is_empty() {
            return Err(self.mismatch(differences.join("; ")));
        }
        self.agreed.store(true, Ordering::Release);
        Ok(())
    }

    /// Checks the service unless it was found to agree already.
    async fn ensure_checked(&self) -> Result<()> {
        if self.agreed.load(Ordering::Acquire) {
            return Ok(());
        }
        let _one = self.checking.lock().await;
        if self.agreed.load(Ordering::Acquire) {
            return Ok(());
        }
        drop(_one);
        self.check().await
    }

    /// Forgets that the service agreed: it was unreachable, or answered as another pack would.
    fn forget(&self) {
        self.agreed.store(false, Ordering::Release);
    }

    async fn read_info(&self) -> Result<Value> {
        let unavailable = |why: String| Error::PackUnavailable {
            pack: self.pack_id.clone(),
            url: self.url.clone(),
            why: self.scrub(&why),
        };
        let request = self
            .client
            .get(self.info_url.clone())
            .header("kindgi-pack-token", self.token.as_str())
            .send();
        let response = tokio::time::timeout(self.options.info_timeout, request)
            .await
            .map_err(|_| {
                unavailable(format!(
                    "`GET /v1/info` did not answer within {} ms",
                    self.options.info_timeout.as_millis()
                ))
            })?
            .map_err(|e| unavailable(source_chain(&e)))?;
        let status = response.status().as_u16();
        let body = response
            .bytes()
            .await
            .map_err(|e| unavailable(source_chain(&e)))?;
        match status {
            200 => serde_json::from_slice(&body).map_err(|e| {
                unavailable(format!(
                    "`GET /v1/info` answered a body that is not JSON: {e}"
                ))
            }),
            401 => Err(Error::PackConfig {
                pack: self.pack_id.clone(),
                why: format!(
                    "the service at {} refused Sluice's token (401): give Sluice the token the \
                     service was started with (`{TOKEN_ENV}`, or the variable `--pack` names)",
                    self.url
                ),
            }),
            s => Err(unavailable(format!(
                "`GET /v1/info` answered {s}: {}",
                head(&body)
            ))),
        }
    }

    /// Every way the service's `/v1/info` differs from the index.
    fn differences(&self, info: &Value) -> Vec<String> {
        let mut out = Vec::new();
        let text = |key: &str| info.get(key).and_then(Value::as_str);
        match info.get("protocol").and_then(Value::as_u64) {
            Some(p) if p == u64::from(PROTOCOL) => {}
            other => out.push(format!(
                "the service speaks pack protocol {}, Sluice speaks {PROTOCOL}",
                other.map_or("(none named)".into(), |p| p.to_string())
            )),
        }
        if text("packId") != Some(self.pack_id.as_str()) {
            out.push(format!(
                "the service holds the pack `{}`, the index declares `{}`",
                text("packId").unwrap_or("(none named)"),
                self.pack_id
            ));
        }
        for (key, ours) in [
            ("packVersion", &self.pack_version),
            ("artifactVersion", &self.artifact_version),
        ] {
            if let (Some(ours), Some(theirs)) = (ours, text(key)) {
                if ours != theirs {
                    out.push(format!(
                        "the service's {key} is {theirs}, the index's {ours}"
                    ));
                }
            }
        }
        let mut served: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for t in info
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(id) = t.get("id").and_then(Value::as_str) {
                let version = t
                    .get("version")
                    .and_then(Value::as_str)
                    .unwrap_or("unversioned");
                served
                    .entry(id.to_owned())
                    .or_default()
                    .insert(version.to_owned());
            }
        }
        let list = |v: &BTreeSet<String>| v.iter().cloned().collect::<Vec<_>>().join(", ");
        for (id, versions) in &self.tools {
            match served.get(id) {
                None => out.push(format!("the tool `{id}` is not at the service")),
                Some(theirs) if theirs != versions => out.push(format!(
                    "the tool `{id}` is version {} in the index and {} at the service",
                    list(versions),
                    list(theirs)
                )),
                Some(_) => {}
            }
        }
        for id in served.keys().filter(|id| !self.tools.contains_key(*id)) {
            out.push(format!(
                "the service holds the tool `{id}`, which the index does not declare"
            ));
        }
        out
    }

    fn mismatch(&self, why: String) -> Error {
        Error::PackMismatch {
            pack: self.pack_id.clone(),
            url: self.url.clone(),
            why: format!("the service does not serve what the index declares: {why}"),
        }
    }

    /// `text` with the token replaced by `[redacted]`.
    fn scrub(&self, text: &str) -> String {
        let token = self.token.as_str();
        if token.is_empty() {
            text.to_owned()
        } else {
            text.replace(token, "[redacted]")
        }
    }
}

/// The first wait before a `503 overloaded` is retried; each retry doubles it, up to the
/// service's `retry-after` (else 1 s).
const FIRST_BACKOFF: Duration = Duration::from_millis(20);

/// What an attempt came to.
enum Attempt {
    Answer(u16, Vec<u8>),
    Overloaded(Option<Duration>),
}

impl PackService {
    /// Sends one call, retrying `503 overloaded` while its deadline allows.
    pub(super) async fn invoke(
        &self,
        id: &str,
        version: &str,
        ctx: ToolContext,
        input: Value,
    ) -> Result<Value, ToolError> {
        self.ensure_checked().await.map_err(|e| {
            let code = match e {
                crate::Error::PackMismatch { .. } => ErrorCode::PackMismatch,
                _ => ErrorCode::PackUnavailable,
            };
            ToolError::new(code, format!("call `{}` was not sent: {e}", ctx.call_id()))
        })?;
        let key = ctx.idempotency_key();
        let body = serde_json::to_vec(&json!({
            "v": PROTOCOL,
            "kind": "invoke",
            "tool": {"id": id, "version": version},
            "input": input,
            "ctx": wire_ctx(&ctx, &key),
        }))
        .map_err(|e| {
            ToolError::new(
                ErrorCode::Internal,
                format!("the request cannot be written: {e}"),
            )
        })?;
        let budget_end = ctx
            .deadline()
            .unwrap_or_else(|| tokio::time::Instant::now() + self.options.retry_budget);
        let mut backoff = FIRST_BACKOFF;
        let mut overloaded = 0u32;
        loop {
            match self.attempt(&ctx, &body, &key).await? {
                Attempt::Answer(status, bytes) => return self.judge(id, &ctx, status, &bytes),
                Attempt::Overloaded(retry_after) => {
                    overloaded += 1;
                    let cap = retry_after
                        .unwrap_or(Duration::from_secs(1))
                        .max(FIRST_BACKOFF);
                    let wait = backoff.min(cap);
                    if tokio::time::Instant::now() + wait >= budget_end {
                        let (code, within) = match ctx.deadline() {
                            Some(_) => (ErrorCode::Timeout, "the call's deadline"),
                            None => (ErrorCode::PackUnavailable, "the retry budget"),
                        };
                        return Err(ToolError::new(
                            code,
                            format!(
                                "pack `{}` answered 503 overloaded to all {overloaded} attempts \
                                 within {within}",
                                self.pack_id
                            ),
                        ));
                    }
                    tokio::time::sleep(wait).await;
                    backoff = (backoff * 2).min(cap);
                }
            }
        }
    }

    /// One `POST /v1/invoke`.
    async fn attempt(
        &self,
        ctx: &ToolContext,
        body: &[u8],
        key: &str,
    ) -> Result<Attempt, ToolError> {
        let mut request = self
            .client
            .post(self.invoke_url.clone())
            .header("content-type", "application/json")
            .header("kindgi-pack-token", self.token.as_str())
            .header("kindgi-run-id", ctx.batch_id())
            .header("kindgi-request-id", ctx.call_id());
        if let Some(tp) = ctx.traceparent() {
            request = request.header("traceparent", tp);
        }
        if let Some(deadline) = ctx.deadline() {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            request = request.header("kindgi-timeout-ms", left.as_millis().max(1).to_string());
        }
        let unavailable = |why: String| {
            self.forget();
            ToolError::new(
                ErrorCode::PackUnavailable,
                self.scrub(&format!("pack `{}` at {}: {why}", self.pack_id, self.url)),
            )
        };
        let mut response = match request.body(body.to_vec()).send().await {
            Ok(r) => r,
            Err(e) if e.is_connect() => {
                return Err(unavailable(format!(
                    "cannot be reached: {}",
                    source_chain(&e)
                )))
            }
            Err(e) => {
                return Err(unavailable(format!(
                    "the exchange failed (the call may have run; its idempotency key is {key}): {}",
                    source_chain(&e)
                )))
            }
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let cap = self.options.max_response_bytes;
        let mut bytes = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if (bytes.len() + chunk.len()) as u64 > cap {
                        return Err(ToolError::new(
                            ErrorCode::TooLarge,
                            format!("pack `{}` answered more than {cap} bytes", self.pack_id),
                        ));
                    }
                    bytes.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => {
                    return Err(unavailable(format!(
                        "the answer broke off (the call may have run; its idempotency key is \
                         {key}): {}",
                        source_chain(&e)
                    )))
                }
            }
        }
        if status == 503 && error_of(&bytes) == Some("overloaded") {
            return Ok(Attempt::Overloaded(retry_after));
        }
        Ok(Attempt::Answer(status, bytes))
    }

    /// What an answer means for the call.
    fn judge(
        &self,
        id: &str,
        ctx: &ToolContext,
        status: u16,
        bytes: &[u8],
    ) -> Result<Value, ToolError> {
        let pack = &self.pack_id;
        let fail = |code: ErrorCode, why: String| Err(ToolError::new(code, self.scrub(&why)));
        match status {
            200 => {}
            401 => {
                return fail(
                    ErrorCode::PackUnavailable,
                    format!(
                        "pack `{pack}` at {} refused Sluice's token (401): give Sluice the token \
                         the service was started with",
                        self.url
                    ),
                )
            }
            413 => {
                return fail(
                    ErrorCode::TooLarge,
                    format!("pack `{pack}` refused the request as too large (413)"),
                )
            }
            503 => {
                return fail(
                    ErrorCode::PackUnavailable,
                    format!(
                        "pack `{pack}` at {} is not ready (503): {}",
                        self.url,
                        head(bytes)
                    ),
                )
            }
            s => {
                return fail(
                    ErrorCode::PackProtocol,
                    format!(
                        "pack `{pack}` at {} answered {s}: {}",
                        self.url,
                        head(bytes)
                    ),
                )
            }
        }
        let answer: Value = match serde_json::from_slice(bytes) {
            Ok(v) => v,
            Err(e) => {
                return fail(
                    ErrorCode::PackProtocol,
                    format!(
                        "pack `{pack}` answered a body that is not JSON ({e}): {}",
                        head(bytes)
                    ),
                )
            }
        };
        match answer.get("kind").and_then(Value::as_str) {
            Some("result")
                if answer.get("v").and_then(Value::as_u64) == Some(u64::from(PROTOCOL)) =>
            {
                match answer {
                    Value::Object(mut m) => Ok(m.remove("output").unwrap_or(Value::Null)),
                    _ => Ok(Value::Null),
                }
            }
            Some("error") => {
                let code = answer
                    .get("code")
                    .and_then(Value::as_str)
                    .unwrap_or("(no code)");
                let message = answer.get("message").and_then(Value::as_str).unwrap_or("");
                let mapped = map_code(code);
                if mapped == ErrorCode::PackMismatch {
                    // The service changed under us: check it again before the next call.
                    self.forget();
                }
                let mut why = format!("pack `{pack}` answered {code}: {message}");
                if let Some(issues) = answer.get("issues").and_then(Value::as_array) {
                    why.push_str(&issues_text(issues));
                }
                if matches!(mapped, ErrorCode::Timeout | ErrorCode::Cancelled) {
                    why.push_str(&format!(" (call `{}` of `{id}`)", ctx.call_id()));
                }
                fail(mapped, why)
            }
            _ => fail(
                ErrorCode::PackProtocol,
                format!(
                    "pack `{pack}` answered a message that is neither a v2 result nor an error: {}",
                    head(bytes)
                ),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::Path;

    fn service() -> Arc<PackService> {
        let index = PackIndex::from_value(
            Path::new("i.json"),
            json!({"v": 1, "packId": "ledger", "packVersion": "1.0.0", "artifactVersion": "20261207.1",
                   "tools": [{"id": "ledger.deposit", "description": "d", "version": "1.0.0",
                              "input": {"type": "object"}, "output": {}, "modulePath": "t.py"}]}),
        )
        .unwrap();
        PackService::new(
            &index,
            "http://127.0.0.1:9/base/",
            PackToken::new(" s3cret "),
            PackOptions::default(),
        )
        .unwrap()
    }

    #[test]
    fn the_routes_sit_under_the_base_url_and_the_token_is_never_shown() {
        let s = service();
        assert_eq!(s.invoke_url.as_str(), "http://127.0.0.1:9/base/v1/invoke");
        assert_eq!(s.info_url.as_str(), "http://127.0.0.1:9/base/v1/info");
        assert!(!format!("{s:?}").contains("s3cret"));
        assert!(!format!("{:?}", s.token).contains("s3cret"));
        assert_eq!(s.scrub("bad token s3cret"), "bad token [redacted]");
    }

    #[test]
    fn info_that_agrees_has_no_differences_and_each_difference_is_named() {
        let s = service();
        let agree = json!({"protocol": 2, "packId": "ledger", "packVersion": "1.0.0",
            "artifactVersion": "20261207.1", "tools": [{"id": "ledger.deposit", "version": "1.0.0"}]});
        assert!(s.differences(&agree).is_empty());
        let differ = json!({"protocol": 2, "packId": "ledger", "packVersion": "1.1.0",
            "tools": [{"id": "ledger.deposit", "version": "1.1.0"}, {"id": "ledger.drop"}]});
        let d = s.differences(&differ).join("\n");
        assert!(d.contains("packVersion is 1.1.0"), "{d}");
        assert!(
            d.contains("`ledger.deposit` is version 1.0.0 in the index and 1.1.0 at the service"),
            "{d}"
        );
        assert!(
            d.contains("`ledger.drop`, which the index does not declare"),
            "{d}"
        );
        let gone = json!({"protocol": 1, "packId": "other", "tools": []});
        let d = s.differences(&gone).join("\n");
        assert!(
            d.contains("protocol 1") && d.contains("`other`") && d.contains("not at the service"),
            "{d}"
        );
    }

    #[test]
    fn a_url_that_is_not_http_or_is_a_metadata_address_is_refused() {
        let index = PackIndex::from_value(
            Path::new("i.json"),
            json!({"v": 1, "packId": "p", "tools": []}),
        )
        .unwrap();
        for bad in ["ftp://host/", "http://169.254.169.254/", "not a url"] {
            let e = PackService::new(&index, bad, PackToken::new("t"), PackOptions::default())
                .unwrap_err();
            assert!(matches!(e, Error::PackConfig { .. }), "{bad}: {e}");
        }
    }
}
