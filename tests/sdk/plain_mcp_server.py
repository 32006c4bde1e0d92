"""A plain MCP server (the official Python SDK, stdio) with the same tools as Sluice's built-ins
that the Codex test uses: what an agent gets without Sluice in between. Every call runs the
moment it arrives; `sluice.kv.incr` reads, waits `delay_ms`, then writes (as Sluice's does), so
two increments that overlap lose one.

Usage: python3 plain_mcp_server.py ROOT PORT (streamable HTTP on 127.0.0.1:PORT/mcp; the SDK's
import takes seconds, so the test starts it and waits for the port before the agent connects)
"""

import asyncio
import os
import sys

from mcp.server.mcpserver import MCPServer

ROOT = sys.argv[1]
server = MCPServer("plain")
memory = {}


@server.tool(name="sluice.fs.write", description="Write a file under the root.")
async def fs_write(path: str, content: str) -> dict:
    full = os.path.join(ROOT, path)
    with open(full, "w") as f:
        f.write(content)
    return {"path": full, "bytes": len(content.encode())}


@server.tool(name="sluice.kv.incr", description="Add 1 to a counter in memory.")
async def kv_incr(key: str, delay_ms: int = 0) -> dict:
    value = memory.get(key, 0)
    await asyncio.sleep(delay_ms / 1000)
    memory[key] = value + 1
    return {"key": key, "value": value + 1}


@server.tool(name="sluice.kv.get", description="Read a value from memory.")
async def kv_get(key: str) -> dict:
    return {"key": key, "value": memory.get(key)}


@server.tool(name="sluice.kv.delete", description="Delete a value from memory.")
async def kv_delete(key: str) -> dict:
    return {"key": key, "deleted": memory.pop(key, None) is not None}


@server.tool(name="sluice.sleep", description="Sleep for ms milliseconds.")
async def sleep(ms: int) -> dict:
    await asyncio.sleep(ms / 1000)
    return {"slept_ms": ms}


server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
