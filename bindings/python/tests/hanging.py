"""A tool whose handler waits until it is cancelled, for the cancellation and deadline tests."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import sluice


@dataclass
class Hanging:
    """The tool, and what its handler saw: that it started, that it was cancelled."""

    tool: sluice.Tool
    started: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)


def hanging(tool_id: str, resource: str) -> Hanging:
    """`tool_id` writes `resource` (a template over its input) and waits 30 s unless cancelled."""
    state: dict[str, Hanging] = {}

    @sluice.tool(id=tool_id, effects=[{"kind": "writes", "resource": resource}])
    async def hang(**input: Any) -> dict[str, Any]:
        seen = state["it"]
        seen.started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.cancelled.set()
            raise
        return {}

    state["it"] = Hanging(hang)
    return state["it"]
