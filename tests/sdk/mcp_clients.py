"""`sluice serve` driven by the official MCP Python SDK (`mcp`), as an MCP client would.

Run by tests/serve.rs with SLUICE_MCP_URL set to a gateway whose tenant's policy denies deletes
and the tool `sluice.sleep`, and whose approver approves asks, and SLUICE_MCP_ELICIT_URL set to
one that asks the client's user (`--approve elicit`) before `sluice.kv.put`. Prints one line per check; exits non-zero on the first failure.
"""

import asyncio
import json
import os
import sys

import httpx2
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

URL = os.environ["SLUICE_MCP_URL"]
# A second gateway, `--approve elicit`, whose policy asks before `sluice.kv.put`.
ELICIT_URL = os.environ["SLUICE_MCP_ELICIT_URL"]


async def with_session(work, url=URL, **options):
    async with httpx2.AsyncClient(timeout=60) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write, **options) as session:
                await session.initialize()
                return await work(session)


def text(result):
    return "".join(getattr(c, "text", "") for c in result.content)


async def main():
    # tools/list: the built-in tools, annotations from their effects.
    async def listing(s):
        return (await s.list_tools()).tools
    tools = {t.name: t for t in await with_session(listing)}
    assert "sluice.kv.incr" in tools and "sluice.fs.write" in tools, list(tools)
    incr = tools["sluice.kv.incr"].annotations
    assert incr.read_only_hint is False and incr.destructive_hint is True, incr
    assert tools["sluice.kv.get"].annotations.read_only_hint is True
    assert "sluice.sleep" not in tools, "a tool its tool rule denies is not listed"
    print("ok   tools/list through the Python SDK: annotations from effects, denied tools left out")

    # Three sessions, ten increments of one key each, all at once: none lost.
    async def increments(s):
        calls = [s.call_tool("sluice.kv.incr", {"key": "py", "delay_ms": 3}) for _ in range(10)]
        results = await asyncio.gather(*calls)
        assert all(not r.is_error for r in results), [text(r) for r in results if r.is_error]
    await asyncio.gather(*(with_session(increments) for _ in range(3)))

    async def read(s):
        return await s.call_tool("sluice.kv.get", {"key": "py"})
    got = await with_session(read)
    assert got.structured_content["value"] == 30, got
    print("ok   30 concurrent increments from 3 sessions: none lost")

    # A denial is a result the model reads, naming the rule.
    async def delete(s):
        return await s.call_tool("sluice.kv.delete", {"key": "py"})
    denied = await with_session(delete)
    assert denied.is_error and text(denied).startswith("denied (no-deletes)"), text(denied)
    print("ok   a denied call is an isError result naming its rule")

    # An invalid argument too; an unknown tool is a protocol error.
    async def invalid(s):
        bad = await s.call_tool("sluice.kv.get", {"key": 5})
        assert bad.is_error and text(bad).startswith("invalid-input (/key)"), text(bad)
        try:
            r = await s.call_tool("no.such.tool", {})
        except Exception as e:  # the SDK raises McpError for a JSON-RPC error
            assert "no.such.tool" in str(e), e
        else:
            raise AssertionError(f"an unknown tool answered {r}")
    await with_session(invalid)
    print("ok   invalid input is a readable result; an unknown tool a JSON-RPC error")

    # Two sessions edit one file at once: the writes run one after the other, each whole.
    async def edit(content):
        async def work(s):
            return await s.call_tool("sluice.fs.write", {"path": "shared.txt", "content": content})
        return await with_session(work)
    a, b = "A" * 100_000, "B" * 100_000
    ra, rb = await asyncio.gather(edit(a), edit(b))
    assert not ra.is_error and not rb.is_error, (text(ra), text(rb))

    async def read_file(s):
        return await s.call_tool("sluice.fs.read", {"path": "shared.txt"})
    content = (await with_session(read_file)).structured_content["content"]
    assert content in (a, b), f"a torn file: {content[:20]}…"
    print("ok   two sessions write one file at once: each write whole, one after the other")

    # Cancelling a call that waits for a conflicting one: it never runs.
    async def cancel(s):
        first = asyncio.ensure_future(
            s.call_tool("sluice.kv.incr", {"key": "cancel-me", "delay_ms": 400}))
        await asyncio.sleep(0.1)
        second = asyncio.ensure_future(s.call_tool("sluice.kv.incr", {"key": "cancel-me"}))
        await asyncio.sleep(0.1)
        second.cancel()
        try:
            await second
        except (asyncio.CancelledError, Exception):
            pass
        r = await first
        assert not r.is_error, text(r)
        await asyncio.sleep(0.5)
        got = await s.call_tool("sluice.kv.get", {"key": "cancel-me"})
        return got.structured_content["value"]
    value = await with_session(cancel)
    assert value == 1, f"the cancelled increment ran: {value}"
    print("ok   a cancelled waiting call never runs")

    # `--approve elicit`: the SDK's elicitation callback is asked (protocol 2025-11-25: an
    # elicitation/create request while the call waits); only an accepted `approve: true` runs it.
    asked, answer = [], {"action": "accept", "content": {"approve": True}}

    async def elicit(context, params):
        asked.append(params.message)
        return types.ElicitResult(**answer)

    async def puts(s):
        ok = await s.call_tool("sluice.kv.put", {"key": "e", "value": 1})
        answer.clear()
        answer.update({"action": "decline"})
        no = await s.call_tool("sluice.kv.put", {"key": "e", "value": 2})
        got = await s.call_tool("sluice.kv.get", {"key": "e"})
        return ok, no, got.structured_content["value"]
    ok, no, value = await with_session(puts, ELICIT_URL, elicitation_callback=elicit)
    assert not ok.is_error, text(ok)
    assert no.is_error and text(no).startswith("rejected (elicitation:"), text(no)
    assert value == 1, f"the declined put ran: {value}"
    assert len(asked) == 2 and "`sluice.kv.put`" in asked[0] and "ask-puts" in asked[0], asked
    print("ok   asks go to the user through elicitation: approved runs, declined is rejected")

    # Progress: a call that waits says what it waits for, then that it runs.
    answer.clear()
    answer.update({"action": "accept", "content": {"approve": True}})
    messages = []

    async def on_progress(progress, total, message):
        messages.append(message)

    async def waits(s):
        first = asyncio.ensure_future(
            s.call_tool("sluice.kv.incr", {"key": "pp", "delay_ms": 400}))
        await asyncio.sleep(0.15)
        second = await s.call_tool("sluice.kv.incr", {"key": "pp"},
                                   progress_callback=on_progress)
        return await first, second
    first, second = await with_session(waits, ELICIT_URL, elicitation_callback=elicit)
    assert not first.is_error and not second.is_error, (text(first), text(second))
    assert any(m.startswith("waiting for call `") and m.endswith("on kv:pp (read-after-write)")
               for m in messages), messages
    assert messages[-1] == "running sluice.kv.incr", messages
    print("ok   a waiting call's progress says what it waits for, then that it runs")
    print("8 checks passed")


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except AssertionError as e:
        print(f"FAIL {e}", file=sys.stderr)
        sys.exit(1)
