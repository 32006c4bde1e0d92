//! The model-API adapters: golden files for each format in and out
//! (tests/fixtures/model-apis/), the name mapping (a proptest over arbitrary ids, and a real
//! collision), and malformed model output failing only the call concerned.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::collections::HashMap;

use proptest::prelude::*;
use serde_json::{json, Value};
use sluice_kernel::adapters::{self, decode_name, encode_name, ToolNames, MAX_NAME};
use sluice_kernel::builtin::{self, BuiltinConfig};
use sluice_kernel::run::Kernel;
use sluice_kernel::transport::{handler, ToolContext, ToolError};
use sluice_kernel::Status;
use support::{fixture, read_json, sluice};

fn golden(name: &str) -> Value {
    read_json(&fixture(&format!("model-apis/{name}")))
}

fn kernel() -> Kernel {
    Kernel::builder()
        .tools(builtin::registry(BuiltinConfig::default()).unwrap())
        .build()
        .unwrap()
}

#[tokio::test]
async fn openai_in_and_out() {
    let k = kernel();
    let names = ToolNames::new(k.tools()).unwrap();
    let batch = adapters::openai::batch("acme", &golden("openai-response.json"), &names).unwrap();
    let ids: Vec<&str> = batch.calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "call_put",
            "call_get",
            "call_bad_json",
            "call_unknown",
            "#4",
            "call_echo"
        ]
    );
    assert_eq!(batch.calls[0].tool, "sluice.kv.put");
    let result = k.run(batch).await.unwrap();
    let statuses: Vec<Status> = result.results.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [
            Status::Ok,
            Status::Ok,
            Status::Error,
            Status::Error,
            Status::Error,
            Status::Ok
        ]
    );
    assert_eq!(
        result.results[2].error.as_ref().unwrap().code,
        "invalid-input"
    );
    assert_eq!(
        result.results[3].error.as_ref().unwrap().code,
        "unknown-tool"
    );
    assert_eq!(
        json!(adapters::openai::results(&result)),
        golden("openai-results.json")
    );
}

#[tokio::test]
async fn anthropic_in_and_out() {
    let k = kernel();
    let names = ToolNames::new(k.tools()).unwrap();
    let batch =
        adapters::anthropic::batch("acme", &golden("anthropic-response.json"), &names).unwrap();
    assert_eq!(batch.calls.len(), 4, "text blocks are ignored");
    let result = k.run(batch).await.unwrap();
    assert_eq!(
        json!(adapters::anthropic::results(&result)),
        golden("anthropic-results.json")
    );
    let blocks = golden("anthropic-results.json")[0]["content"].clone();
    assert_eq!(blocks[2]["is_error"], true);
}

#[tokio::test]
async fn mcp_in_and_out() {
    let k = kernel();
    let names = ToolNames::new(k.tools()).unwrap();
    let batch = adapters::mcp::batch("acme", &golden("mcp-calls.json"), &names).unwrap();
    let ids: Vec<&str> = batch.calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["1", "two", "#2"]);
    let result = k.run(batch).await.unwrap();
    let out = adapters::mcp::results(&result);
    assert_eq!(out[1]["structuredContent"], json!({"key": "k", "value": 4}));
    assert_eq!(out[1]["isError"], false);
    assert_eq!(out[2]["structuredContent"], json!({"hello": "mcp"}));
}

#[test]
fn tool_definitions_match_their_golden_files() {
    for f in ["openai", "anthropic", "mcp"] {
        let run = sluice(&["tools", "--format", f], None, None);
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert_eq!(run.json(), golden(&format!("tools-{f}.json")), "{f}");
    }
    let openai = golden("tools-openai.json");
    for t in openai.as_array().unwrap() {
        let name = t["function"]["name"].as_str().unwrap();
        assert!(
            name.len() <= MAX_NAME
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        );
    }
    let mcp = golden("tools-mcp.json");
    let delete = mcp
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "sluice.kv.delete")
        .unwrap();
    assert_eq!(
        delete["annotations"],
        json!({"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false,
               "openWorldHint": false})
    );
    // One rule (serve.md) wherever tools are listed: a tool that writes is destructive too.
    let put = mcp
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "sluice.kv.put")
        .unwrap();
    assert_eq!(put["annotations"]["destructiveHint"], true);
}

#[test]
fn the_cli_runs_model_responses_and_answers_in_their_shape() {
    let f = fixture("model-apis/openai-response.json");
    let run = sluice(
        &[
            "run",
            "--batch",
            f.to_str().unwrap(),
            "--batch-format",
            "openai",
            "--format",
            "openai",
        ],
        None,
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json(), golden("openai-results.json"));
    let f = fixture("model-apis/anthropic-response.json");
    let run = sluice(
        &[
            "run",
            "--batch",
            f.to_str().unwrap(),
            "--batch-format",
            "anthropic",
            "--format",
            "anthropic",
        ],
        None,
        None,
    );
    assert_eq!(run.json(), golden("anthropic-results.json"));
    // The tool_calls array alone is accepted too; results in cli.md's JSON by default.
    let calls = golden("openai-response.json")["tool_calls"].clone();
    let run = sluice(
        &[
            "run",
            "--batch",
            "-",
            "--batch-format",
            "openai",
            "--tenant",
            "t",
        ],
        Some(&calls.to_string()),
        None,
    );
    assert_eq!(run.json()["results"][1]["output"]["value"], "hi");
    // A response that is not a message at all cannot run: exit 1.
    let run = sluice(
        &["run", "--batch", "-", "--batch-format", "anthropic"],
        Some("42"),
        None,
    );
    assert_eq!(run.code, 1);
}

#[test]
fn two_ids_that_map_to_one_name_are_refused_naming_both() {
    // Long ids are shortened to a prefix and 7 hex digits of their digest; search for two that
    // collide (a birthday search over 28 bits).
    let prefix = "tool.".repeat(14);
    let mut seen: HashMap<String, String> = HashMap::new();
    let (a, b) = (0..200_000u32)
        .find_map(|i| {
            let id = format!("{prefix}{i}");
            let name = encode_name(&id);
            seen.insert(name, id.clone()).map(|other| (other, id))
        })
        .expect("a collision within 200,000 ids");
    let noop =
        || handler(|_c: ToolContext, _i: Value| async move { Ok::<_, ToolError>(json!({})) });
    let mut reg = sluice_kernel::transport::ToolRegistry::new();
    reg.insert(support::tool(&a, json!([]), false, noop()))
        .unwrap();
    reg.insert(support::tool(&b, json!([]), false, noop()))
        .unwrap();
    let err = ToolNames::new(&reg).unwrap_err().to_string();
    assert!(err.contains(&a) && err.contains(&b), "{err}");
}

proptest! {
    #[test]
    fn names_are_valid_and_reversible(id in "\\PC{1,40}") {
        let name = encode_name(&id);
        prop_assert!(!name.is_empty() && name.len() <= MAX_NAME);
        prop_assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'), "{}", name);
        // A name decodes to its own id, or (shortened) to nothing: never to another id.
        if let Some(back) = decode_name(&name) {
            prop_assert_eq!(back, id);
        }
    }

    #[test]
    fn a_table_maps_every_registered_id_back(ids in prop::collection::btree_set("[a-z_.\\-é/]{1,70}", 1..8)) {
        let noop = || handler(|_c: ToolContext, _i: Value| async move { Ok::<_, ToolError>(json!({})) });
        let mut reg = sluice_kernel::transport::ToolRegistry::new();
        for id in &ids {
            reg.insert(support::tool(id, json!([]), false, noop())).unwrap();
        }
        let names = ToolNames::new(&reg).unwrap();
        for id in &ids {
            prop_assert_eq!(&names.id(&names.name(id)), id);
        }
    }
}

/// Issue 22, finding 3: an id Sluice makes up for a call without one (`#N`) never collides with
/// a model's own id, so that call fails alone and the batch is not refused as a duplicate.
#[test]
fn made_up_ids_never_collide_with_the_models_own() {
    let registry = builtin::registry(BuiltinConfig::default()).unwrap();
    let names = ToolNames::new(&registry).unwrap();
    let openai = json!({"tool_calls": [{"id": "#2", "": {}}, {"t": {"name": ""}}, {"unon": {}}]});
    let b = adapters::openai::batch("acme", &openai, &names).unwrap();
    let ids: Vec<&str> = b.calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["#2", "#1", "#2#"]);
    let anthropic = json!([{"type": "tool_use", "id": "#1", "name": "x"},
                           {"type": "tool_use", "name": "y"}, {"type": "tool_use", "name": "z"}]);
    let b = adapters::anthropic::batch("acme", &anthropic, &names).unwrap();
    let ids: Vec<&str> = b.calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["#1", "#1#", "#2"]);
    let mcp = json!([{"id": "#1", "params": {"name": "x"}}, {"params": {"name": "y"}}]);
    let b = adapters::mcp::batch("acme", &mcp, &names).unwrap();
    let ids: Vec<&str> = b.calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["#1", "#1#"]);
    // Through the CLI: the batch runs, each id-less call failing alone.
    let dir = support::temp_dir("made-up-ids");
    let file = dir.join("m.json");
    std::fs::write(&file, openai.to_string()).unwrap();
    let r = sluice(
        &[
            "run",
            "--batch",
            file.to_str().unwrap(),
            "--batch-format",
            "openai",
        ],
        None,
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json()["results"].as_array().unwrap().len(), 3);
}
