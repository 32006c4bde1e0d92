"""A complete agent loop with Sluice: the model's turns in OpenAI Chat shape, each turn's tool
calls run as one batch, the replies appended, until the model answers in words.

The model is scripted here (a real loop calls the API with `tools=kernel.tools_for("openai")`):
its first turn edits one note twice and reads another at once, which an `asyncio.gather` loop
would race. Run: `python bindings/python/examples/agent_loop.py`.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import sluice

notes: dict[str, str] = {"b": "untouched"}


@sluice.tool(id="notes.append", effects=[{"kind": "writes", "resource": "note:{name}"}])
async def append(name: str, text: str) -> dict[str, Any]:
    """Appends text to a note."""
    before = notes.get(name, "")
    await asyncio.sleep(0.02)  # a real edit reads, thinks, writes
    notes[name] = before + text
    return {"length": len(notes[name])}


@sluice.tool(id="notes.read", effects=[{"kind": "reads", "resource": "note:{name}"}])
def read(name: str) -> dict[str, Any]:
    """Reads a note (sync: runs in a worker thread)."""
    return {"text": notes.get(name, "")}


def call(i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"call_{i}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}  # fmt: skip


SCRIPT: list[dict[str, Any]] = [
    {"role": "assistant", "content": None, "tool_calls": [
        call(1, "notes__append", {"name": "a", "text": "x"}),
        call(2, "notes__append", {"name": "a", "text": "y"}),
        call(3, "notes__read", {"name": "b"}),
    ]},
    {"role": "assistant", "content": None, "tool_calls": [call(4, "notes__read", {"name": "a"})]},
    {"role": "assistant", "content": "Note a now reads xy."},
]  # fmt: skip


async def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The scripted model: its next turn."""
    assert {t["function"]["name"] for t in tools} == {"notes__append", "notes__read"}
    return SCRIPT[sum(1 for m in messages if m["role"] == "assistant")]


async def main() -> None:
    log = Path(tempfile.mkdtemp()) / "turns.jsonl"
    kernel = sluice.Kernel([append, read], provenance=log)
    tools = kernel.tools_for("openai")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Add x then y to note a."}]
    while True:
        turn = await model(messages, tools)
        messages.append(turn)
        if not turn.get("tool_calls"):
            break
        out = await kernel.run_response("openai", turn, tenant="acme")
        for r in out["results"]:
            waited = ", ".join(w["call"] for w in r.get("waited", {}).get("calls", []))
            print(f"  {r['id']:7} {r['tool']:13} {r['status']:6} "
                  f"{r['started_ms']:6.1f}-{r['ended_ms']:6.1f} ms"
                  + (f"  (waited for {waited})" if waited else ""))  # fmt: skip
        messages.extend(out["reply"])
    print("model:", messages[-1]["content"])
    print("note a:", notes["a"])
    print("provenance:", sum(1 for _ in log.open()), "records in", log)
    assert notes["a"] == "xy"


if __name__ == "__main__":
    asyncio.run(main())
