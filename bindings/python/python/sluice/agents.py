"""The OpenAI Agents SDK: function tools whose invocation runs through Sluice.

The Agents SDK runs a turn's function calls as concurrent tasks. With these tools, each call is
submitted to the kernel as its task starts (in the model's order), so calls that conflict run
one after the other in that order and the others at once.

    from sluice.agents import function_tools

    agent = Agent(name="coder", tools=function_tools(kernel, tenant="acme"))
"""

from __future__ import annotations

import json
from typing import Any

from agents import FunctionTool

from . import Kernel

__all__ = ["function_tools"]


def function_tools(kernel: Kernel, *, tenant: str = "default") -> list[FunctionTool]:
    """The kernel's tools as the SDK's `FunctionTool`s (named as `Kernel.tools_for("openai")`
    names them): invoking one runs the call through the kernel for `tenant`, and the model gets
    its output as JSON, or its error."""
    out: list[FunctionTool] = []
    for definition in kernel.tools_for("openai"):
        f = definition["function"]
        out.append(
            FunctionTool(
                name=f["name"],
                description=f.get("description") or f["name"],
                params_json_schema=f.get("parameters") or {"type": "object", "properties": {}},
                on_invoke_tool=_invoker(kernel, tenant, f["name"]),
                strict_json_schema=False,
            )
        )
    return out


def _invoker(kernel: Kernel, tenant: str, name: str) -> Any:
    async def invoke(ctx: Any, arguments: str) -> str:
        call_id = getattr(ctx, "tool_call_id", None) or name
        args = json.loads(arguments or "{}")
        ((_result, text),) = await kernel.run_named([(call_id, name, args)], tenant=tenant)
        return text

    return invoke
