"""LangGraph: a drop-in for `langgraph.prebuilt.ToolNode` whose tool calls run through Sluice.

LangGraph's own `ToolNode` runs the last AI message's tool calls with `asyncio.gather`: two edits
of one file race. This node runs them as one Sluice batch instead: conflicting calls in the
model's order, the others at once.

    from sluice.langgraph import ToolNode

    node = ToolNode(kernel, tenant="acme")
    model = model.bind_tools(node.tools())       # the kernel's tools, as OpenAI functions
    graph.add_node("tools", node)                # then `await graph.ainvoke(...)`
"""

from __future__ import annotations

from typing import Any

from . import Kernel

__all__ = ["ToolNode"]


class ToolNode:
    """Runs the tool calls of the last AI message in `state[messages_key]` through `kernel` as
    one batch; answers `{messages_key: [ToolMessage, ...]}` in the model's order (a failed
    call's message has `status="error"`). An async node: run the graph with `ainvoke`."""

    def __init__(
        self, kernel: Kernel, *, tenant: str = "default", messages_key: str = "messages"
    ) -> None:
        self.kernel = kernel
        self.tenant = tenant
        self.messages_key = messages_key

    def tools(self) -> list[dict[str, Any]]:
        """The kernel's tools as OpenAI function definitions (for `bind_tools`)."""
        return self.kernel.tools_for("openai")

    async def __call__(self, state: Any) -> dict[str, Any]:
        from langchain_core.messages import ToolMessage

        messages = state[self.messages_key] if isinstance(state, dict) else state
        calls = list(getattr(messages[-1], "tool_calls", None) or [])
        answers = await self.kernel.run_named(
            [(c["id"], c["name"], c["args"]) for c in calls], tenant=self.tenant
        )
        out = [
            ToolMessage(
                content=text,
                tool_call_id=c["id"],
                name=c["name"],
                status="success" if result["status"] == "ok" else "error",
            )
            for c, (result, text) in zip(calls, answers, strict=True)
        ]
        return {self.messages_key: out}
