"""Pydantic AI: a toolset whose tools run through Sluice.

Pydantic AI runs a response's tool calls concurrently. With `SluiceToolset`, each call is
submitted to the kernel as the agent starts it (in the model's order), so calls that conflict
run one after the other in that order, across the concurrent calls of one turn, and the others
at once.

    from sluice.pydantic_ai import SluiceToolset

    agent = Agent(model, toolsets=[SluiceToolset(kernel, tenant="acme")])
"""

from __future__ import annotations

from typing import Any

from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets.abstract import AbstractToolset, ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from . import Kernel

__all__ = ["SluiceToolset"]

# The kernel checks each call against its tool's own input schema.
_ANY = SchemaValidator(schema=core_schema.any_schema())


class SluiceToolset(AbstractToolset[Any]):
    """The kernel's tools (named as `Kernel.tools_for("openai")` names them), each call run by
    the kernel for `tenant`. A failed call raises `ToolFailed` with its code and message, for
    the model to adapt to."""

    def __init__(self, kernel: Kernel, *, tenant: str = "default", id: str | None = None) -> None:
        self.kernel = kernel
        self.tenant = tenant
        self._id = id

    @property
    def id(self) -> str | None:
        return self._id

    async def get_tools(self, ctx: Any) -> dict[str, ToolsetTool[Any]]:
        tools: dict[str, ToolsetTool[Any]] = {}
        for definition in self.kernel.tools_for("openai"):
            f = definition["function"]
            tools[f["name"]] = ToolsetTool(
                toolset=self,
                tool_def=ToolDefinition(
                    name=f["name"],
                    parameters_json_schema=f.get("parameters") or {"type": "object"},
                    description=f.get("description"),
                ),
                max_retries=0,
                args_validator=_ANY,
            )
        return tools

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: Any, tool: ToolsetTool[Any]
    ) -> Any:
        call_id = getattr(ctx, "tool_call_id", None) or name
        ((result, _text),) = await self.kernel.run_named(
            [(call_id, name, tool_args)], tenant=self.tenant
        )
        if result["status"] == "ok":
            return result["output"]
        error = result.get("error") or {}
        raise ToolFailed(f"{error.get('code', result['status'])}: {error.get('message', '')}")
