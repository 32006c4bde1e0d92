//! What travels: the invoke's `ctx`, the pack's error codes read as Sluice's, and the text of a
//! body or a transport failure for a message.

use serde_json::{Map, Value};

use crate::error::ErrorCode;
use crate::transport::context::ToolContext;

/// The pack protocol version Sluice speaks.
pub const PROTOCOL: u8 = 2;

/// Sluice's code for a pack's error code.
pub(super) fn map_code(code: &str) -> ErrorCode {
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
pub(super) fn issues_text(issues: &[Value]) -> String {
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
pub(super) fn wire_ctx(ctx: &ToolContext, key: &str) -> Value {
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
pub(super) fn error_of(bytes: &[u8]) -> Option<&str> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
