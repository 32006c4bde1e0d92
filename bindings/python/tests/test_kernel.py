"""The kernel from Python: each guarantee checked from the handlers' own clocks."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import sluice
from hanging import hanging

Span = tuple[str, float, float]


def writer(spans: list[Span], tool_id: str = "t.write") -> sluice.Tool:
    """A tool writing `x:{key}` that sleeps `ms` and notes when it ran (by its own clock)."""

    @sluice.tool(id=tool_id, effects=[{"kind": "writes", "resource": "x:{key}"}])
    async def write(key: str, tag: str = "", ms: int = 30) -> dict[str, Any]:
        start = time.monotonic()
        await asyncio.sleep(ms / 1000)
        spans.append((tag or key, start, time.monotonic()))
        return {"key": key}

    return write


def overlap(a: Span, b: Span) -> bool:
    return a[1] < b[2] and b[1] < a[2]


def span(spans: list[Span], tag: str) -> Span:
    return next(s for s in spans if s[0] == tag)


def call(id: str, tool: str, **input: Any) -> dict[str, Any]:
    return {"id": id, "tool": tool, "input": input}


async def test_conflicting_calls_run_in_order_and_independent_ones_overlap() -> None:
    spans: list[Span] = []
    kernel = sluice.Kernel([writer(spans)])
    results = await kernel.run(
        [
            call("a", "t.write", key="k", tag="a"),
            call("b", "t.write", key="k", tag="b"),
            call("c", "t.write", key="other", tag="c"),
        ],
        tenant="acme",
    )
    assert [r["id"] for r in results] == ["a", "b", "c"]
    assert all(r["status"] == "ok" for r in results), results
    a, b, c = (span(spans, t) for t in "abc")
    assert not overlap(a, b), "two writes of one key never overlap"
    assert a[2] <= b[1], "and run in submission order"
    assert overlap(a, c), "a write of another key runs at the same time"
    # What `b` waited for, and why; `a` and `c` waited for nothing.
    (waited,) = results[1]["waited"]["calls"]
    assert (waited["call"], waited["resource"], waited["kind"]) == ("a", "x:k", "write-after-write")
    assert "waited" not in results[0] and "waited" not in results[2]


async def test_concurrent_runs_of_one_tenant_share_its_conflict_order() -> None:
    spans: list[Span] = []
    kernel = sluice.Kernel([writer(spans)])
    runs = [
        kernel.run([call(f"w{i}", "t.write", key="shared", tag=f"r{i}")], tenant="acme")
        for i in range(4)
    ]
    # Another tenant's write of the same key is its own resource.
    runs.append(kernel.run([call("z", "t.write", key="shared", tag="zeta")], tenant="zeta"))
    results = await asyncio.gather(*runs)
    assert all(r[0]["status"] == "ok" for r in results), results
    acme = sorted((s for s in spans if s[0].startswith("r")), key=lambda s: s[1])
    for first, second in zip(acme, acme[1:], strict=False):
        assert not overlap(first, second), acme
    assert any(overlap(span(spans, "zeta"), s) for s in acme), "tenants do not wait for each other"


async def test_an_exception_fails_its_call_alone() -> None:
    spans: list[Span] = []

    @sluice.tool(id="t.boom")
    async def boom() -> dict[str, Any]:
        raise KeyError("nothing here")

    @sluice.tool(id="t.refuse")
    def refuse() -> dict[str, Any]:
        raise sluice.ToolError("not-found", "no such note")

    kernel = sluice.Kernel([boom, refuse, writer(spans)])
    results = await kernel.run(
        [call("x", "t.boom"), call("y", "t.refuse"), call("w", "t.write", key="k")]
    )
    by_id = {r["id"]: r for r in results}
    assert by_id["x"]["status"] == "error"
    assert by_id["x"]["error"]["code"] == "KeyError"
    assert "nothing here" in by_id["x"]["error"]["message"]
    assert by_id["y"]["error"] == {"code": "not-found", "message": "no such note"}
    assert by_id["w"]["status"] == "ok"


async def test_a_sync_handler_runs_in_a_thread_and_never_blocks_the_loop() -> None:
    loop_thread = threading.get_ident()
    seen: dict[str, Any] = {}

    @sluice.tool(id="t.blocking", effects=[{"kind": "reads", "resource": "x:{key}"}])
    def blocking(key: str) -> dict[str, Any]:
        seen["thread"] = threading.get_ident()
        time.sleep(0.2)
        return {"key": key}

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        for _ in range(10):
            await asyncio.sleep(0.01)
            ticks += 1

    kernel = sluice.Kernel([blocking])
    results, _ = await asyncio.gather(kernel.run([call("s", "t.blocking", key="k")]), ticker())
    assert results[0]["output"] == {"key": "k"}
    assert seen["thread"] != loop_thread
    assert ticks == 10, "the loop ran while the handler slept"


async def test_an_async_handler_runs_on_the_callers_loop_with_its_context() -> None:
    seen: dict[str, Any] = {}

    @sluice.tool(id="t.where", effects=[{"kind": "reads", "resource": "x:k"}])
    async def where(ctx: sluice.Context) -> dict[str, Any]:
        seen["loop"] = asyncio.get_running_loop()
        seen["ctx"] = ctx
        return {}

    kernel = sluice.Kernel([where])
    results = await kernel.run([call("c1", "t.where")], tenant="acme")
    assert results[0]["status"] == "ok", results
    assert seen["loop"] is asyncio.get_running_loop()
    ctx = seen["ctx"]
    assert (ctx.tenant, ctx.call, ctx.tool) == ("acme", "c1", "t.where")
    assert ctx.idempotency_key and ctx.batch


async def test_cancelling_the_run_cancels_the_handlers() -> None:
    slow = hanging("t.slow", "x:{key}")
    kernel = sluice.Kernel([slow.tool])
    run = asyncio.ensure_future(kernel.run([call("s", "t.slow", key="k")]))
    await asyncio.wait_for(slow.started.wait(), 5)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    await asyncio.wait_for(slow.cancelled.wait(), 5)
    # The kernel's state returns to idle: nothing unfinished, nothing remembered.
    for _ in range(100):
        if kernel.load("default") == (0, 0):
            break
        await asyncio.sleep(0.01)
    assert kernel.load("default") == (0, 0)


async def test_a_value_that_is_not_json_is_the_calls_error_naming_it() -> None:
    @sluice.tool(id="t.odd")
    async def odd() -> Any:
        return {"when": object()}

    kernel = sluice.Kernel([odd])
    result = (await kernel.run([call("o", "t.odd")]))[0]
    assert result["status"] == "error"
    assert result["error"]["code"] == "invalid-output"
    assert "`o`" in result["error"]["message"] and "not JSON" in result["error"]["message"]


def test_an_invalid_manifest_names_the_tool_the_pointer_and_why() -> None:
    bad = sluice.Tool(
        {
            "id": "t.bad",
            "version": "1.0.0",
            "description": "d",
            "input": {"type": "object"},
            "output": {},
            "effects": [{"kind": "explodes", "resource": "x:k"}],
        },
        lambda: {},
    )
    with pytest.raises(ValueError) as e:
        sluice.Kernel([bad])
    text = str(e.value)
    assert "t.bad" in text and "/effects/0/kind" in text, text


async def test_a_batch_that_is_not_one_is_a_value_error() -> None:
    kernel = sluice.Kernel([])
    with pytest.raises(ValueError, match="/calls/0/id"):
        await kernel.run([{"tool": "sluice.echo", "input": {}}])
    with pytest.raises(ValueError, match="twice"):
        await kernel.run([call("a", "t.x"), call("a", "t.x")])
    unknown = await kernel.run([call("u", "t.nope")])
    assert unknown[0]["error"]["code"] == "unknown-tool"


async def test_policy_and_provenance_as_the_cli_has_them(tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    rule = {"id": "no-secrets", "decision": "deny", "resource": "x:secret"}
    policy.write_text(json.dumps({"tenants": {"acme": {"default": "allow", "rules": [rule]}}}))
    log = tmp_path / "turns.jsonl"
    ran: list[str] = []

    @sluice.tool(id="t.read", effects=[{"kind": "reads", "resource": "x:{key}"}])
    async def read(key: str) -> dict[str, Any]:
        ran.append(key)
        return {}

    kernel = sluice.Kernel([read], policy=policy, provenance=log)
    results = await kernel.run(
        [call("ok", "t.read", key="open"), call("no", "t.read", key="secret")], tenant="acme"
    )
    assert results[0]["status"] == "ok", results
    assert results[1]["error"]["code"] == "denied", results
    assert ran == ["open"], "the denied call never ran"
    records = [json.loads(line)["record"] for line in log.read_text().splitlines()]
    calls = {r["call"]: r for r in records if r["type"] == "call"}
    assert calls["ok"]["outcome"] == "ok", records
    assert calls["no"]["decision"] == "deny", records
    with pytest.raises(ValueError, match="durability `fast`"):
        sluice.Kernel([read], provenance=tmp_path / "other.jsonl", durability="fast")
    buffered = sluice.Kernel([read], provenance=tmp_path / "b.jsonl", durability="buffered")
    assert (await buffered.run([call("b", "t.read", key="k")]))[0]["status"] == "ok"
    del buffered  # the log closes, its records written
    import gc

    gc.collect()
    assert (tmp_path / "b.jsonl").read_text().count("\n") >= 2


async def test_the_builtin_tools_are_confined_to_their_root(tmp_path: Path) -> None:
    kernel = sluice.Kernel([*sluice.builtin(root=tmp_path)])
    results = await kernel.run(
        [
            call("w", "sluice.fs.write", path="a.txt", content="hi"),
            call("r", "sluice.fs.read", path="a.txt"),
            call("out", "sluice.fs.read", path="../outside.txt"),
        ]
    )
    assert results[0]["status"] == "ok", results
    assert results[1]["output"]["content"] == "hi", results
    assert results[2]["status"] == "error", results
    assert (tmp_path / "a.txt").read_text() == "hi"
