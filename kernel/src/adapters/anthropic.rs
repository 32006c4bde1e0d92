//! Anthropic Messages: tools with `input_schema` out; a `Message`, an assistant message or its
//! content in (`tool_use` blocks are the calls; text, thinking and other blocks are ignored); one
//! `user` message of `tool_result` blocks back.

use serde_json::{json, Value};

use super::common::{
    batch_of, block_kind, changes_of, has_id, make_call, offered, result_text, wrong_shape,
    ArgsForm, ExportOptions, Exported, FnCall,
};
use super::names::ToolNames;
use super::schema;
use crate::error::Result;
use crate::model::{Batch, Call, Status};
use crate::run::{BatchResult, CallResult};
use crate::transport::ToolRegistry;

const EXPECTED: &str = "an Anthropic assistant message (`{\"role\": \"assistant\", \"content\": \
                        [...]}`), a Message, or its content array";

/// The registry's tools (each id's highest version) as Anthropic tools.
pub fn tools(registry: &ToolRegistry, names: &ToolNames) -> Vec<Value> {
    export(registry, names, &ExportOptions::default()).definitions
}

/// The registry's tools as Anthropic tools (`{name, description, input_schema}`).
pub fn export(registry: &ToolRegistry, names: &ToolNames, options: &ExportOptions) -> Exported {
    let mut out = Exported::default();
    for (t, name) in offered(registry, names, options) {
        let mut notes = schema::Notes::default();
        let input = schema::object_root(&t.manifest().input, &mut notes);
        changes_of(&name, notes, &mut out.changes);
        out.definitions.push(json!({"name": name,
            "description": t.manifest().description.as_str(), "input_schema": input}));
    }
    out
}

/// A batch from an assistant message (a `Message` too) or its content array: `tool_use` blocks
/// are the calls; other blocks are ignored. A message that only answers in words is an empty
/// batch.
pub fn batch(tenant: &str, message: &Value, names: &ToolNames) -> Result<Batch> {
    let empty: &[Value] = &[];
    let blocks: &[Value] = match message {
        Value::Array(a) => a,
        Value::Object(o) => {
            let assistant = match o.get("role") {
                Some(r) => r == "assistant",
                None => o.get("type").and_then(Value::as_str) == Some("message"),
            };
            if !assistant || o.contains_key("choices") || o.contains_key("tool_calls") {
                return Err(wrong_shape("", EXPECTED, message));
            }
            match o.get("content") {
                Some(Value::Array(a)) => a,
                Some(Value::String(_)) | None | Some(Value::Null) => empty,
                Some(_) => {
                    return Err(super::common::malformed(
                        "/content",
                        "`content` must be an array or a string",
                    ))
                }
            }
        }
        _ => return Err(wrong_shape("", EXPECTED, message)),
    };
    let foreign = blocks
        .iter()
        .filter_map(block_kind)
        .any(|k| !k.starts_with("Anthropic"));
    if foreign {
        return Err(wrong_shape("", EXPECTED, message));
    }
    let uses: Vec<&Value> = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
        .collect();
    let made_up: Vec<bool> = uses.iter().map(|b| !has_id(b.get("id"))).collect();
    let calls: Vec<Call> = uses
        .iter()
        .enumerate()
        .map(|(i, b)| call(b, i, names))
        .collect();
    batch_of(tenant, calls, &made_up)
}

/// One call from one `tool_use` block.
pub fn call(b: &Value, index: usize, names: &ToolNames) -> Call {
    make_call(
        FnCall {
            index,
            id: b.get("id"),
            id_key: "id",
            id_required: true,
            name: b.get("name"),
            args: b.get("input"),
            form: ArgsForm::Object,
            what: "tool_use block",
        },
        names,
    )
}

/// The `user` message of `tool_result` blocks to send back, in submission order: one message,
/// or none when the batch had no call (the API refuses a message with empty content).
pub fn results(result: &BatchResult) -> Vec<Value> {
    results_of(&result.results)
}

/// [`results`] of a slice of results.
pub fn results_of(results: &[CallResult]) -> Vec<Value> {
    if results.is_empty() {
        return Vec::new();
    }
    let blocks: Vec<Value> = results
        .iter()
        .map(|r| {
            json!({"type": "tool_result", "tool_use_id": r.id, "content": result_text(r),
                   "is_error": r.status != Status::Ok})
        })
        .collect();
    vec![json!({"role": "user", "content": blocks})]
}
