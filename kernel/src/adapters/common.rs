//! What the API modules share: export and ingest options, the offered tools and their names,
//! making calls from function calls, and naming a document of the wrong shape.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::names::ToolNames;
use super::schema::{self, Change};
use crate::authorize::DecidedBy;
use crate::error::{Error, Result};
use crate::model::{AccessMode, Batch, Call, EffectKind, Status};
use crate::run::{CallResult, Kernel};
use crate::transport::{Tool, ToolRegistry};

/// How tools are offered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExportOptions {
    /// Offer every version of each id, not only the highest (default `false`).
    pub all_versions: bool,
    /// OpenAI strict function schemas (`strict: true`), for the two OpenAI APIs (default
    /// `false`; other APIs have no such option and ignore it).
    pub strict: bool,
    /// The tools left out (by id), for a listing made for one tenant (default: none).
    pub hidden: Option<Hidden>,
}

/// Which tools (by id) a listing leaves out: see [`ExportOptions::hiding`].
#[derive(Clone)]
pub struct Hidden(Arc<dyn Fn(&str) -> bool + Send + Sync>);

impl std::fmt::Debug for Hidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hidden(..)")
    }
}

/// Two filters are equal when they are the same filter.
impl PartialEq for Hidden {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Hidden {}

impl ExportOptions {
    /// Sets [`ExportOptions::all_versions`].
    pub fn with_all_versions(mut self, yes: bool) -> Self {
        self.all_versions = yes;
        self
    }

    /// Sets [`ExportOptions::strict`].
    pub fn with_strict(mut self, yes: bool) -> Self {
        self.strict = yes;
        self
    }

    /// Leaves out the tools `hidden(id)` says.
    pub fn hiding(mut self, hidden: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.hidden = Some(Hidden(Arc::new(hidden)));
        self
    }

    /// The listing `tenant` gets from `kernel`: the tools its authorizer hides from the tenant
    /// ([`Kernel::hides`]: those a tool rule of its policy denies) are left out.
    pub fn for_tenant(self, kernel: &Kernel, tenant: &str) -> Self {
        let (kernel, tenant) = (kernel.clone(), tenant.to_owned());
        self.hiding(move |id| kernel.hides(&tenant, id))
    }
}

/// Tool definitions, and what the conversion changed in their schemas.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exported {
    /// The definitions, in registration order (for Gemini: one `Tool` holding them all).
    pub definitions: Vec<Value>,
    /// What was changed to fit the API, tool by tool.
    pub changes: Vec<Change>,
}

/// How a response is read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IngestOptions {
    /// Which choice of a `ChatCompletion` (or candidate of a Gemini response) holds the calls
    /// (default 0, the first).
    pub choice: usize,
}

impl IngestOptions {
    /// Sets [`IngestOptions::choice`].
    pub fn with_choice(mut self, n: usize) -> Self {
        self.choice = n;
        self
    }
}

/// The tools an export offers, each with the name it is offered under.
pub(crate) fn offered<'a>(
    registry: &'a ToolRegistry,
    names: &ToolNames,
    options: &ExportOptions,
) -> Vec<(&'a Arc<Tool>, String)> {
    let tools: Vec<&Arc<Tool>> = if options.all_versions {
        registry.iter().collect()
    } else {
        registry.latest().collect()
    };
    let shown = |t: &&Arc<Tool>| !options.hidden.as_ref().is_some_and(|h| (h.0)(t.id()));
    tools
        .into_iter()
        .filter(shown)
        .map(|t| {
            let name = if registry.is_latest(t) {
                names.name(t.id())
            } else {
                names.name(&format!("{}@{}", t.id(), t.manifest().version.as_str()))
            };
            (t, name)
        })
        .collect()
}

/// Sets `key` of a JSON object (a document made as an object just before; anything else is
/// left as it is).
pub(crate) fn set(doc: &mut Value, key: &str, value: Value) {
    if let Some(o) = doc.as_object_mut() {
        o.insert(key.to_owned(), value);
    }
}

/// Turns a conversion's notes into changes of the tool `name`.
pub(crate) fn changes_of(name: &str, notes: schema::Notes, into: &mut Vec<Change>) {
    into.extend(notes.0.into_iter().map(|(pointer, what)| Change {
        tool: name.to_owned(),
        pointer,
        what,
    }));
}

/// The MCP annotations of a tool, from its effects (never from a downstream server's hints),
/// one rule for every place Sluice lists tools (`sluice tools --format mcp`, the gateway's
/// `tools/list` and `/v1/tools?format=mcp`; docs/serve.md):
/// - `readOnlyHint`: the tool is read-only;
/// - `destructiveHint`: it is not read-only and declares `writes`, `deletes` or
///   `external-side-effect`, or declares no change at all (the implicit `(writes, *)`);
/// - `idempotentHint`: false (Sluice cannot know);
/// - `openWorldHint`: it declares `network`, `external-side-effect` or
///   `sensitive-data-egress`, or runs over HTTP or MCP.
pub fn annotations(tool: &Tool) -> Value {
    let m = tool.manifest();
    let declares = |kinds: &[EffectKind]| m.effects().iter().any(|e| kinds.contains(&e.kind));
    let read_only = tool.access_plan().is_read_only();
    let declares_changes = m
        .effects()
        .iter()
        .any(|e| e.kind.mode() == AccessMode::Write);
    let destructive = !read_only
        && (declares(&[
            EffectKind::Writes,
            EffectKind::Deletes,
            EffectKind::ExternalSideEffect,
        ]) || !declares_changes);
    let remote = m.spec.is_some() || m.mcp_endpoint.is_some();
    let open_world = remote
        || declares(&[
            EffectKind::Network,
            EffectKind::ExternalSideEffect,
            EffectKind::SensitiveDataEgress,
        ]);
    json!({
        "readOnlyHint": read_only,
        "destructiveHint": destructive,
        "idempotentHint": false,
        "openWorldHint": open_world,
    })
}

/// The text of a call that did not end `ok`, as docs/serve.md spells it: the status (or, for
/// an `error`, its code), what is behind it in parentheses (the rule or approver of a refusal,
/// the JSON pointer of an invalid input, the code of a timeout), then the message:
/// `denied (no-deletes): …`, `invalid-input (/key): …`, `cancelled: …`.
pub fn failure_text(r: &CallResult) -> String {
    let (code, message, pointer) = match &r.error {
        Some(e) => (e.code.as_str(), e.message.as_str(), e.pointer.as_deref()),
        None => ("", "", None),
    };
    let lead = if r.status == Status::Error && !code.is_empty() {
        code
    } else {
        r.status.as_str()
    };
    let detail: Option<std::borrow::Cow<'_, str>> = match (r.status, code) {
        (Status::Denied | Status::Rejected, _) => match (&r.authorization, &r.approver) {
            (_, Some(approver)) if r.status == Status::Rejected => Some(approver.as_str().into()),
            (Some(a), _) => Some(match &a.by {
                DecidedBy::Rule(id) => (&**id).into(),
                other => other.to_string().into(),
            }),
            _ => None,
        },
        (_, "invalid-input") => pointer.map(Into::into),
        (Status::Error | Status::Cancelled, _) => None,
        (_, c) if !c.is_empty() && c != lead => Some(c.into()),
        _ => None,
    };
    match detail {
        Some(d) if !d.is_empty() => format!("{lead} ({d}): {message}"),
        _ => format!("{lead}: {message}"),
    }
}

/// Results as plain text for the model: the output's JSON for `ok`, else what happened.
pub fn result_text(r: &CallResult) -> String {
    match (&r.status, &r.output, &r.error) {
        (Status::Ok, Some(out), _) => out.to_string(),
        (status, _, Some(e)) => format!("{status} ({}): {}", e.code, e.message),
        (status, _, None) => status.to_string(),
    }
}

/// How a call's arguments arrive.
#[derive(Clone, Copy)]
pub(crate) enum ArgsForm {
    /// A JSON object, or a string holding one (OpenAI).
    JsonText,
    /// A JSON object (Anthropic, Gemini, MCP).
    Object,
}

/// One function call as a model sent it.
pub(crate) struct FnCall<'a> {
    /// Its position among the calls (names it when it has no id).
    pub(crate) index: usize,
    /// Its id, if any.
    pub(crate) id: Option<&'a Value>,
    /// The key the API keeps the id under (`id`, `call_id`).
    pub(crate) id_key: &'a str,
    /// Whether the API always gives ids (a missing one is then a defect).
    pub(crate) id_required: bool,
    /// The function name.
    pub(crate) name: Option<&'a Value>,
    /// The arguments.
    pub(crate) args: Option<&'a Value>,
    /// How the arguments arrive.
    pub(crate) form: ArgsForm,
    /// What the API calls it, for messages (`tool call`, `tool_use block`, …).
    pub(crate) what: &'a str,
}

/// One call from one function call of a model: its id (or, when the API gives none, `#index`),
/// the tool its name maps to, and its arguments. What is wrong with it fails it alone.
pub(crate) fn make_call(c: FnCall<'_>, names: &ToolNames) -> Call {
    let FnCall {
        index,
        id,
        id_key,
        id_required,
        name,
        args,
        form,
        what,
    } = c;
    let name = name.and_then(Value::as_str).unwrap_or("");
    let tool = names.id(name);
    let id = match id {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ if id_required => {
            return Call::defective(
                format!("#{index}"),
                tool,
                format!("the {what} has no `{id_key}`, so its result could not be matched to it"),
            )
        }
        _ => format!("#{index}"),
    };
    if name.is_empty() {
        return Call::defective(id, tool, format!("the {what} names no function"));
    }
    let input = match (args, form) {
        (None | Some(Value::Null), _) => Value::Object(Map::new()),
        (Some(v @ Value::Object(_)), _) => v.clone(),
        (Some(Value::String(s)), ArgsForm::JsonText) if s.trim().is_empty() => {
            Value::Object(Map::new())
        }
        (Some(Value::String(s)), ArgsForm::JsonText) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => return Call::defective(id, tool, "the arguments are JSON but not an object"),
            Err(e) => return Call::defective(id, tool, format!("the arguments are not JSON: {e}")),
        },
        (Some(_), ArgsForm::JsonText) => {
            return Call::defective(id, tool, "the arguments are not a JSON string")
        }
        (Some(_), ArgsForm::Object) => {
            return Call::defective(id, tool, "the arguments are not a JSON object")
        }
    };
    Call::new(id, tool, input)
}

/// Whether a model gave a call an id (a non-empty string, or a number).
pub(crate) fn has_id(id: Option<&Value>) -> bool {
    match id {
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Number(_)) => true,
        _ => false,
    }
}

/// A batch of calls, made-up ids kept clear of the model's own.
pub(crate) fn batch_of(tenant: &str, mut calls: Vec<Call>, made_up: &[bool]) -> Result<Batch> {
    unclash(&mut calls, made_up);
    Batch::new(tenant, calls)
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

/// A document of the wrong shape: what was expected, and what came.
pub(crate) fn wrong_shape(pointer: &str, expected: &str, doc: &Value) -> Error {
    Error::MalformedBatch {
        pointer: pointer.to_owned(),
        message: format!("expected {expected}; got {}", describe(doc)),
    }
}

pub(crate) fn malformed(pointer: &str, message: &str) -> Error {
    Error::MalformedBatch {
        pointer: pointer.to_owned(),
        message: message.to_owned(),
    }
}

/// What a JSON document looks like, for a person: which API's object it is when it is one.
pub(crate) fn describe(doc: &Value) -> String {
    let o = match doc {
        Value::Null => return "null".into(),
        Value::Bool(_) => return "a boolean".into(),
        Value::Number(_) => return "a number".into(),
        Value::String(s) => {
            let cut: String = s.chars().take(40).collect();
            let more = if cut.len() < s.len() { "…" } else { "" };
            return format!("a bare string ({cut:?}{more})");
        }
        Value::Array(a) => {
            return match a.iter().find_map(block_kind) {
                Some(kind) => format!("an array of {kind}"),
                None => "an array with no recognizable call in it".into(),
            }
        }
        Value::Object(o) => o,
    };
    let s = |k: &str| o.get(k).and_then(Value::as_str);
    if o.contains_key("choices") {
        return "an OpenAI ChatCompletion (`choices`: use --batch-format openai)".into();
    }
    if s("object") == Some("response") || (o.contains_key("output") && o.contains_key("id")) {
        return "an OpenAI Responses `Response` (use --batch-format openai-responses)".into();
    }
    if o.contains_key("candidates") {
        return "a Gemini GenerateContentResponse (use --batch-format gemini)".into();
    }
    if o.contains_key("parts") {
        return format!(
            "a Gemini `Content` with role {:?} (use --batch-format gemini)",
            s("role").unwrap_or("none")
        );
    }
    if o.contains_key("jsonrpc") || o.contains_key("method") {
        return "a JSON-RPC message (MCP: use --batch-format mcp with an array of tools/call)"
            .into();
    }
    if o.contains_key("calls") {
        return "a Sluice batch (use --batch-format sluice)".into();
    }
    if let Some(role) = s("role") {
        let blocks = o
            .get("content")
            .and_then(Value::as_array)
            .and_then(|c| c.iter().find_map(block_kind));
        let api = if o.contains_key("tool_calls") {
            " (OpenAI Chat Completions)"
        } else if blocks
            .as_deref()
            .is_some_and(|k| k.starts_with("Anthropic"))
            || (o.get("content").is_some_and(Value::is_array) && s("type") == Some("message"))
        {
            " (Anthropic)"
        } else {
            ""
        };
        let article = if role.starts_with(['a', 'e', 'i', 'o']) {
            "an"
        } else {
            "a"
        };
        return format!("{article} `{role}` message{api}");
    }
    if let Some(kind) = block_kind(doc) {
        return format!("a single entry of the kind found in {kind}");
    }
    let keys: Vec<&str> = o.keys().map(String::as_str).take(6).collect();
    if keys.is_empty() {
        "an empty object".into()
    } else {
        format!("an object with keys {}", keys.join(", "))
    }
}

/// Which API an array entry belongs to, for [`describe`] and the shape checks.
pub(crate) fn block_kind(v: &Value) -> Option<String> {
    let o = v.as_object()?;
    let ty = o.get("type").and_then(Value::as_str);
    Some(match ty {
        Some("function") | None if o.contains_key("function") => {
            "OpenAI Chat Completions `tool_calls` entries".into()
        }
        Some("function_call" | "function_call_output" | "reasoning") => {
            "OpenAI Responses items".into()
        }
        Some("tool_use" | "tool_result" | "thinking" | "redacted_thinking") => {
            "Anthropic content blocks".into()
        }
        Some("message") if o.contains_key("role") => "messages".into(),
        None if [
            "functionCall",
            "function_call",
            "functionResponse",
            "function_response",
        ]
        .iter()
        .any(|k| o.contains_key(*k)) =>
        {
            "Gemini parts".into()
        }
        None if o.contains_key("role") => "messages".into(),
        _ => return None,
    })
}
