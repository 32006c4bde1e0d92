//! An agent loop with Sluice as its dispatch core.
//!
//! A scripted model (no network) answers each turn with tool calls, emitted one at a time as a
//! streaming model would. Each call goes into the kernel the moment it arrives and starts as soon
//! as it may; the loop reads completions as they happen and, when the turn's calls are done, feeds
//! the results back to the model for the next turn.
//!
//! Run: `cargo run --example agent_loop`.

use std::time::Duration;

use serde_json::{json, Value};
use sluice::kernel::batch::{Call, CallResult, Status};
use sluice::kernel::builtin::{self, BuiltinConfig, KvStore};
use sluice::kernel::kernel::Kernel;

/// A model that answers from a script: each turn is a list of (tool, input) calls; it reads the
/// previous turn's results to decide whether it is done.
struct ScriptedModel {
    turns: Vec<Vec<(&'static str, Value)>>,
    turn: usize,
}

impl ScriptedModel {
    fn new() -> Self {
        ScriptedModel {
            turns: vec![
                // Turn 1: look around; two reads and a counter bump run together.
                vec![
                    ("sluice.kv.get", json!({"key": "todo", "delay_ms": 30})),
                    ("sluice.kv.incr", json!({"key": "turns", "delay_ms": 10})),
                    ("sluice.kv.get", json!({"key": "notes", "delay_ms": 30})),
                ],
                // Turn 2: write two notes, then read one back: the read waits for its write only.
                vec![
                    (
                        "sluice.kv.put",
                        json!({"key": "notes", "value": "fix the parser", "delay_ms": 20}),
                    ),
                    (
                        "sluice.kv.put",
                        json!({"key": "todo", "value": ["parser"], "delay_ms": 40}),
                    ),
                    ("sluice.kv.get", json!({"key": "notes"})),
                    ("sluice.kv.incr", json!({"key": "turns", "delay_ms": 10})),
                ],
            ],
            turn: 0,
        }
    }

    /// The next turn's calls, given the last turn's results (an empty turn ends the loop).
    async fn respond(&mut self, last: &[CallResult]) -> Vec<Call> {
        for r in last {
            if r.status != Status::Ok {
                println!("  model sees an error for {}: {:?}", r.id, r.error);
            }
        }
        let Some(calls) = self.turns.get(self.turn) else {
            return Vec::new();
        };
        self.turn += 1;
        calls
            .iter()
            .enumerate()
            .map(|(i, (tool, input))| {
                Call::new(format!("t{}-{i}", self.turn), *tool, input.clone())
            })
            .collect()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let kv = KvStore::new();
    let kernel = Kernel::builder()
        .tools(builtin::registry(BuiltinConfig {
            root: std::env::temp_dir(),
            kv: kv.clone(),
        })?)
        .build()?;
    let mut model = ScriptedModel::new();
    let mut last: Vec<CallResult> = Vec::new();
    loop {
        let calls = model.respond(&last).await;
        if calls.is_empty() {
            break;
        }
        println!("turn {}: {} call(s)", model.turn, calls.len());
        let mut batch = kernel.open("demo-tenant")?;
        for call in calls {
            // A streaming model emits calls a few milliseconds apart; each starts on arrival.
            tokio::time::sleep(Duration::from_millis(2)).await;
            println!("  -> {} {}", call.id, call.tool);
            batch.submit(call)?;
        }
        batch.close();
        while let Some(done) = batch.next_completion().await {
            println!(
                "  <- {} {} {}",
                done.id,
                done.status,
                done.output.clone().unwrap_or(Value::Null)
            );
        }
        let result = batch.finish().await;
        println!(
            "  turn makespan {:.1} ms",
            result.makespan.as_secs_f64() * 1e3
        );
        last = result.results;
    }
    println!("final store: {:?}", kv.snapshot());
    let turns = kv.get("turns").and_then(|v| v.as_i64());
    assert_eq!(turns, Some(2), "each turn's counter bump ran exactly once");
    Ok(())
}
