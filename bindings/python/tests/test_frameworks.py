"""The frameworks that run a turn's tool calls at once, each scripted offline its own way: alone,
two increments of one counter in one turn lose an update; through Sluice they do not, and an
increment of another counter still overlaps them (from the handlers' own clocks)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import sluice

# One model turn: two increments of counter `n`, one of counter `m`.
TURN = [("t1", "n"), ("t2", "n"), ("t3", "m")]
NAME = "c__incr"  # `c.incr` as the kernel names it for the model APIs


class Counters:
    """Counters whose increment reads, waits and writes: the lost update two racing calls make."""

    def __init__(self) -> None:
        self.values: dict[str, int] = {}
        self.spans: list[tuple[str, float, float]] = []

    async def incr(self, name: str) -> int:
        start = time.monotonic()
        before = self.values.get(name, 0)
        await asyncio.sleep(0.03)
        self.values[name] = before + 1
        self.spans.append((name, start, time.monotonic()))
        return self.values[name]

    def kernel(self) -> sluice.Kernel:
        @sluice.tool(id="c.incr", effects=[{"kind": "writes", "resource": "counter:{name}"}])
        async def incr(name: str) -> int:
            """Increments a counter."""
            return await self.incr(name)

        return sluice.Kernel([incr])

    def assert_ordered_and_overlapping(self) -> None:
        assert self.values == {"n": 2, "m": 1}, self.values
        n = sorted((s for s in self.spans if s[0] == "n"), key=lambda s: s[1])
        (m,) = (s for s in self.spans if s[0] == "m")
        assert n[0][2] <= n[1][1], "the increments of n never overlap"
        assert m[1] < n[0][2] and n[0][1] < m[2], "the increment of m runs beside them"


async def test_langgraph_tool_node() -> None:
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool as lc_tool
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode as LangGraphToolNode
    from sluice.langgraph import ToolNode

    turn = AIMessage(
        content="",
        tool_calls=[{"name": NAME, "args": {"name": c}, "id": i} for i, c in TURN],
    )

    def graph(tools: Any) -> Any:
        model = FakeMessagesListChatModel(responses=[turn])

        async def agent(state: MessagesState) -> dict[str, Any]:
            return {"messages": [await model.ainvoke(state["messages"])]}

        g = StateGraph(MessagesState)
        g.add_node("agent", agent)
        g.add_node("tools", tools)
        g.add_edge(START, "agent")
        g.add_edge("agent", "tools")
        g.add_edge("tools", END)
        return g.compile()

    alone = Counters()

    @lc_tool(NAME)
    async def incr(name: str) -> int:
        """Increments a counter."""
        return await alone.incr(name)

    await graph(LangGraphToolNode([incr])).ainvoke({"messages": [HumanMessage("count")]})
    assert alone.values["n"] == 1, "LangGraph alone loses one of the two increments"

    through = Counters()
    node = ToolNode(through.kernel(), tenant="acme")
    assert [t["function"]["name"] for t in node.tools()] == [NAME]
    out = await graph(node).ainvoke({"messages": [HumanMessage("count")]})
    through.assert_ordered_and_overlapping()
    answers = [m for m in out["messages"] if m.type == "tool"]
    assert [(m.tool_call_id, json.loads(m.content)) for m in answers] == [
        ("t1", 1),
        ("t2", 2),
        ("t3", 1),
    ]


async def test_pydantic_ai_toolset() -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from sluice.pydantic_ai import SluiceToolset

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(
                parts=[ToolCallPart(NAME, {"name": c}, tool_call_id=i) for i, c in TURN]
            )
        return ModelResponse(parts=[TextPart("counted")])

    alone = Counters()
    agent = Agent(FunctionModel(script))

    @agent.tool_plain(name=NAME)
    async def incr(name: str) -> int:
        """Increments a counter."""
        return await alone.incr(name)

    await agent.run("count")
    assert alone.values["n"] == 1, "Pydantic AI alone loses one of the two increments"

    through = Counters()
    toolset = SluiceToolset(through.kernel(), tenant="acme")
    result = await Agent(FunctionModel(script), toolsets=[toolset]).run("count")
    assert result.output == "counted"
    through.assert_ordered_and_overlapping()


async def test_openai_agents_function_tools() -> None:
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )
    from sluice.agents import function_tools

    set_tracing_disabled(True)

    class Scripted(Model):
        """The model's turns, scripted: the three calls, then a word."""

        def __init__(self) -> None:
            self.turns = 0

        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            self.turns += 1
            if self.turns == 1:
                output: list[Any] = [
                    ResponseFunctionToolCall(
                        arguments=json.dumps({"name": c}),
                        call_id=i,
                        name=NAME,
                        type="function_call",
                        id=f"fc_{i}",
                    )
                    for i, c in TURN
                ]
            else:
                output = [
                    ResponseOutputMessage(
                        id="msg_1",
                        role="assistant",
                        status="completed",
                        type="message",
                        content=[
                            ResponseOutputText(text="counted", type="output_text", annotations=[])
                        ],
                    )
                ]
            return ModelResponse(output=output, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the test does not stream")

    alone = Counters()

    @function_tool(name_override=NAME)
    async def incr(name: str) -> int:
        """Increments a counter."""
        return await alone.incr(name)

    await Runner.run(Agent(name="alone", model=Scripted(), tools=[incr]), "count")
    assert alone.values["n"] == 1, "the Agents SDK alone loses one of the two increments"

    through = Counters()
    tools = function_tools(through.kernel(), tenant="acme")
    result = await Runner.run(Agent(name="sluice", model=Scripted(), tools=tools), "count")
    assert result.final_output == "counted"
    through.assert_ordered_and_overlapping()
