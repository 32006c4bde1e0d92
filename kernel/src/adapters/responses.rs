//! The OpenAI Responses API: `function` tools out; a `Response` or its `output` items in (the
//! `function_call` items are the calls, keyed by `call_id`; other items are ignored);
//! `function_call_output` items back.

use serde_json::{json, Value};

use super::common::{
    batch_of, block_kind, has_id, make_call, offered, result_text, wrong_shape, ArgsForm,
    ExportOptions, Exported, FnCall,
};
use super::names::ToolNames;
use super::openai;
use crate::error::Result;
use crate::model::{Batch, Call};
use crate::run::CallResult;
use crate::transport::ToolRegistry;

const EXPECTED: &str = "an OpenAI Responses `Response` (`{\"object\": \"response\", \"output\": \
                        [...]}`) or its `output` items";

/// The registry's tools as Responses function tools (`{"type": "function", name, description,
/// parameters, strict}`), with what was changed to fit.
pub fn export(registry: &ToolRegistry, names: &ToolNames, options: &ExportOptions) -> Exported {
    let mut out = Exported::default();
    for (t, name) in offered(registry, names, options) {
        let (parameters, strict) =
            openai::parameters(t.manifest().input.clone(), &name, options, &mut out);
        out.definitions
            .push(json!({"type": "function", "name": name,
            "description": t.manifest().description.as_str(),
            "parameters": parameters, "strict": strict}));
    }
    out
}

/// A batch from a `Response` or its `output` items: each `function_call` item is a call, its
/// `call_id` the call id (the item's own `id` is not what the reply names).
pub fn batch(tenant: &str, doc: &Value, names: &ToolNames) -> Result<Batch> {
    let items: &[Value] = match doc {
        Value::Array(a) => a,
        Value::Object(o) if o.get("output").is_some_and(Value::is_array) => o["output"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default(),
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function_call") => {
            std::slice::from_ref(doc)
        }
        _ => return Err(wrong_shape("", EXPECTED, doc)),
    };
    let foreign = items
        .iter()
        .filter_map(block_kind)
        .any(|k| !(k.starts_with("OpenAI Responses") || k == "messages"));
    if foreign {
        return Err(wrong_shape("", EXPECTED, doc));
    }
    let calls: Vec<&Value> = items
        .iter()
        .filter(|i| i.get("type").and_then(Value::as_str) == Some("function_call"))
        .collect();
    let made_up: Vec<bool> = calls.iter().map(|c| !has_id(c.get("call_id"))).collect();
    let calls: Vec<Call> = calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            make_call(
                FnCall {
                    index: i,
                    id: c.get("call_id"),
                    id_key: "call_id",
                    id_required: true,
                    name: c.get("name"),
                    args: c.get("arguments"),
                    form: ArgsForm::JsonText,
                    what: "function_call item",
                },
                names,
            )
        })
        .collect();
    batch_of(tenant, calls, &made_up)
}

/// The `function_call_output` items to send back, in submission order.
pub fn results(results: &[CallResult]) -> Vec<Value> {
    results
        .iter()
        .map(|r| json!({"type": "function_call_output", "call_id": r.id, "output": result_text(r)}))
        .collect()
}
