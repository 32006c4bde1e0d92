//! Google Gemini: one `Tool` of `functionDeclarations` out (schemas in Gemini's OpenAPI subset);
//! a `GenerateContentResponse`, a `Content` or its `parts` in (`functionCall` parts are the
//! calls; text and thought parts are ignored); one `user` `Content` of `functionResponse` parts
//! back. The REST API's camelCase keys and the Python SDK's snake_case ones
//! (`function_call`) are both read.

use serde_json::{json, Map, Value};

use super::common::{
    batch_of, block_kind, changes_of, has_id, make_call, offered, set, wrong_shape, ArgsForm,
    ExportOptions, Exported, FnCall, IngestOptions,
};
use super::names::ToolNames;
use super::schema;
use crate::error::Result;
use crate::model::{Batch, Call, Status};
use crate::run::CallResult;
use crate::transport::ToolRegistry;

const EXPECTED: &str = "a Gemini GenerateContentResponse, a `Content` (`{\"role\": \"model\", \
                        \"parts\": [...]}`) or its parts";

/// The registry's tools as one Gemini `Tool` (`[{"functionDeclarations": [{name, description,
/// parameters}]}]`; no tool, no entry), with what was changed to fit Gemini's schema subset.
pub fn export(registry: &ToolRegistry, names: &ToolNames, options: &ExportOptions) -> Exported {
    let mut out = Exported::default();
    let mut decls = Vec::new();
    for (t, name) in offered(registry, names, options) {
        let mut notes = schema::Notes::default();
        let mut d = json!({"name": name, "description": t.manifest().description.as_str()});
        if let Some(p) = schema::gemini(&t.manifest().input, &mut notes) {
            set(&mut d, "parameters", p);
        }
        changes_of(&name, notes, &mut out.changes);
        decls.push(d);
    }
    if !decls.is_empty() {
        out.definitions.push(json!({"functionDeclarations": decls}));
    }
    out
}

/// A key in either spelling: the REST API's camelCase or the Python SDK's snake_case (a `null`,
/// as the SDK writes every unset field, is absent).
fn get<'a>(o: &'a Value, camel: &str, snake: &str) -> Option<&'a Value> {
    [camel, snake]
        .into_iter()
        .filter_map(|k| o.get(k))
        .find(|v| !v.is_null())
}

/// A batch from a response (its first candidate's content, or candidate `options.choice`), a
/// `Content` or its parts. A call Gemini sent without an id is named by its position (`#0`, …)
/// and runs: Gemini matches results by name and order.
pub fn batch_with(
    tenant: &str,
    doc: &Value,
    names: &ToolNames,
    options: &IngestOptions,
) -> Result<Batch> {
    let empty: &[Value] = &[];
    let parts: &[Value] = match doc {
        Value::Array(a) => a,
        Value::Object(o) if o.contains_key("candidates") => {
            let n = options.choice;
            let Some(c) = o["candidates"].as_array().and_then(|c| c.get(n)) else {
                return Err(super::common::malformed(
                    "/candidates",
                    &format!("the response has no candidate {n}"),
                ));
            };
            match c.get("content") {
                Some(content) => content_parts(content, &format!("/candidates/{n}/content"))?,
                None => empty,
            }
        }
        Value::Object(o) if o.contains_key("parts") => content_parts(doc, "")?,
        _ => return Err(wrong_shape("", EXPECTED, doc)),
    };
    if parts
        .iter()
        .filter_map(block_kind)
        .any(|k| !k.starts_with("Gemini"))
    {
        return Err(wrong_shape("", EXPECTED, doc));
    }
    let fcalls: Vec<&Value> = parts
        .iter()
        .filter_map(|p| get(p, "functionCall", "function_call"))
        .collect();
    let made_up: Vec<bool> = fcalls.iter().map(|f| !has_id(f.get("id"))).collect();
    let calls: Vec<Call> = fcalls
        .iter()
        .enumerate()
        .map(|(i, f)| {
            make_call(
                FnCall {
                    index: i,
                    id: f.get("id"),
                    id_key: "id",
                    id_required: false,
                    name: f.get("name"),
                    args: f.get("args"),
                    form: ArgsForm::Object,
                    what: "functionCall part",
                },
                names,
            )
        })
        .collect();
    batch_of(tenant, calls, &made_up)
}

/// A batch from a response's first candidate, a `Content` or its parts.
pub fn batch(tenant: &str, doc: &Value, names: &ToolNames) -> Result<Batch> {
    batch_with(tenant, doc, names, &IngestOptions::default())
}

/// The parts of a model `Content`.
fn content_parts<'a>(content: &'a Value, at: &str) -> Result<&'a [Value]> {
    match content.get("role").and_then(Value::as_str) {
        None | Some("model") => {}
        Some(_) => return Err(wrong_shape(at, EXPECTED, content)),
    }
    match content.get("parts") {
        Some(Value::Array(p)) => Ok(p),
        None | Some(Value::Null) => Ok(&[]),
        Some(_) => Err(super::common::malformed(
            &format!("{at}/parts"),
            "`parts` must be an array",
        )),
    }
}

/// The `Content` to send back: one `user` content of `functionResponse` parts, in submission
/// order (`response` is `{"output": …}`, or `{"error": …}` for a call that did not end `ok`); none
/// when the batch had no call.
pub fn results(results: &[CallResult], names: &ToolNames) -> Vec<Value> {
    if results.is_empty() {
        return Vec::new();
    }
    let parts: Vec<Value> = results
        .iter()
        .map(|r| {
            let response = match (&r.status, &r.output, &r.error) {
                (Status::Ok, out, _) => json!({"output": out.clone().unwrap_or(Value::Null)}),
                (status, _, e) => json!({"error": {
                    "status": status.as_str(),
                    "code": e.as_ref().map(|e| e.code.as_str()).unwrap_or(status.as_str()),
                    "message": e.as_ref().map(|e| e.message.as_str()).unwrap_or(""),
                }}),
            };
            let mut f = Map::new();
            // A position-made id (`#0`) is Sluice's, not Gemini's: it is not sent back.
            if !r.id.starts_with('#') {
                f.insert("id".into(), json!(r.id));
            }
            f.insert(
                "name".into(),
                json!(names.name_of(&r.tool, r.version.as_deref())),
            );
            f.insert("response".into(), response);
            json!({"functionResponse": f})
        })
        .collect();
    vec![json!({"role": "user", "parts": parts})]
}
