"""Streaming, model shapes, deadlines, threads, fork and hostile input."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from typing import Any

import pytest
import sluice
from hanging import hanging


def counter_tools(spans: list[tuple[str, float, float]]) -> list[sluice.Tool]:
    counters: dict[str, int] = {}

    @sluice.tool(id="c.incr", effects=[{"kind": "writes", "resource": "counter:{name}"}])
    async def incr(name: str, ms: int = 20) -> dict[str, Any]:
        start = time.monotonic()
        before = counters.get(name, 0)
        await asyncio.sleep(ms / 1000)
        counters[name] = before + 1
        spans.append((name, start, time.monotonic()))
        return {"value": counters[name]}

    @sluice.tool(id="c.get", effects=[{"kind": "reads", "resource": "counter:{name}"}])
    def get(name: str) -> dict[str, Any]:
        return {"value": counters.get(name, 0)}

    return [incr, get]


def call(id: str, tool: str, **input: Any) -> dict[str, Any]:
    return {"id": id, "tool": tool, "input": input}


async def test_streamed_calls_start_as_submitted_and_complete_in_their_order() -> None:
    spans: list[tuple[str, float, float]] = []
    kernel = sluice.Kernel(counter_tools(spans))
    seen: list[str] = []
    async with kernel.open(tenant="acme") as batch:
        await batch.submit(call("a", "c.incr", name="x", ms=60))
        await batch.submit(call("b", "c.incr", name="y", ms=10))
        first = await batch.next()
        assert first is not None and first["id"] == "b", "the short call ends first"
        seen.append(first["id"])
        # Submitted after `a` started: it waits for `a`, as if it had come with it.
        await batch.submit(call("c", "c.incr", name="x", ms=10))
        with pytest.raises(ValueError, match="twice|already"):
            await batch.submit(call("c", "c.get", name="x"))
        batch.close()
        async for r in batch:
            assert r["status"] == "ok", r
            seen.append(r["id"])
    assert seen == ["b", "a", "c"]
    x = sorted((s for s in spans if s[0] == "x"), key=lambda s: s[1])
    assert x[0][2] <= x[1][1], "the two increments of x never overlap"
    with pytest.raises(ValueError, match="closed"):
        await batch.submit(call("d", "c.get", name="x"))


async def test_the_model_shapes_go_out_and_come_back_through_the_rust_adapters() -> None:
    spans: list[tuple[str, float, float]] = []
    kernel = sluice.Kernel(counter_tools(spans))
    tools = kernel.tools_for("openai")
    names = {t["function"]["name"] for t in tools}
    assert names == {"c__incr", "c__get"}, tools
    # A ChatCompletion asking for two increments of one counter and a read of another.
    completion = {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": f"call_{i}",
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)},
                        }
                        for i, (name, args) in enumerate(
                            [
                                ("c__incr", {"name": "n"}),
                                ("c__incr", {"name": "n"}),
                                ("c__get", {"name": "other"}),
                            ]
                        )
                    ],
                }
            }
        ]
    }
    out = await kernel.run_response("openai", completion, tenant="acme")
    assert [r["status"] for r in out["results"]] == ["ok"] * 3, out
    assert [m["tool_call_id"] for m in out["reply"]] == ["call_0", "call_1", "call_2"]
    assert [json.loads(m["content"])["value"] for m in out["reply"]] == [1, 2, 0]
    # Anthropic: tool_use blocks in, one user message of tool_result blocks back.
    assert {t["name"] for t in kernel.tools_for("anthropic")} == {"c__incr", "c__get"}
    message = {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "tu_1", "name": "c__incr", "input": {"name": "n"}},
            {"type": "tool_use", "id": "tu_2", "name": "c__nope", "input": {}},
        ],
    }
    out = await kernel.run_response("anthropic", message, tenant="acme")
    (reply,) = out["reply"]
    assert reply["role"] == "user"
    blocks = reply["content"]
    assert [b["tool_use_id"] for b in blocks] == ["tu_1", "tu_2"]
    assert blocks[1].get("is_error") is True, blocks
    assert len(kernel.tools_for("gemini")[0]["functionDeclarations"]) == 2
    assert {i["name"] for i in kernel.tools_for("openai-responses")} == {"c__incr", "c__get"}
    # OpenAI Responses: function_call items in, function_call_output items back.
    response = {
        "output": [
            {"type": "function_call", "call_id": "fc_1", "name": "c__incr",
             "arguments": json.dumps({"name": "r"})},
        ]
    }  # fmt: skip
    out = await kernel.run_response("openai-responses", response, tenant="acme")
    (item,) = out["reply"]
    assert (item["type"], item["call_id"]) == ("function_call_output", "fc_1"), item
    assert json.loads(item["output"]) == {"value": 1}
    # Gemini: functionCall parts in, one user Content of functionResponse parts back.
    candidate = {
        "candidates": [
            {"content": {"role": "model", "parts": [
                {"functionCall": {"name": "c__incr", "args": {"name": "g"}}},
                {"functionCall": {"name": "c__get", "args": {"name": "g"}}},
            ]}}
        ]
    }  # fmt: skip
    out = await kernel.run_response("gemini", candidate, tenant="acme")
    (content,) = out["reply"]
    assert content["role"] == "user"
    parts = [p["functionResponse"] for p in content["parts"]]
    assert [p["name"] for p in parts] == ["c__incr", "c__get"]
    assert out["results"][1]["waited"]["calls"][0]["call"] == out["results"][0]["id"]
    with pytest.raises(ValueError, match="no model API"):
        kernel.tools_for("cohere")
    with pytest.raises(ValueError, match="malformed"):
        await kernel.run_response("openai", {"role": "user", "content": "hi"})


async def test_a_deadline_cancels_one_call_and_the_others_go_on() -> None:
    hang = hanging("t.hang", "x:k")

    @sluice.tool(id="t.quick")
    async def quick() -> dict[str, Any]:
        return {"ok": True}

    kernel = sluice.Kernel([hang.tool, quick], timeout=0.1)
    results = await kernel.run([call("h", "t.hang"), call("q", "t.quick")])
    assert results[0]["status"] == "timeout", results
    assert results[1]["status"] == "ok", results
    await asyncio.wait_for(hang.cancelled.wait(), 5)


def test_a_kernel_shared_by_threads_keeps_each_tenants_order() -> None:
    spans: list[tuple[str, float, float]] = []
    kernel = sluice.Kernel(counter_tools(spans))
    errors: list[BaseException] = []
    values: list[int] = []

    def worker(i: int) -> None:
        try:
            results = asyncio.run(
                kernel.run([call(f"w{i}", "c.incr", name="shared", ms=5)], tenant="acme")
            )
            values.append(results[0]["output"]["value"])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert sorted(values) == list(range(1, 9)), "no increment was lost"
    shared = sorted(spans, key=lambda s: s[1])
    for a, b in zip(shared, shared[1:], strict=False):
        assert a[2] <= b[1], "increments from eight threads never overlap"


@pytest.mark.skipif(sys.platform == "win32", reason="fork() is POSIX")
def test_after_fork_an_old_kernel_says_so_and_a_new_one_works() -> None:
    spans: list[tuple[str, float, float]] = []
    kernel = sluice.Kernel(counter_tools(spans))
    assert asyncio.run(kernel.run([call("p", "c.get", name="x")]))[0]["status"] == "ok"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave at once
        code = 0
        try:
            try:
                asyncio.run(kernel.run([call("c", "c.get", name="x")]))
                report = "the old kernel ran"
            except RuntimeError as e:
                report = "refused: " + str(e)
            fresh = sluice.Kernel(counter_tools([]))
            r = asyncio.run(fresh.run([call("n", "c.incr", name="x", ms=1)]))
            report += " | new: " + r[0]["status"]
        except BaseException as e:  # noqa: BLE001 - sent to the parent
            report = f"child failed: {e!r}"
            code = 1
        os.write(write, report.encode())
        os._exit(code)
    os.close(write)
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        assert time.monotonic() < deadline, "the child hung"
        time.sleep(0.05)
    report = os.read(read, 4096).decode()
    os.close(read)
    assert status == 0, report
    assert report.startswith("refused: ") and "before fork()" in report, report
    assert report.endswith(" | new: ok"), report
    # The parent's kernel still works.
    assert asyncio.run(kernel.run([call("p2", "c.get", name="x")]))[0]["status"] == "ok"


async def test_hostile_input_is_an_error_never_a_crash() -> None:
    @sluice.tool(id="t.echo", input={"type": "object"})
    async def echo(**input: Any) -> dict[str, Any]:
        return input

    kernel = sluice.Kernel([echo])
    huge = "x" * 5_000_000

    def nested(depth: int) -> Any:
        deep: Any = 0
        for _ in range(depth):
            deep = {"d": deep}
        return deep

    deep = nested(100)
    results = await kernel.run(
        [
            call("huge", "t.echo", text=huge),
            call("deep", "t.echo", deep=deep),
            {"id": "list", "tool": "t.echo", "input": [1, 2]},
            {"id": "str", "tool": "t.echo", "input": "not an object"},
            call("nul", "t.echo", text="a\x00b\udcff"[:3]),
        ]
    )
    by_id = {r["id"]: r for r in results}
    assert by_id["huge"]["output"]["text"] == huge
    assert by_id["deep"]["status"] == "ok", by_id["deep"]
    assert by_id["list"]["error"]["code"] == "invalid-input", by_id["list"]
    assert by_id["str"]["error"]["code"] == "invalid-input", by_id["str"]
    assert by_id["nul"]["output"]["text"] == "a\x00b"
    # Past serde_json's nesting limit (128): refused whole, saying why.
    with pytest.raises(ValueError, match="recursion limit"):
        await kernel.run([call("deeper", "t.echo", deep=nested(300))])
    with pytest.raises(TypeError):
        await kernel.run([call("o", "t.echo", when=object())])
    with pytest.raises(ValueError):
        await kernel.run([{"id": 5, "tool": "t.echo", "input": {}}])
    with pytest.raises(ValueError):
        await kernel.run([call("nan", "t.echo", x=float("nan"))])
    with pytest.raises(ValueError):
        await kernel.run([call("t", "t.echo")], tenant="")
    with pytest.raises(TypeError):
        sluice.Kernel([lambda: 1])  # type: ignore[list-item]


async def test_an_ask_goes_to_the_python_approver_and_fails_closed_without_one(
    tmp_path: Any,
) -> None:
    policy = tmp_path / "policy.json"
    rule = {"id": "ask-writes", "decision": "ask", "effects": ["writes"]}
    policy.write_text(json.dumps({"tenants": {"acme": {"default": "allow", "rules": [rule]}}}))
    spans: list[tuple[str, float, float]] = []
    asked: list[dict[str, Any]] = []

    async def reviewer(request: dict[str, Any]) -> bool:
        asked.append(request)
        return request["input"]["name"] != "forbidden"

    kernel = sluice.Kernel(counter_tools(spans), policy=policy, approver=reviewer)
    results = await kernel.run(
        [call("yes", "c.incr", name="fine"), call("no", "c.incr", name="forbidden")],
        tenant="acme",
    )
    assert results[0]["status"] == "ok", results
    assert results[1]["error"]["code"] == "rejected", results
    assert "reviewer" in results[1]["error"]["message"], results
    by_call = {a["call"]: a for a in asked}
    assert set(by_call) == {"yes", "no"}
    assert by_call["yes"]["accesses"] == [{"kind": "writes", "resource": "counter:fine"}]

    def broken(request: dict[str, Any]) -> bool:
        raise RuntimeError("the pager is down")

    for approver in (None, broken):
        strict = sluice.Kernel(counter_tools([]), policy=policy, approver=approver)
        (r,) = await strict.run([call("w", "c.incr", name="x")], tenant="acme")
        assert r["error"]["code"] == "rejected", r


async def test_a_kindgi_sdk_tool_is_taken_as_it_is() -> None:
    import kindgi
    from pydantic import BaseModel

    class Note(BaseModel):
        name: str
        text: str

    class Saved(BaseModel):
        length: int

    notes: dict[str, str] = {}
    seen: list[kindgi.ToolContext] = []
    windows: list[tuple[float, float]] = []

    @kindgi.tool(id="notes.append", effects=[{"kind": "writes", "resource": "note:{name}"}])
    async def append(note: Note, ctx: kindgi.ToolContext) -> Saved:
        "Appends to a note."
        seen.append(ctx)
        start = time.monotonic()
        before = notes.get(note.name, "")
        await asyncio.sleep(0.02)
        notes[note.name] = before + note.text
        windows.append((start, time.monotonic()))
        return Saved(length=len(notes[note.name]))

    waited = threading.Event()

    @kindgi.tool(id="notes.wait", effects=[], mutating=False)
    def wait(note: Note, ctx: kindgi.ToolContext) -> Saved:
        "Waits until cancelled."
        if ctx.cancellation.wait(10):
            waited.set()
        return Saved(length=0)

    kernel = sluice.Kernel([append, wait], timeout=0.2)
    results = await kernel.run(
        [
            call("1", "notes.append", name="a", text="x"),
            call("2", "notes.append", name="a", text="y"),
            call("bad", "notes.append", name="a"),
            call("w", "notes.wait", name="a", text=""),
        ],
        tenant="acme",
    )
    assert [r["status"] for r in results[:2]] == ["ok", "ok"], results
    assert results[1]["output"] == {"length": 2}
    assert notes["a"] == "xy", "both edits kept, in order"
    assert windows[0][1] <= windows[1][0]
    assert results[2]["error"]["code"] == "invalid-input", results
    assert results[3]["status"] == "timeout", results
    assert await asyncio.to_thread(waited.wait, 5), "the sync handler saw its cancellation"
    ctx = seen[0]
    assert (ctx.tenant_id, ctx.request_id) == ("acme", "1")
    assert ctx.run_id and ctx.idempotency_key
    manifest = next(m for m in kernel.manifests() if m["id"] == "notes.append")
    assert manifest["input"]["properties"]["text"]["type"] == "string"
