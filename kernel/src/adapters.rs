//! Speaking the model APIs: tools out as function definitions, tool calls in as batches, results
//! back as the messages each API expects next.
//!
//! Takes in: the registered tools, a model's response, a batch's results. Hands on: OpenAI
//! function tools, Anthropic tools and MCP `tools/list` entries; a [`Batch`] built from OpenAI
//! `tool_calls`, Anthropic `tool_use` blocks or MCP `tools/call` requests (in the model's order,
//! with the model's call ids); and OpenAI `tool` messages, one Anthropic `user` message of
//! `tool_result` blocks, or MCP call results.
//!
//! # Names
//!
//! Kindgi ids hold characters the APIs refuse (OpenAI names match `^[a-zA-Z0-9_-]{1,64}$`).
//! [`ToolNames`] maps each id to a name reversibly: letters, digits and `-` stay; `.` becomes
//! `__`; `_` becomes `_u`; any other character becomes `_x<hex>_` (its code point). So
//! `acme.kv-get` is `acme__kv-get` and `sluice.kv.get` is `sluice__kv__get`. A name longer than 64
//! is cut to 55 characters plus `_h` and 7 hex digits of the id's sha256; such names are resolved
//! through the table, which refuses two ids that map to one name, naming both.
//!
//! # Malformed model output
//!
//! A call with no id, arguments that are not a JSON object, or an unknown function name fails
//! alone (`invalid-input`, or `unknown-tool`), never the batch: the model gets an answer for it.
//!
//! ```
//! use sluice_kernel::{adapters::{self, ToolNames}, builtin};
//! use serde_json::json;
//! let tools = builtin::registry(builtin::BuiltinConfig::default()).unwrap();
//! let names = ToolNames::new(&tools).unwrap();
//! let batch = adapters::openai::batch("acme", &json!({"role": "assistant", "tool_calls": [
//!     {"id": "call_1", "type": "function",
//!      "function": {"name": "sluice__kv__get", "arguments": "{\"key\": \"k\"}"}}
//! ]}), &names).unwrap();
//! assert_eq!((batch.calls[0].id.as_str(), batch.calls[0].tool.as_str()), ("call_1", "sluice.kv.get"));
//! ```

use std::collections::HashMap;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::model::{Batch, Call, EffectKind, Status};
use crate::run::{BatchResult, CallResult};
use crate::transport::{Tool, ToolRegistry};

/// Longest name the OpenAI API accepts.
pub const MAX_NAME: usize = 64;

/// Encodes a Kindgi id as an API function name (see the module docs). Reversible by
/// [`decode_name`] unless it had to be shortened.
pub fn encode_name(id: &str) -> String {
    let mut out = String::with_capacity(id.len() + 4);
    // Where each encoded character ends: a shortened name is cut only there, so its `_h` marker
    // always starts an escape the decoder refuses.
    let mut ends = Vec::with_capacity(id.len());
    for c in id.chars() {
        match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' => out.push(c),
            '.' => out.push_str("__"),
            '_' => out.push_str("_u"),
            c => out.push_str(&format!("_x{:x}_", c as u32)),
        }
        ends.push(out.len());
    }
    if out.len() > MAX_NAME || out.is_empty() {
        let digest = hex::encode(Sha256::digest(id.as_bytes()));
        let cut = ends.iter().copied().filter(|e| *e <= 55).max().unwrap_or(0);
        out.truncate(cut);
        out.push_str("_h");
        out.push_str(&digest[..7]);
    }
    out
}

/// Decodes a name made by [`encode_name`] (not a shortened one: those carry `_h` + digest and
/// are resolved through a [`ToolNames`] table).
pub fn decode_name(name: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '_' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            '_' => out.push('.'),
            'u' => out.push('_'),
            'x' => {
                let mut hexs = String::new();
                loop {
                    match chars.next()? {
                        '_' => break,
                        h => hexs.push(h),
                    }
                }
                out.push(char::from_u32(u32::from_str_radix(&hexs, 16).ok()?)?);
            }
            _ => return None,
        }
    }
    Some(out)
}

/// The name table of a registry: id <-> API name, collision-checked.
#[derive(Debug, Clone, Default)]
pub struct ToolNames {
    to_name: HashMap<String, String>,
    to_id: HashMap<String, String>,
}

impl ToolNames {
    /// Builds the table; two ids that map to one name are an error naming both.
    pub fn new(registry: &ToolRegistry) -> Result<Self> {
        let mut t = ToolNames::default();
        for tool in registry.iter() {
            let id = tool.id().to_owned();
            let name = encode_name(&id);
            if let Some(other) = t.to_id.get(&name) {
                return Err(Error::NameCollision {
                    name,
                    first: other.clone(),
                    second: id,
                });
            }
            t.to_id.insert(name.clone(), id.clone());
            t.to_name.insert(id, name);
        }
        Ok(t)
    }

    /// The API name of a tool id.
    pub fn name(&self, id: &str) -> String {
        self.to_name
            .get(id)
            .cloned()
            .unwrap_or_else(|| encode_name(id))
    }

    /// The tool id behind an API name (a name that is no registered tool's decodes as written,
    /// so the call fails `unknown-tool` naming it).
    pub fn id(&self, name: &str) -> String {
        self.to_id
            .get(name)
            .cloned()
            .or_else(|| decode_name(name))
            .unwrap_or_else(|| name.to_owned())
    }
}

fn input_schema(tool: &Tool) -> Value {
    let mut s = tool.manifest().input.clone();
    s.remove("$schema");
    Value::Object(s)
}

/// The MCP annotations of a tool.
pub fn annotations(tool: &Tool) -> Value {
    let kinds: Vec<EffectKind> = tool.manifest().effects().iter().map(|e| e.kind).collect();
    json!({
        "readOnlyHint": tool.access_plan().is_read_only(),
        "destructiveHint": kinds.contains(&EffectKind::Deletes),
        "openWorldHint": kinds.contains(&EffectKind::Network) || kinds.contains(&EffectKind::ExternalSideEffect),
    })
}

/// Results as plain text for the model: the output's JSON for `ok`, else what happened.
pub fn result_text(r: &CallResult) -> String {
    match (&r.status, &r.output, &r.error) {
        (Status::Ok, Some(out), _) => out.to_string(),
        (status, _, Some(e)) => format!("{status} ({}): {}", e.code, e.message),
        (status, _, None) => status.to_string(),
    }
}

/// OpenAI chat/responses function tools.
pub mod openai {
    use super::*;

    /// The registry's tools as OpenAI function tools.
    pub fn tools(registry: &ToolRegistry, names: &ToolNames) -> Vec<Value> {
        registry
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": names.name(t.id()),
                    "description": t.manifest().description.as_str(),
                    "parameters": input_schema(t),
                }})
            })
            .collect()
    }

    /// A batch from an assistant message (`{"role": "assistant", "tool_calls": [...]}`) or its
    /// `tool_calls` array. Arguments arrive as a JSON string; one that is not a JSON object fails
    /// its call alone.
    pub fn batch(tenant: &str, message: &Value, names: &ToolNames) -> Result<Batch> {
        let calls = match message {
            Value::Array(a) => a,
            Value::Object(o) => match o.get("tool_calls") {
                Some(Value::Array(a)) => a,
                None | Some(Value::Null) => &Vec::new(),
                Some(_) => return Err(malformed("/tool_calls", "`tool_calls` must be an array")),
            },
            _ => {
                return Err(malformed(
                    "",
                    "expected an assistant message or its `tool_calls` array",
                ))
            }
        };
        let made_up: Vec<bool> = calls.iter().map(|c| !has_id(c.get("id"))).collect();
        let mut calls: Vec<Call> = calls
            .iter()
            .enumerate()
            .map(|(i, c)| call(c, i, names))
            .collect();
        unclash(&mut calls, &made_up);
        Batch::new(tenant, calls)
    }

    /// One call from one `tool_calls` entry (its position names it when it has no id).
    pub fn call(c: &Value, index: usize, names: &ToolNames) -> Call {
        let f = c.get("function").cloned().unwrap_or(Value::Null);
        let name = f.get("name").and_then(Value::as_str).unwrap_or("");
        let tool = names.id(name);
        let Some(id) = c
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        else {
            return Call::defective(
                format!("#{index}"),
                tool,
                "the tool call has no `id`, so its result could not be matched to it",
            );
        };
        if name.is_empty() {
            return Call::defective(id, tool, "the tool call names no function");
        }
        let input = match f.get("arguments") {
            Some(Value::String(s)) if s.trim().is_empty() => Value::Object(Map::new()),
            Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                Ok(v @ Value::Object(_)) => v,
                Ok(_) => {
                    return Call::defective(id, tool, "the arguments are JSON but not an object")
                }
                Err(e) => {
                    return Call::defective(id, tool, format!("the arguments are not JSON: {e}"))
                }
            },
            Some(v @ Value::Object(_)) => v.clone(),
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(_) => return Call::defective(id, tool, "the arguments are not a JSON string"),
        };
        Call::new(id, tool, input)
    }

    /// The `tool` role messages to send back, in submission order.
    pub fn results(result: &BatchResult) -> Vec<Value> {
        result
            .results
            .iter()
            .map(|r| json!({"role": "tool", "tool_call_id": r.id, "content": result_text(r)}))
            .collect()
    }
}

/// Anthropic Messages tools.
pub mod anthropic {
    use super::*;

    /// The registry's tools as Anthropic tools.
    pub fn tools(registry: &ToolRegistry, names: &ToolNames) -> Vec<Value> {
        registry
            .iter()
            .map(|t| {
                json!({"name": names.name(t.id()),
                       "description": t.manifest().description.as_str(),
                       "input_schema": input_schema(t)})
            })
            .collect()
    }

    /// A batch from an assistant message (`{"role": "assistant", "content": [...]}`) or its
    /// content array: `tool_use` blocks are the calls; other blocks are ignored.
    pub fn batch(tenant: &str, message: &Value, names: &ToolNames) -> Result<Batch> {
        let blocks = match message {
            Value::Array(a) => a,
            Value::Object(o) => match o.get("content") {
                Some(Value::Array(a)) => a,
                Some(Value::String(_)) | None => &Vec::new(),
                Some(_) => return Err(malformed("/content", "`content` must be an array")),
            },
            _ => {
                return Err(malformed(
                    "",
                    "expected an assistant message or its content array",
                ))
            }
        };
        let uses: Vec<&Value> = blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
            .collect();
        let made_up: Vec<bool> = uses.iter().map(|b| !has_id(b.get("id"))).collect();
        let mut calls: Vec<Call> = uses
            .iter()
            .enumerate()
            .map(|(i, b)| call(b, i, names))
            .collect();
        unclash(&mut calls, &made_up);
        Batch::new(tenant, calls)
    }

    /// One call from one `tool_use` block.
    pub fn call(b: &Value, index: usize, names: &ToolNames) -> Call {
        let name = b.get("name").and_then(Value::as_str).unwrap_or("");
        let tool = names.id(name);
        let Some(id) = b
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        else {
            return Call::defective(format!("#{index}"), tool, "the tool_use block has no `id`");
        };
        match b.get("input") {
            Some(v @ Value::Object(_)) => Call::new(id, tool, v.clone()),
            None => Call::new(id, tool, Value::Object(Map::new())),
            Some(_) => Call::defective(id, tool, "the tool_use input is not a JSON object"),
        }
    }

    /// One `user` message of `tool_result` blocks, in submission order.
    pub fn results(result: &BatchResult) -> Value {
        let blocks: Vec<Value> = result
            .results
            .iter()
            .map(|r| {
                json!({"type": "tool_result", "tool_use_id": r.id, "content": result_text(r),
                       "is_error": r.status != Status::Ok})
            })
            .collect();
        json!({"role": "user", "content": blocks})
    }
}

/// MCP `tools/list` entries and `tools/call` requests and results.
pub mod mcp {
    use super::*;

    /// MCP tool names may hold `.`: the id is kept when it fits MCP's characters, else mapped.
    fn mcp_name(id: &str, names: &ToolNames) -> String {
        let fits = !id.is_empty()
            && id.len() <= 128
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if fits {
            id.to_owned()
        } else {
            names.name(id)
        }
    }

    /// The registry's tools as `tools/list` entries, with annotations from their effects.
    pub fn tools(registry: &ToolRegistry, names: &ToolNames) -> Vec<Value> {
        registry
            .iter()
            .map(|t| {
                let mut v = json!({"name": mcp_name(t.id(), names),
                    "description": t.manifest().description.as_str(),
                    "inputSchema": input_schema(t), "annotations": annotations(t)});
                if !t.manifest().output.is_empty() {
                    v["outputSchema"] = Value::Object(t.manifest().output.clone());
                }
                v
            })
            .collect()
    }

    /// A batch from `tools/call` requests: JSON-RPC requests (their ids become call ids) or bare
    /// `{"name", "arguments"}` params (named by position).
    pub fn batch(tenant: &str, requests: &Value, names: &ToolNames) -> Result<Batch> {
        let Value::Array(items) = requests else {
            return Err(malformed("", "expected an array of tools/call requests"));
        };
        let made_up: Vec<bool> = items
            .iter()
            .map(|r| !matches!(r.get("id"), Some(Value::String(_) | Value::Number(_))))
            .collect();
        let mut calls: Vec<Call> = items
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let params = r.get("params").unwrap_or(r);
                let id = match r.get("id") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Number(n)) => n.to_string(),
                    _ => format!("#{i}"),
                };
                let name = params.get("name").and_then(Value::as_str).unwrap_or("");
                let tool = names
                    .to_id
                    .get(name)
                    .cloned()
                    .unwrap_or_else(|| name.to_owned());
                match params.get("arguments") {
                    Some(v @ Value::Object(_)) => Call::new(id, tool, v.clone()),
                    None => Call::new(id, tool, Value::Object(Map::new())),
                    Some(_) => Call::defective(id, tool, "the arguments are not a JSON object"),
                }
            })
            .collect();
        unclash(&mut calls, &made_up);
        Batch::new(tenant, calls)
    }

    /// `tools/call` results, one per call in submission order.
    pub fn results(result: &BatchResult) -> Vec<Value> {
        result
            .results
            .iter()
            .map(|r| {
                let mut v = json!({"content": [{"type": "text", "text": result_text(r)}],
                                   "isError": r.status != Status::Ok});
                if let (Status::Ok, Some(out @ Value::Object(_))) = (r.status, &r.output) {
                    v["structuredContent"] = out.clone();
                }
                v
            })
            .collect()
    }
}

/// Whether a model gave a call an id (a non-empty string).
fn has_id(id: Option<&Value>) -> bool {
    id.and_then(Value::as_str).is_some_and(|s| !s.is_empty())
}

/// Makes the ids Sluice made up (`#N`, for calls the model sent without one) differ from every
/// other id: a made-up id never collides with a model's own, so such a call fails alone and
/// never makes the batch a duplicate. A clash gets `#` appended until it is unique.
fn unclash(calls: &mut [Call], made_up: &[bool]) {
    let mut taken: std::collections::HashSet<String> = calls
        .iter()
        .zip(made_up)
        .filter(|(_, m)| !**m)
        .map(|(c, _)| c.id.clone())
        .collect();
    for (c, m) in calls.iter_mut().zip(made_up) {
        if !*m {
            continue;
        }
        while taken.contains(&c.id) {
            c.id.push('#');
        }
        taken.insert(c.id.clone());
    }
}

fn malformed(pointer: &str, message: &str) -> Error {
    Error::MalformedBatch {
        pointer: pointer.to_owned(),
        message: message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_fit() {
        for id in [
            "sluice.kv.get",
            "acme.kv-get",
            "a_b.c",
            "weird/id:with spaces",
            "é.ü",
        ] {
            let n = encode_name(id);
            assert!(n.len() <= MAX_NAME);
            assert!(n
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
            assert_eq!(decode_name(&n).as_deref(), Some(id));
        }
        assert_eq!(encode_name("sluice.kv.get"), "sluice__kv__get");
        let long = "x.".repeat(40);
        assert!(encode_name(&long).len() <= MAX_NAME);
    }
}
