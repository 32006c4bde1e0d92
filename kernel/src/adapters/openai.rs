//! OpenAI Chat Completions: `function` tools out; a `ChatCompletion`, an assistant message or its
//! `tool_calls` in; `tool` role messages back.

use serde_json::{json, Value};

use super::common::{
    batch_of, block_kind, changes_of, has_id, make_call, offered, result_text, set, wrong_shape,
    ArgsForm, ExportOptions, Exported, FnCall, IngestOptions,
};
use super::names::ToolNames;
use super::schema;
use crate::error::Result;
use crate::model::{Batch, Call};
use crate::run::{BatchResult, CallResult};
use crate::transport::ToolRegistry;

const EXPECTED: &str = "an OpenAI assistant message (`{\"role\": \"assistant\", \"tool_calls\": \
                        [...]}`), its `tool_calls` array, or a ChatCompletion";

/// The registry's tools (each id's highest version) as Chat Completions function tools.
pub fn tools(registry: &ToolRegistry, names: &ToolNames) -> Vec<Value> {
    export(registry, names, &ExportOptions::default()).definitions
}

/// The registry's tools as Chat Completions function tools (`{"type": "function", "function":
/// {name, description, parameters[, strict]}}`), with what was changed to fit.
pub fn export(registry: &ToolRegistry, names: &ToolNames, options: &ExportOptions) -> Exported {
    let mut out = Exported::default();
    for (t, name) in offered(registry, names, options) {
        let (parameters, strict) = parameters(t.manifest().input.clone(), &name, options, &mut out);
        let mut f = json!({"name": name, "description": t.manifest().description.as_str(),
                           "parameters": parameters});
        if options.strict {
            set(&mut f, "strict", json!(strict));
        }
        out.definitions
            .push(json!({"type": "function", "function": f}));
    }
    out
}

/// A tool's parameters for the OpenAI APIs, strict when asked and possible; and whether strict.
pub(crate) fn parameters(
    input: serde_json::Map<String, Value>,
    name: &str,
    options: &ExportOptions,
    out: &mut Exported,
) -> (Value, bool) {
    let mut notes = schema::Notes::default();
    let root = schema::object_root(&input, &mut notes);
    let result = if options.strict {
        match schema::openai_strict(&root, &mut notes) {
            Ok(s) => (s, true),
            Err(why) => {
                notes.0.push((
                    String::new(),
                    format!("offered with `strict: false`: {why}"),
                ));
                (Value::Object(root), false)
            }
        }
    } else {
        (Value::Object(root), false)
    };
    changes_of(name, notes, &mut out.changes);
    result
}

/// A batch from an assistant message or its `tool_calls` array (the first choice of a
/// `ChatCompletion` too). Arguments arrive as a JSON string; one that is not a JSON object fails
/// its call alone.
pub fn batch(tenant: &str, message: &Value, names: &ToolNames) -> Result<Batch> {
    batch_with(tenant, message, names, &IngestOptions::default())
}

/// [`batch`], reading choice `options.choice` of a `ChatCompletion`.
pub fn batch_with(
    tenant: &str,
    doc: &Value,
    names: &ToolNames,
    options: &IngestOptions,
) -> Result<Batch> {
    let calls = tool_calls(doc, options)?;
    let made_up: Vec<bool> = calls.iter().map(|c| !has_id(c.get("id"))).collect();
    let calls: Vec<Call> = calls
        .iter()
        .enumerate()
        .map(|(i, c)| call(c, i, names))
        .collect();
    batch_of(tenant, calls, &made_up)
}

/// The `tool_calls` of a Chat Completions document, and the JSON pointer they are at.
fn tool_calls<'a>(doc: &'a Value, options: &IngestOptions) -> Result<&'a [Value]> {
    let empty: &[Value] = &[];
    match doc {
        Value::Array(a) => {
            if a.iter()
                .filter_map(block_kind)
                .any(|k| !k.starts_with("OpenAI Chat"))
            {
                return Err(wrong_shape("", EXPECTED, doc));
            }
            Ok(a)
        }
        Value::Object(o) if o.contains_key("choices") => {
            let n = options.choice;
            let Some(choice) = o
                .get("choices")
                .and_then(Value::as_array)
                .and_then(|c| c.get(n))
            else {
                return Err(super::common::malformed(
                    "/choices",
                    &format!("the ChatCompletion has no choice {n}"),
                ));
            };
            let calls = message_calls(&choice["message"], &format!("/choices/{n}/message"))?;
            Ok(calls.unwrap_or(empty))
        }
        Value::Object(_) => Ok(message_calls(doc, "")?.unwrap_or(empty)),
        _ => Err(wrong_shape("", EXPECTED, doc)),
    }
}

/// The `tool_calls` of an assistant message (`None` when it answered in words).
fn message_calls<'a>(msg: &'a Value, at: &str) -> Result<Option<&'a [Value]>> {
    let assistant = match msg.get("role") {
        Some(r) => r == "assistant",
        None => msg.get("tool_calls").is_some(),
    };
    // Content parts of other APIs (`tool_use` blocks, say) mean another API's message.
    let foreign = msg
        .get("content")
        .and_then(Value::as_array)
        .is_some_and(|c| c.iter().filter_map(block_kind).next().is_some());
    if !assistant || foreign {
        return Err(wrong_shape(at, EXPECTED, msg));
    }
    match msg.get("tool_calls") {
        Some(Value::Array(a)) => Ok(Some(a)),
        None | Some(Value::Null) => Ok(None),
        Some(_) => Err(super::common::malformed(
            &format!("{at}/tool_calls"),
            "`tool_calls` must be an array",
        )),
    }
}

/// One call from one `tool_calls` entry (its position names it when it has no id).
pub fn call(c: &Value, index: usize, names: &ToolNames) -> Call {
    let f = c.get("function");
    make_call(
        FnCall {
            index,
            id: c.get("id"),
            id_key: "id",
            id_required: true,
            name: f.and_then(|f| f.get("name")),
            args: f.and_then(|f| f.get("arguments")),
            form: ArgsForm::JsonText,
            what: "tool call",
        },
        names,
    )
}

/// The `tool` role messages to send back, in submission order.
pub fn results(result: &BatchResult) -> Vec<Value> {
    results_of(&result.results)
}

/// [`results`] of a slice of results.
pub fn results_of(results: &[CallResult]) -> Vec<Value> {
    results
        .iter()
        .map(|r| json!({"role": "tool", "tool_call_id": r.id, "content": result_text(r)}))
        .collect()
}
