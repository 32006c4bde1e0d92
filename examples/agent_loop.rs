//! An agent loop with Sluice as its dispatch core.
//!
//! A scripted model (no network) answers each turn in the OpenAI chat shape: an assistant message
//! with `tool_calls`. The loop hands the model Sluice's tools as OpenAI function definitions,
//! submits each tool call to the kernel the moment it arrives (as a streaming response delivers
//! them), reads completions as they happen, and sends the results back as `tool` messages. The
//! model reads them and answers the next turn; an answer without tool calls ends the loop.
//!
//! Run: `cargo run --example agent_loop`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::time::Duration;

use serde_json::{json, Value};
use sluice::kernel::adapters::{self, ToolNames};
use sluice::kernel::builtin::{self, BuiltinConfig, KvStore};
use sluice::kernel::run::Kernel;

/// A model that answers from a script, in the OpenAI shape.
struct ScriptedModel {
    turn: usize,
}

impl ScriptedModel {
    /// The next assistant message, given the conversation so far.
    fn respond(&mut self, conversation: &[Value]) -> Value {
        self.turn += 1;
        let call = |id: &str, name: &str, args: Value| {
            json!({"id": id, "type": "function",
                   "function": {"name": name, "arguments": args.to_string()}})
        };
        match self.turn {
            // Turn 1: look around. Two reads and a counter bump run together.
            1 => json!({"role": "assistant", "content": null, "tool_calls": [
                call("t1-todo", "sluice__kv__get", json!({"key": "todo", "delay_ms": 30})),
                call("t1-turns", "sluice__kv__incr", json!({"key": "turns", "delay_ms": 10})),
                call("t1-notes", "sluice__kv__get", json!({"key": "notes", "delay_ms": 30})),
            ]}),
            // Turn 2: write two keys, then read one back: the read waits for its write only.
            // One call is malformed on purpose: it fails alone, and the model hears why.
            2 => json!({"role": "assistant", "content": null, "tool_calls": [
                call("t2-note", "sluice__kv__put", json!({"key": "notes", "value": "fix the parser", "delay_ms": 20})),
                call("t2-todo", "sluice__kv__put", json!({"key": "todo", "value": ["parser"], "delay_ms": 40})),
                call("t2-check", "sluice__kv__get", json!({"key": "notes"})),
                {"id": "t2-broken", "type": "function",
                 "function": {"name": "sluice__kv__get", "arguments": "{\"key\": "}},
                call("t2-turns", "sluice__kv__incr", json!({"key": "turns", "delay_ms": 10})),
            ]}),
            // Turn 3: the model read the results; it answers in words and stops.
            _ => {
                let errors = conversation
                    .iter()
                    .filter(|m| m["role"] == "tool")
                    .filter(|m| {
                        m["content"]
                            .as_str()
                            .is_some_and(|c| c.starts_with("error"))
                    })
                    .count();
                json!({"role": "assistant",
                       "content": format!("Done. {errors} call(s) failed; I will fix my arguments.")})
            }
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let kv = KvStore::new();
    let tools = builtin::registry(BuiltinConfig::new(std::env::temp_dir()).with_kv(kv.clone()))?;
    let names = ToolNames::new(&tools)?;
    let definitions = adapters::openai::tools(&tools, &names);
    println!("offering the model {} tools", definitions.len());
    let kernel = Kernel::builder().tools(tools).build()?;

    let mut model = ScriptedModel { turn: 0 };
    let mut conversation: Vec<Value> = vec![json!({"role": "user", "content": "Tidy my notes."})];
    loop {
        let message = model.respond(&conversation);
        conversation.push(message.clone());
        let Some(tool_calls) = message["tool_calls"].as_array().filter(|c| !c.is_empty()) else {
            println!("model: {}", message["content"].as_str().unwrap_or(""));
            break;
        };
        println!("turn {}: {} tool call(s)", model.turn, tool_calls.len());
        let mut batch = kernel.open("demo-tenant")?;
        for (i, tool_call) in tool_calls.iter().enumerate() {
            // A streaming response delivers calls a little apart; each starts on arrival.
            tokio::time::sleep(Duration::from_millis(2)).await;
            let call = adapters::openai::call(tool_call, i, &names);
            println!("  -> {} {}", call.id, call.tool);
            batch.submit(call)?;
        }
        batch.close();
        while let Some(done) = batch.next_completion().await {
            println!("  <- {} {}", done.id, done.status);
        }
        let result = batch.finish().await;
        println!(
            "  turn makespan {:.1} ms",
            result.makespan.as_secs_f64() * 1e3
        );
        conversation.extend(adapters::openai::results(&result));
    }
    println!("final store: {:?}", kv.tenant("demo-tenant").snapshot());
    let turns = kv
        .tenant("demo-tenant")
        .get("turns")
        .and_then(|v| v.as_i64());
    assert_eq!(turns, Some(2), "each turn's counter bump ran exactly once");
    Ok(())
}
