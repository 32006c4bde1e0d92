//! What each `--batch-format` takes and what `run --format` answers: whole responses of every
//! API, their `function_call` / `functionCall` items, wrong shapes refused saying what came, text
//! answers that run nothing and send nothing back; OpenAI strict schemas and Gemini's subset;
//! versions offered under their own names.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use serde_json::{json, Value};
use support::{fixture, read_json, sluice, temp_dir};

fn golden(name: &str) -> Value {
    read_json(&fixture(&format!("model-apis/{name}")))
}

/// `sluice run --batch - --batch-format <input> --format <output>` with extra arguments.
fn run_as(input: &str, output: &str, doc: &Value, extra: &[&str]) -> support::Run {
    let mut args = vec![
        "run",
        "--batch",
        "-",
        "--batch-format",
        input,
        "--format",
        output,
    ];
    args.extend_from_slice(extra);
    sluice(&args, Some(&doc.to_string()), None)
}

#[test]
fn responses_and_gemini_answer_in_their_own_shape() {
    let r = run_as(
        "openai-responses",
        "openai-responses",
        &golden("responses-response.json"),
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json(), golden("responses-results.json"));
    // The call ids are the `call_id`s, not the items' own ids.
    let reply = r.json();
    let ids: Vec<&str> = reply
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["call_put", "call_get", "call_bad", "#3"]);

    let r = run_as("gemini", "gemini", &golden("gemini-response.json"), &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let reply = r.json();
    assert_eq!(reply, golden("gemini-results.json"));
    let parts = reply[0]["parts"].as_array().unwrap();
    assert_eq!(reply[0]["role"], "user");
    // Gemini's own id is sent back; a call it sent without one is answered by name and order.
    assert_eq!(parts[0]["functionResponse"]["id"], "g_put");
    assert!(parts[1]["functionResponse"].get("id").is_none());
    assert_eq!(
        parts[1]["functionResponse"]["response"]["output"]["value"],
        "hi"
    );
    // The Python SDK's snake_case spelling is read too.
    assert_eq!(parts[2]["functionResponse"]["name"], "sluice__echo");
    // An unknown function is answered under the name the model called.
    assert_eq!(parts[3]["functionResponse"]["name"], "no_such_tool");
    assert_eq!(
        parts[3]["functionResponse"]["response"]["error"]["code"],
        "unknown-tool"
    );
}

#[test]
fn whole_responses_are_accepted_where_the_api_has_one() {
    let message = golden("openai-response.json");
    let completion = json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
        "model": "gpt-5", "choices": [
            {"index": 0, "finish_reason": "tool_calls", "message": message},
            {"index": 1, "finish_reason": "tool_calls", "message": {"role": "assistant",
                "content": null, "tool_calls": [{"id": "only", "type": "function",
                "function": {"name": "sluice__echo", "arguments": "{\"n\": 2}"}}]}}]});
    let r = run_as("openai", "openai", &completion, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json(), golden("openai-results.json"));
    let r = run_as("openai", "openai", &completion, &["--choice", "1"]);
    assert_eq!(
        r.json(),
        json!([{"role": "tool", "tool_call_id": "only", "content": "{\"n\":2}"}])
    );
    let r = run_as("openai", "json", &completion, &["--choice", "7"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("no choice 7"), "{}", r.stderr);

    let mut anthropic_message = golden("anthropic-response.json");
    anthropic_message["type"] = json!("message");
    anthropic_message["id"] = json!("msg_1");
    anthropic_message["stop_reason"] = json!("tool_use");
    let r = run_as("anthropic", "anthropic", &anthropic_message, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json(), golden("anthropic-results.json"));

    // A Responses `output` array alone, and a Gemini `Content` alone.
    let output = golden("responses-response.json")["output"].clone();
    let r = run_as("openai-responses", "openai-responses", &output, &[]);
    assert_eq!(r.json(), golden("responses-results.json"));
    let content = golden("gemini-response.json")["candidates"][0]["content"].clone();
    let r = run_as("gemini", "gemini", &content, &[]);
    assert_eq!(r.json(), golden("gemini-results.json"));
}

#[test]
fn a_wrong_shape_is_refused_saying_what_was_expected_and_what_came() {
    let chat = golden("openai-response.json");
    let anthropic = golden("anthropic-response.json");
    let gemini = golden("gemini-response.json");
    let responses = golden("responses-response.json");
    let user = json!({"role": "user", "content": "What is the weather?"});
    let cases: Vec<(&str, Value, &str)> = vec![
        ("openai", user.clone(), "a `user` message"),
        ("openai", json!("call the tool"), "a bare string"),
        ("openai", anthropic.clone(), "`assistant` message"),
        ("openai", gemini.clone(), "Gemini GenerateContentResponse"),
        (
            "openai",
            anthropic["content"].clone(),
            "Anthropic content blocks",
        ),
        ("openai-responses", chat.clone(), "OpenAI Chat Completions"),
        ("openai-responses", user.clone(), "a `user` message"),
        ("openai-responses", json!(42), "a number"),
        ("anthropic", user.clone(), "a `user` message"),
        ("anthropic", chat.clone(), "OpenAI Chat Completions"),
        ("anthropic", responses.clone(), "OpenAI Responses"),
        ("anthropic", json!({"choices": []}), "ChatCompletion"),
        ("gemini", chat.clone(), "OpenAI Chat Completions"),
        (
            "gemini",
            json!({"role": "user", "parts": [{"text": "hi"}]}),
            "role \"user\"",
        ),
        ("gemini", json!(null), "null"),
        (
            "gemini",
            anthropic["content"].clone(),
            "Anthropic content blocks",
        ),
        (
            "mcp",
            chat.clone(),
            "expected an array of tools/call requests",
        ),
    ];
    for (format, doc, says) in cases {
        let r = run_as(format, "json", &doc, &[]);
        assert_eq!(r.code, 1, "{format} {doc}: {}", r.stdout);
        assert!(r.stderr.contains("expected"), "{format}: {}", r.stderr);
        assert!(
            r.stderr.contains(says),
            "{format} wanted {says:?}: {}",
            r.stderr
        );
        assert!(r.stdout.is_empty(), "{format}: nothing runs");
    }
}

#[test]
fn an_answer_in_words_runs_nothing_and_sends_nothing_back() {
    let words: Vec<(&str, Value)> = vec![
        (
            "openai",
            json!({"role": "assistant", "content": "It is sunny."}),
        ),
        (
            "openai",
            json!({"object": "chat.completion", "choices": [{"index": 0,
            "finish_reason": "stop", "message": {"role": "assistant", "content": "Sunny.",
            "tool_calls": null, "refusal": null}}]}),
        ),
        (
            "openai-responses",
            json!({"id": "resp_1", "object": "response", "output": [
            {"type": "message", "role": "assistant", "id": "m",
             "content": [{"type": "output_text", "text": "Sunny."}]}]}),
        ),
        (
            "anthropic",
            json!({"role": "assistant", "content": [{"type": "text", "text": "Sunny."}]}),
        ),
        (
            "anthropic",
            json!({"id": "msg_1", "type": "message", "role": "assistant",
            "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                        {"type": "text", "text": "Sunny."}], "stop_reason": "end_turn"}),
        ),
        (
            "gemini",
            json!({"candidates": [{"content": {"role": "model",
            "parts": [{"text": "Sunny."}]}, "finishReason": "STOP"}]}),
        ),
    ];
    for (format, doc) in words {
        let r = run_as(format, format, &doc, &[]);
        assert_eq!(r.code, 0, "{format}: {}", r.stderr);
        // No empty `user` message, no empty content: no message at all.
        assert_eq!(r.json(), json!([]), "{format}");
        assert!(
            r.stderr.contains("nothing to send back"),
            "{format}: {}",
            r.stderr
        );
        let r = run_as(format, "json", &doc, &[]);
        assert_eq!(r.json()["results"], json!([]), "{format}");
    }
}

#[test]
fn strict_schemas_say_what_they_changed_and_nulls_read_as_absent() {
    for format in ["openai", "openai-responses"] {
        let r = sluice(&["tools", "--format", format, "--strict"], None, None);
        assert_eq!(r.code, 0, "{}", r.stderr);
        for def in r.json().as_array().unwrap() {
            let (f, strict) = if format == "openai" {
                (&def["function"], &def["function"]["strict"])
            } else {
                (def, &def["strict"])
            };
            assert_eq!(*strict, json!(true), "{f}");
            let p = &f["parameters"];
            assert_eq!(p["additionalProperties"], false, "{f}");
            let props: Vec<&String> = p
                .get("properties")
                .and_then(Value::as_object)
                .map(|o| o.keys().collect())
                .unwrap_or_default();
            let required: Vec<&str> = p["required"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            assert_eq!(props.len(), required.len(), "{f}");
        }
        // The changes are listed, naming the tool and the pointer.
        assert!(
            r.stderr
                .contains("sluice__kv__incr: input schema /properties/by: optional"),
            "{}",
            r.stderr
        );
        assert!(r.stderr.contains("`minLength` dropped"), "{}", r.stderr);
    }
    // Without --strict nothing is changed and nothing is said.
    let r = sluice(&["tools", "--format", "openai"], None, None);
    assert!(r.stderr.is_empty(), "{}", r.stderr);
    assert_eq!(r.json(), golden("tools-openai.json"));

    // A strict model sends `null` for an optional property: read as absent, so the call runs.
    let msg = json!({"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
        "function": {"name": "sluice__kv__incr",
                     "arguments": "{\"key\": \"n\", \"by\": null, \"delay_ms\": null}"}}]});
    let r = run_as("openai", "json", &msg, &[]);
    assert_eq!(r.json()["results"][0]["status"], "ok", "{}", r.stdout);
    assert_eq!(r.json()["results"][0]["output"]["value"], 1);
    // A null where the property is required is still refused, naming it.
    let msg = json!({"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
        "function": {"name": "sluice__kv__get", "arguments": "{\"key\": null}"}}]});
    let r = run_as("openai", "json", &msg, &[]);
    assert_eq!(r.json()["results"][0]["error"]["code"], "invalid-input");
}

#[test]
fn gemini_gets_its_schema_subset() {
    let r = sluice(&["tools", "--format", "gemini"], None, None);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let defs = r.json();
    assert_eq!(defs, golden("tools-gemini.json"));
    assert_eq!(
        defs.as_array().unwrap().len(),
        1,
        "one Tool of declarations"
    );
    let allowed = [
        "type",
        "format",
        "title",
        "description",
        "nullable",
        "enum",
        "maxItems",
        "minItems",
        "properties",
        "required",
        "minProperties",
        "maxProperties",
        "minLength",
        "maxLength",
        "pattern",
        "example",
        "anyOf",
        "propertyOrdering",
        "default",
        "items",
        "minimum",
        "maximum",
    ];
    fn walk(s: &Value, allowed: &[&str], at: &str) {
        let Value::Object(o) = s else { return };
        for (k, v) in o {
            assert!(
                allowed.contains(&k.as_str()),
                "{at}/{k} is not in Gemini's subset"
            );
            match k.as_str() {
                "type" => assert!(
                    ["STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT"]
                        .contains(&v.as_str().unwrap()),
                    "{at}: {v}"
                ),
                "properties" => {
                    for (n, p) in v.as_object().unwrap() {
                        walk(p, allowed, &format!("{at}/properties/{n}"));
                    }
                }
                "items" => walk(v, allowed, &format!("{at}/items")),
                "anyOf" => {
                    for (i, b) in v.as_array().unwrap().iter().enumerate() {
                        walk(b, allowed, &format!("{at}/anyOf/{i}"));
                    }
                }
                _ => {}
            }
        }
    }
    for d in defs[0]["functionDeclarations"].as_array().unwrap() {
        let name = d["name"].as_str().unwrap();
        let first = name.chars().next().unwrap();
        assert!(first.is_ascii_alphabetic() || first == '_', "{name}");
        if let Some(p) = d.get("parameters") {
            assert_eq!(p["type"], "OBJECT", "{name}");
            walk(p, &allowed, name);
        }
    }
    assert!(
        r.stderr.contains("Gemini"),
        "the changes are listed: {}",
        r.stderr
    );
}

#[test]
fn every_version_can_be_offered_and_each_name_runs_its_version() {
    let dir = temp_dir("model-versions");
    let file = dir.join("tools.json");
    let tool = |v: &str, desc: &str| {
        json!({"id": "acme.note", "version": v, "description": desc,
               "input": {"type": "object"}, "output": {}, "mutating": false})
    };
    std::fs::write(
        &file,
        json!([
            tool("1.2.0", "old"),
            tool("1.10.0", "new"),
            tool("1.9.0", "mid")
        ])
        .to_string(),
    )
    .unwrap();
    let t = file.to_str().unwrap();
    let r = sluice(&["tools", "--tools", t, "--format", "openai"], None, None);
    let names: Vec<String> = r
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["function"]["name"].as_str().unwrap().to_owned())
        .filter(|n| n.starts_with("acme"))
        .collect();
    assert_eq!(names, ["acme__note"], "only the highest by default");
    let r = sluice(
        &[
            "tools",
            "--tools",
            t,
            "--format",
            "openai",
            "--all-versions",
        ],
        None,
        None,
    );
    let defs = r.json();
    let by_name = |n: &str| {
        defs.as_array()
            .unwrap()
            .iter()
            .find(|d| d["function"]["name"] == n)
            .map(|d| d["function"]["description"].clone())
    };
    assert_eq!(by_name("acme__note"), Some(json!("new")));
    assert_eq!(by_name("acme__note_x40_1__2__0"), Some(json!("old")));
    assert_eq!(by_name("acme__note_x40_1__9__0"), Some(json!("mid")));
    let r = sluice(
        &["tools", "--tools", t, "--format", "mcp", "--all-versions"],
        None,
        None,
    );
    let mcp = r.json();
    let mcp_names: Vec<&str> = mcp
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["name"].as_str().unwrap().starts_with("acme"))
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(mcp_names.len(), 3);
    assert!(mcp_names.contains(&"acme.note"));
    let latest = mcp
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "acme.note")
        .unwrap();
    assert_eq!(latest["_meta"]["sluice.dev/version"], "1.10.0");

    // Each name calls its own version (no handler here: the result still says which).
    let msg = json!({"role": "assistant", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "acme__note", "arguments": "{}"}},
        {"id": "b", "type": "function",
         "function": {"name": "acme__note_x40_1__2__0", "arguments": "{}"}}]});
    let log = dir.join("log.jsonl");
    let r = run_as(
        "openai",
        "json",
        &msg,
        &["--tools", t, "--provenance", log.to_str().unwrap()],
    );
    let results = r.json()["results"].clone();
    // The provenance records say which version each call ran.
    let text = std::fs::read_to_string(&log).unwrap();
    let versions: Vec<&str> = ["1.10.0", "1.2.0"]
        .into_iter()
        .filter(|v| text.contains(&format!("\"tool_version\":\"{v}\"")))
        .collect();
    assert_eq!(versions, ["1.10.0", "1.2.0"], "{text}");
    assert_eq!(results[0]["version"], "1.10.0", "{results}");
    assert_eq!(results[1]["version"], "1.2.0", "{results}");
    assert_eq!(results[1]["tool"], "acme.note");
}
