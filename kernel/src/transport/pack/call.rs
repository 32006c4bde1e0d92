//! One call to a pack service: the `invoke` request, its retries, and what its answer means.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::PackService;
use crate::error::ErrorCode;
use crate::model::Manifest;
use crate::transport::context::ToolContext;
use crate::transport::handler::{Handler, HandlerFuture, ToolError};

/// The pack protocol version Sluice speaks.
pub const PROTOCOL: u8 = 2;

/// The first wait before a `503 overloaded` is retried; each retry doubles it, up to the
/// service's `retry-after` (else 1 s).
const FIRST_BACKOFF: Duration = Duration::from_millis(20);

/// Carries out one pack tool's calls on its service.
#[derive(Debug)]
pub(crate) struct PackHandler {
    service: Arc<PackService>,
    id: Arc<str>,
    version: Arc<str>,
}

impl PackHandler {
    pub(crate) fn new(service: Arc<PackService>, manifest: &Manifest) -> Self {
        PackHandler {
            service,
            id: manifest.id.as_str().into(),
            version: manifest.version.as_str().into(),
        }
    }
}

impl Handler for PackHandler {
    fn call(&self, ctx: ToolContext, input: Value) -> HandlerFuture {
        let service = self.service.clone();
        let (id, version) = (self.id.clone(), self.version.clone());
        Box::pin(async move { service.invoke(&id, &version, ctx, input).await })
    }
}

/// What an attempt came to.
enum Attempt {
    Answer(u16, Vec<u8>),
    Overloaded(Option<Duration>),
}

impl PackService {
    /// Sends one call, retrying `503 overloaded` while its deadline allows.
    async fn invoke(
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
                    transport_failure(&e)
                )))
            }
            Err(e) => {
                return Err(unavailable(format!(
                    "the exchange failed (the call may have run; its idempotency key is {key}): {}",
                    transport_failure(&e)
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
                        transport_failure(&e)
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

/// Sluice's code for a pack's error code.
fn map_code(code: &str) -> ErrorCode {
    match code {
        "input-validation-failed" => ErrorCode::InvalidInput,
        "output-validation-failed" => ErrorCode::InvalidOutput,
        "deadline-exceeded" => ErrorCode::Timeout,
        "cancelled" => ErrorCode::Cancelled,
        "tool-not-in-pack" | "tool-version-mismatch" => ErrorCode::PackMismatch,
        "malformed-message" | "unknown-protocol-version" | "unexpected-message-kind" => {
            ErrorCode::PackProtocol
        }
        _ => ErrorCode::PackToolError,
    }
}

/// The issues of a validation error, as text: ` (at /cents: must be >= 1; …)`.
fn issues_text(issues: &[Value]) -> String {
    let parts: Vec<String> = issues
        .iter()
        .take(5)
        .map(|i| {
            let at = i.get("instancePath").and_then(Value::as_str).unwrap_or("");
            let what = i
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("invalid");
            if at.is_empty() {
                what.to_owned()
            } else {
                format!("at {at}: {what}")
            }
        })
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join("; "))
    }
}

/// The `ctx` of an invoke: the call's tenant, batch, id and key, and the values its tool
/// declares in `needsSpec.env` and `needsSpec.secrets`.
fn wire_ctx(ctx: &ToolContext, key: &str) -> Value {
    let mut out = Map::new();
    out.insert("tenantId".into(), ctx.tenant().into());
    out.insert("runId".into(), ctx.batch_id().into());
    out.insert("requestId".into(), ctx.call_id().into());
    out.insert("idempotencyKey".into(), key.into());
    if let Some(ns) = ctx.manifest().needs_spec.as_ref() {
        let env: Map<String, Value> = ns
            .env
            .iter()
            .flatten()
            .filter_map(|(name, _)| Some((name.clone(), Value::String(ctx.env(name).ok()?))))
            .collect();
        if !env.is_empty() {
            out.insert("env".into(), Value::Object(env));
        }
        let secrets: Map<String, Value> = ns
            .secrets
            .iter()
            .flatten()
            .filter_map(|(name, _)| {
                Some((name.clone(), Value::String(ctx.resolve_secret(name).ok()?)))
            })
            .collect();
        if !secrets.is_empty() {
            out.insert("secrets".into(), Value::Object(secrets));
        }
    }
    Value::Object(out)
}

/// `{"error": "..."}`'s text, when the body is that.
fn error_of(bytes: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(bytes).ok()?;
    // A tiny body; parse it without keeping it.
    let start = text.find("\"error\"")?;
    let rest = text
        .get(start + 7..)?
        .trim_start()
        .strip_prefix(':')?
        .trim_start();
    let rest = rest.strip_prefix('"')?;
    rest.split('"').next()
}

/// The first 512 bytes of a body, as text, for a message.
pub(super) fn head(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes.get(..512).unwrap_or(bytes)).into_owned()
}

/// A transport error and its causes, as text.
pub(super) fn transport_failure(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    let mut cur = std::error::Error::source(e);
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_codes_map_to_sluice_codes() {
        assert_eq!(map_code("input-validation-failed"), ErrorCode::InvalidInput);
        assert_eq!(map_code("deadline-exceeded"), ErrorCode::Timeout);
        assert_eq!(map_code("tool-version-mismatch"), ErrorCode::PackMismatch);
        assert_eq!(map_code("handler-throw"), ErrorCode::PackToolError);
        assert_eq!(map_code("something-new"), ErrorCode::PackToolError);
    }

    #[test]
    fn an_overloaded_body_is_recognized() {
        assert_eq!(error_of(br#"{"error":"overloaded"}"#), Some("overloaded"));
        assert_eq!(error_of(br#"{"error": "not ready"}"#), Some("not ready"));
        assert_eq!(error_of(b"nope"), None);
    }

    #[test]
    fn issues_read_as_places_and_reasons() {
        let issues = vec![
            json!({"instancePath": "/cents", "message": "must be >= 1"}),
            json!({"message": "bad"}),
        ];
        assert_eq!(issues_text(&issues), " (at /cents: must be >= 1; bad)");
    }
}
