//! Speaking the model APIs: tools out as function definitions, tool calls in as batches, results
//! back as the messages each API expects next.
//!
//! Takes in: the registered tools, a model's response, a batch's results. Hands on, for each
//! [`Api`]:
//!
//! | API | tools out | calls in | results back |
//! |---|---|---|---|
//! | [`openai`] Chat Completions | `function` tools | a `ChatCompletion`, an assistant message or its `tool_calls` | `tool` messages |
//! | [`responses`] OpenAI Responses | `function` tools | a `Response`, its `output` items (`function_call`, by `call_id`) | `function_call_output` items |
//! | [`anthropic`] Messages | tools with `input_schema` | a `Message`, an assistant message or its content (`tool_use`) | one `user` message of `tool_result` blocks |
//! | [`gemini`] Gemini | one tool of `functionDeclarations` | a `GenerateContentResponse`, a `Content` or its `parts` (`functionCall`) | one `user` `Content` of `functionResponse` parts |
//! | [`mcp`] MCP | `tools/list` entries | `tools/call` requests | `tools/call` results |
//!
//! Calls keep the model's order and ids. A response that holds no tool call because the model
//! answered in words is an empty batch, and its reply is no message at all (an empty list: the
//! APIs refuse an empty message). A document of the wrong shape (a user message, a bare string,
//! another API's object) is an [`crate::Error::MalformedBatch`] saying what was expected and what came.
//!
//! # Names and versions
//!
//! Kindgi ids hold characters the APIs refuse; [`ToolNames`] maps each to a name within every
//! API's limits, reversibly (see [`encode_name`]), and refuses two tools that map to one name.
//! The exports offer each id's highest version under the id's name; with
//! [`ExportOptions::with_all_versions`] every other version too, under the name of
//! `id@version`. A call to either name runs exactly that version.
//!
//! # Schemas
//!
//! Each API gets the tool's input schema as it takes it ([`schema`]): OpenAI's strict mode
//! ([`ExportOptions::with_strict`]) and Gemini's OpenAPI subset change it, and every change is
//! listed in [`Exported::changes`]. Sluice still checks each call against the tool's own schema.
//!
//! # Malformed model output
//!
//! A call with no id (where the API gives ids), arguments that are not a JSON object, or an
//! unknown function name fails alone (`invalid-input`, or `unknown-tool`), never the batch: the
//! model gets an answer for it.
//!
//! ```
//! use sluice_kernel::{adapters::{Api, ExportOptions, IngestOptions, ToolNames}, builtin};
//! use serde_json::json;
//! let tools = builtin::registry(builtin::BuiltinConfig::default()).unwrap();
//! let names = ToolNames::new(&tools).unwrap();
//! let offered = Api::Gemini.export(&tools, &names, &ExportOptions::default());
//! assert_eq!(offered.definitions[0]["functionDeclarations"][0]["name"], "sluice__sleep");
//! let batch = Api::Openai.batch("acme", &json!({"role": "assistant", "tool_calls": [
//!     {"id": "call_1", "type": "function",
//!      "function": {"name": "sluice__kv__get", "arguments": "{\"key\": \"k\"}"}}
//! ]}), &names, &IngestOptions::default()).unwrap();
//! assert_eq!((batch.calls[0].id.as_str(), batch.calls[0].tool.as_str()), ("call_1", "sluice.kv.get"));
//! // A model that answered in words: an empty batch, and nothing to send back.
//! let words = json!({"role": "assistant", "content": [{"type": "text", "text": "Done."}]});
//! assert!(Api::Anthropic.batch("acme", &words, &names, &IngestOptions::default()).unwrap().calls.is_empty());
//! ```

pub mod anthropic;
mod common;
pub mod gemini;
pub mod mcp;
mod names;
pub mod openai;
pub mod report;
pub mod responses;
pub mod schema;

use serde_json::Value;

pub use common::{
    annotations, failure_text, result_text, ExportOptions, Exported, Hidden, IngestOptions,
};
pub use names::{decode_name, encode_name, ToolNames, MAX_NAME};
pub use schema::{strip_optional_nulls, Change};

use crate::error::Result;
use crate::model::Batch;
use crate::run::CallResult;
use crate::transport::ToolRegistry;

/// A model API Sluice speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    /// OpenAI Chat Completions.
    Openai,
    /// The OpenAI Responses API.
    OpenaiResponses,
    /// Anthropic Messages.
    Anthropic,
    /// Google Gemini (`generateContent`).
    Gemini,
    /// MCP `tools/list` and `tools/call`.
    Mcp,
}

impl Api {
    /// Every API, in the order the docs list them.
    pub const ALL: [Api; 5] = [
        Api::Openai,
        Api::OpenaiResponses,
        Api::Anthropic,
        Api::Gemini,
        Api::Mcp,
    ];

    /// The name the CLI uses (`openai`, `openai-responses`, `anthropic`, `gemini`, `mcp`).
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Openai => "openai",
            Api::OpenaiResponses => "openai-responses",
            Api::Anthropic => "anthropic",
            Api::Gemini => "gemini",
            Api::Mcp => "mcp",
        }
    }

    /// The registry's tools as this API's tool definitions.
    pub fn export(
        self,
        registry: &ToolRegistry,
        names: &ToolNames,
        options: &ExportOptions,
    ) -> Exported {
        match self {
            Api::Openai => openai::export(registry, names, options),
            Api::OpenaiResponses => responses::export(registry, names, options),
            Api::Anthropic => anthropic::export(registry, names, options),
            Api::Gemini => gemini::export(registry, names, options),
            Api::Mcp => mcp::export(registry, names, options),
        }
    }

    /// A batch from a model's response in this API's shape.
    pub fn batch(
        self,
        tenant: &str,
        doc: &Value,
        names: &ToolNames,
        options: &IngestOptions,
    ) -> Result<Batch> {
        match self {
            Api::Openai => openai::batch_with(tenant, doc, names, options),
            Api::OpenaiResponses => responses::batch(tenant, doc, names),
            Api::Anthropic => anthropic::batch(tenant, doc, names),
            Api::Gemini => gemini::batch_with(tenant, doc, names, options),
            Api::Mcp => mcp::batch(tenant, doc, names),
        }
    }

    /// The messages (or items, or results) to send back, in submission order; empty when the
    /// batch had no call.
    pub fn results(self, results: &[CallResult], names: &ToolNames) -> Vec<Value> {
        match self {
            Api::Openai => openai::results_of(results),
            Api::OpenaiResponses => responses::results(results),
            Api::Anthropic => anthropic::results_of(results),
            Api::Gemini => gemini::results(results, names),
            Api::Mcp => mcp::results_of(results),
        }
    }
}

impl std::fmt::Display for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
