//! From what an MCP server answers to a call's output or error.

use rmcp::model::CallToolResult;
use rmcp::service::ServiceError;
use serde_json::Value;

use crate::error::ErrorCode;
use crate::transport::handler::ToolError;

/// The output of a tool result: `structuredContent`, else the content list; `isError` makes it
/// an error whose message is the content's text.
pub(crate) fn output_of(result: CallToolResult, remote: &str) -> Result<Value, ToolError> {
    if result.is_error == Some(true) {
        let text: Vec<&str> = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
            .collect();
        let message = if text.is_empty() {
            result
                .structured_content
                .as_ref()
                .map(Value::to_string)
                .unwrap_or_else(|| "the server gave no reason".into())
        } else {
            text.join("\n")
        };
        return Err(ToolError::new(
            ErrorCode::McpToolError,
            format!("the MCP tool `{remote}` failed: {message}"),
        ));
    }
    if let Some(structured) = result.structured_content {
        return Ok(structured);
    }
    serde_json::to_value(&result.content).map_err(|e| {
        ToolError::new(
            ErrorCode::McpProtocol,
            format!("the content of `{remote}`'s result cannot be read as JSON: {e}"),
        )
    })
}

/// Turns an rmcp error on a call into the call's error.
pub(crate) fn call_error(endpoint: &str, remote: &str, e: ServiceError) -> ToolError {
    match e {
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => ToolError::new(
            ErrorCode::McpServerExited,
            format!(
                "the MCP server `{endpoint}` went away while `{remote}` ran; the next call starts \
                 it again"
            ),
        ),
        ServiceError::McpError(data) => ToolError::new(
            ErrorCode::McpError,
            format!(
                "the MCP server `{endpoint}` refused `{remote}`: {} (code {})",
                data.message, data.code.0
            ),
        ),
        ServiceError::Timeout { timeout } => ToolError::new(
            ErrorCode::Timeout,
            format!(
                "the MCP server `{endpoint}` did not answer `{remote}` within {} ms",
                timeout.as_millis()
            ),
        ),
        other => ToolError::new(
            ErrorCode::McpProtocol,
            format!("the call of `{remote}` on the MCP server `{endpoint}` failed: {other}"),
        ),
    }
}

pub(crate) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ContentBlock as Content;
    use serde_json::json;

    #[test]
    fn structured_content_wins_else_the_content_list() {
        let r = CallToolResult::structured(json!({"sum": 3}));
        assert_eq!(output_of(r, "t").unwrap(), json!({"sum": 3}));
        let r = CallToolResult::success(vec![Content::text("hi")]);
        assert_eq!(
            output_of(r, "t").unwrap(),
            json!([{"type": "text", "text": "hi"}])
        );
    }

    #[test]
    fn is_error_makes_an_error_with_the_text() {
        let r = CallToolResult::error(vec![Content::text("no such file")]);
        let e = output_of(r, "read").unwrap_err();
        assert_eq!(e.code, "mcp-tool-error");
        assert!(e.message.contains("no such file"), "{}", e.message);
    }
}
