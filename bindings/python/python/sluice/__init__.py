"""Sluice for Python: the Sluice kernel in process, for agent loops that run a turn's tool calls.

Calls that conflict (a write and any other access to an overlapping resource) run one after
the other in submission order; the others run at once. Each starts the moment its
predecessors end. See docs/python.md.

    import sluice

    @sluice.tool(id="notes.append", effects=[{"kind": "writes", "resource": "fs:{file}"}])
    async def append(file: str, text: str) -> dict: ...

    kernel = sluice.Kernel([append])
    results = await kernel.run([{"id": "1", "tool": "notes.append",
                                 "input": {"file": "a.md", "text": "x"}}], tenant="acme")
"""

from __future__ import annotations

import asyncio
import atexit
import inspect
import json
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import _native

__all__ = [
    "Batch",
    "Builtin",
    "Context",
    "Kernel",
    "Pack",
    "Tool",
    "ToolError",
    "builtin",
    "tool",
]


class ToolError(Exception):
    """Raised by a handler to fail its call with a code and a message for the model."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Context:
    """What a handler may know of its call (given to a handler with a `ctx` parameter)."""

    tenant: str
    batch: str
    call: str
    tool: str
    idempotency_key: str
    fencing_token: int | None = None


_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
}


def _input_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """A JSON Schema of `fn`'s keyword parameters from their annotations (`ctx` left out)."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, p in inspect.signature(fn, eval_str=True).parameters.items():
        if name == "ctx" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        origin = getattr(p.annotation, "__origin__", p.annotation)
        kind = _JSON_TYPES.get(origin)
        properties[name] = {"type": kind} if kind else {}
        if p.default is p.empty:
            required.append(name)
    return {"type": "object", "properties": properties, "required": required}


class Tool:
    """A tool: its manifest (Kindgi tool schema 1.1.0) and a Python handler, sync or async.

    The handler is called with the call's input as keyword arguments, and with `ctx` (a
    `Context`) when it has a parameter of that name. Its return value is the call's output
    (anything `json.dumps` takes); an exception is the call's error (`ToolError` gives the
    code, any other its type's name).
    """

    def __init__(self, manifest: Mapping[str, Any], handler: Callable[..., Any]) -> None:
        self.manifest: dict[str, Any] = dict(manifest)
        self.handler = handler
        self._async = inspect.iscoroutinefunction(handler)
        self._takes_ctx = "ctx" in inspect.signature(handler).parameters

    @property
    def id(self) -> str:
        """The tool's id."""
        return str(self.manifest.get("id", ""))

    async def _invoke(self, context: str, payload: str) -> str:
        ctx = Context(**json.loads(context))
        args = json.loads(payload)
        if not isinstance(args, dict):
            raise ToolError("invalid-input", f"call `{ctx.call}`: the input is not an object")
        if self._takes_ctx:
            args["ctx"] = ctx
        if self._async:
            out = await self.handler(**args)
        else:
            # A sync handler runs in a worker thread: the event loop never blocks on it.
            out = await asyncio.to_thread(self.handler, **args)
        try:
            return json.dumps(out)
        except (TypeError, ValueError) as e:
            raise ToolError(
                "invalid-output",
                f"call `{ctx.call}` ({ctx.tool}): the handler returned a value that is not "
                f"JSON: {e}",
            ) from None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Calls the handler directly (outside Sluice)."""
        return self.handler(*args, **kwargs)


def tool(
    *,
    id: str,
    effects: Sequence[Mapping[str, Any]] = (),
    description: str | None = None,
    version: str = "1.0.0",
    input: Mapping[str, Any] | None = None,
    output: Mapping[str, Any] | None = None,
    mutating: bool | None = None,
    **manifest: Any,
) -> Callable[[Callable[..., Any]], Tool]:
    """Makes a function a tool. The input schema comes from its annotations unless given;
    `mutating` defaults to whether an effect writes or deletes."""

    def make(fn: Callable[..., Any]) -> Tool:
        doc = (fn.__doc__ or "").strip()
        changes = any(e.get("kind") in ("writes", "deletes") for e in effects)
        m: dict[str, Any] = {
            "id": id,
            "version": version,
            "description": description or doc or id,
            "input": dict(input) if input is not None else _input_schema(fn),
            "output": dict(output) if output is not None else {},
            "effects": [dict(e) for e in effects],
            "mutating": changes if mutating is None else mutating,
        }
        m.update(manifest)
        return Tool(m, fn)

    return make


def _is_kindgi_tool(t: object) -> bool:
    """Whether `t` is a tool made with the Kindgi Python SDK's `kindgi.tool` (duck-typed, so
    that `kindgi` is imported only when one is given)."""
    return type(t).__module__.startswith("kindgi") and all(
        hasattr(t, a) for a in ("id", "handler", "input_schema", "invoke_args", "dump_output")
    )


class _KindgiTool(Tool):
    """A `kindgi.tool` as it is: its manifest fields, and its handler called the SDK's way —
    the input parsed by its model, a `kindgi.ToolContext` filled (tenant, run, request,
    idempotency key, cancellation), the output dumped by its model."""

    def __init__(self, t: Any) -> None:
        if getattr(t, "spec", None) is not None:
            raise TypeError(f"the Kindgi tool `{t.id}` is an http_tool: give its manifest instead")
        manifest: dict[str, Any] = {
            "id": t.id,
            "version": t.version or "1.0.0",
            "description": t.description,
            "input": t.input_schema,
            "output": t.output_schema,
            "effects": [dict(e) for e in t.effects],
            # The SDK's `None` means "may change something", as `True` does.
            "mutating": True if t.mutating is None else bool(t.mutating),
        }
        for field_name in ("limits", "sandbox", "network", "needs"):
            value = getattr(t, field_name, None)
            if value is not None:
                manifest[field_name] = value
        super().__init__(manifest, t.handler)
        self._kindgi = t

    async def _invoke(self, context: str, payload: str) -> str:
        import kindgi

        t = self._kindgi
        c = Context(**json.loads(context))
        cancellation = kindgi.Cancellation()
        ctx = kindgi.ToolContext(
            tenant_id=c.tenant,
            run_id=c.batch,
            request_id=c.call,
            idempotency_key=c.idempotency_key,
            cancellation=cancellation,
        )
        try:
            value = t.parse_input(json.loads(payload))
        except Exception as e:  # pydantic's ValidationError, or a model's own check
            raise ToolError("invalid-input", f"call `{c.call}` ({c.tool}): {e}") from None
        args = t.invoke_args(value, ctx)
        try:
            if t.is_async:
                out = await t.handler(*args)
            else:
                out = await asyncio.to_thread(t.handler, *args)
        except asyncio.CancelledError:
            # The kernel stopped the call (the batch cancelled, or its deadline): a sync
            # handler sees it through `ctx.cancellation`.
            cancellation.cancel("cancelled")
            raise
        return json.dumps(t.dump_output(out))


@dataclass(frozen=True)
class Builtin:
    """Sluice's built-in tools (fs, kv, echo, sleep), the fs tools confined to `root`."""

    root: str


@dataclass(frozen=True)
class Pack:
    """A Kindgi pack: every tool of its index (`python -m kindgi.pack index`) runs through its
    pack service at `url`, ordered and authorized by the effects its author declared.

    The service's token is `token`, else the environment variable `token_env`; it is never shown
    (not in `repr`, errors or results). The kernel checks the service against the index when it
    is made: one that serves another pack, tool or version raises `ValueError`.
    """

    index: str | os.PathLike[str]
    url: str
    token: str | None = field(default=None, repr=False)
    token_env: str = "KINDGI_PACK_SERVICE_TOKEN"


def builtin(root: str | os.PathLike[str] = ".") -> list[Builtin]:
    """The built-in tools, to list among a kernel's tools (`[*sluice.builtin(root=".")]`)."""
    return [Builtin(os.fspath(root))]


def _start(
    invoke: Callable[[str, str], Awaitable[str]], context: str, payload: str, settle: Any
) -> None:
    """Runs on the run's event loop: starts a call's handler as a task that settles `settle`."""
    task = asyncio.ensure_future(invoke(context, payload))
    settle.started(task)
    task.add_done_callback(lambda t: _settled(t, settle))


def _settled(task: asyncio.Future[str], settle: Any) -> None:
    if task.cancelled():
        settle.fail("cancelled", "the call was cancelled")
        return
    error = task.exception()
    if error is None:
        settle.done(task.result())
    elif isinstance(error, ToolError):
        settle.fail(error.code, error.message)
    else:
        settle.fail(type(error).__name__, str(error))


def _deliver(future: asyncio.Future[Any], payload: str | None) -> None:
    """Runs on a run's event loop: the extension's answer for a future the layer awaits (one
    whose awaiting task was cancelled is left alone)."""
    if not future.done():
        future.set_result(payload)


async def _answer(ask: Callable[[asyncio.AbstractEventLoop, asyncio.Future[Any]], Any]) -> Any:
    """Awaits what the extension answers to `ask(loop, future)`; cancelling the awaiting task
    cancels what `ask` returned (a batch's canceller), if anything."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    canceller = ask(loop, future)
    try:
        return await future
    except asyncio.CancelledError:
        if canceller is not None:
            canceller.cancel()
        raise


# Before the interpreter finalizes, the kernel's threads stop entering Python (and those inside
# leave): one entering during finalization would abort the process.
atexit.register(_native.at_exit)


def _cancel(settle: Any) -> None:
    """Runs on the run's event loop: cancels a call's handler task (the kernel stopped it)."""
    task = settle.task()
    if task is not None:
        task.cancel()


ToolLike = Tool | Builtin | Pack | Any  # Any: a `kindgi.tool`


def _approver(
    approver: Callable[[dict[str, Any]], bool | Awaitable[bool]],
) -> Callable[[str, str], Awaitable[str]]:
    """The approver as the extension asks it: JSON text in, `{"approved", "by", "reason"}` out."""
    by = getattr(approver, "__name__", "python-approver")

    async def ask(_context: str, payload: str) -> str:
        request = json.loads(payload)
        if inspect.iscoroutinefunction(approver):
            answer = await approver(request)
        else:
            answer = await asyncio.to_thread(approver, request)
            if inspect.isawaitable(answer):
                answer = await answer
        approved = answer is True
        reason = "" if approved else f"`{by}` said no"
        return json.dumps({"approved": approved, "by": by, "reason": reason})

    return ask


class Batch:
    """A batch open for streaming submission (`Kernel.open`).

    Each submitted call starts as soon as the calls it conflicts with have ended; `async for`
    over the batch yields results in completion order, until the batch is closed and every
    call has ended. Leaving `async with` closes it; an exception there cancels it.
    """

    def __init__(self, native: Any) -> None:
        self._native = native

    async def submit(self, call: Mapping[str, Any]) -> None:
        """Submits the next call (`{"id", "tool", "input"}`). Raises `ValueError` for a
        malformed call, an id already used in the batch, or a closed batch."""
        self._native.submit(json.dumps(call))

    def close(self) -> None:
        """No more calls will come: the batch ends when the submitted ones have."""
        self._native.close()

    def cancel(self) -> None:
        """Cancels the calls not yet ended (they are reported `cancelled`)."""
        self._native.cancel()

    async def next(self) -> dict[str, Any] | None:
        """The next result in completion order; `None` once the batch has ended."""
        text = await _answer(lambda loop, future: self._native.next(future))
        if text is None:
            return None
        result: dict[str, Any] = json.loads(text)
        return result

    def __aiter__(self) -> Batch:
        return self

    async def __anext__(self) -> dict[str, Any]:
        result = await self.next()
        if result is None:
            raise StopAsyncIteration
        return result

    async def __aenter__(self) -> Batch:
        return self

    async def __aexit__(self, kind: Any, error: Any, trace: Any) -> None:
        if error is not None:
            self.cancel()
        self.close()


class Kernel:
    """The Sluice kernel: tools, and runs of batches of their calls.

    `policy` (a policy file) and `provenance` (a log file; `durability` `durable`, the default,
    or `buffered`) are those `sluice run` takes; `timeout` (seconds) is every call's deadline
    unless its manifest's `limits.cpuMs` sets one (a call past it is cancelled and ends
    `timeout`). `approver(request)` (sync: in a
    worker thread; or async) answers each call the policy asks about with `True` or `False`;
    `request` holds `tenant`, `call`, `tool`, `input`, `accesses`, `decided_by`. Without one
    every ask is rejected, and an approver that raises rejects too (fail closed). A manifest that
    is not valid raises `ValueError` naming the tool, the JSON pointer and why.
    """

    def __init__(
        self,
        tools: Iterable[ToolLike] = (),
        *,
        policy: str | os.PathLike[str] | None = None,
        provenance: str | os.PathLike[str] | None = None,
        timeout: float | None = None,
        approver: Callable[[dict[str, Any]], bool | Awaitable[bool]] | None = None,
        durability: str = "durable",
    ) -> None:
        mine: list[Tool] = []
        packs: list[tuple[str, str, str | None, str]] = []
        root: str | None = None
        for t in tools:
            if isinstance(t, Builtin):
                root = t.root
            elif isinstance(t, Pack):
                packs.append((os.fspath(t.index), t.url, t.token, t.token_env))
            elif isinstance(t, Tool):
                mine.append(t)
            elif _is_kindgi_tool(t):
                mine.append(_KindgiTool(t))
            else:
                raise TypeError(
                    f"not a tool: {t!r} (make one with @sluice.tool, sluice.Tool, kindgi.tool "
                    "or sluice.Pack)"
                )
        self._tools = {t.id: t for t in mine}
        self._native = _native.Kernel(
            [(json.dumps(t.manifest), t._invoke) for t in mine],
            _start,
            _cancel,
            _deliver,
            root,
            os.fspath(policy) if policy is not None else None,
            os.fspath(provenance) if provenance is not None else None,
            None if timeout is None else max(1, round(timeout * 1000)),
            None if approver is None else _approver(approver),
            durability,
            packs,
        )

    async def run(
        self, calls: Sequence[Mapping[str, Any]], *, tenant: str = "default"
    ) -> list[dict[str, Any]]:
        """Runs the calls as one batch of `tenant`; their results in submission order.

        A call is `{"id", "tool", "input"}`; a result carries `id`, `tool`, `status`, and
        `output` or `error` (`code`, `message`), with its timings. Cancelling the awaiting task
        cancels the calls not yet ended.
        """
        batch = json.dumps({"tenant": tenant, "calls": list(calls)})
        text = await _answer(lambda loop, future: self._native.run(batch, loop, future))
        results: list[dict[str, Any]] = json.loads(text)["results"]
        return results

    async def run_response(
        self, api: str, response: Mapping[str, Any] | Sequence[Any], *, tenant: str = "default"
    ) -> dict[str, Any]:
        """Runs the tool calls of a model's response as one batch of `tenant`.

        `api` is `openai` (a ChatCompletion, an assistant message or its `tool_calls`),
        `openai-responses`, `anthropic`, `gemini` or `mcp`, read by the Rust adapters exactly as
        `sluice run --from` reads them. Returns `{"results": [...], "reply": [...]}`: Sluice's
        results, and what that API expects next (tool messages, `function_call_output` items, a
        `tool_result` user message, `functionResponse` parts), in the model's order.
        """
        doc = json.dumps(response)
        text = await _answer(
            lambda loop, future: self._native.run_response(api, doc, tenant, loop, future)
        )
        out: dict[str, Any] = json.loads(text)
        return out

    async def run_named(
        self, calls: Sequence[tuple[str, str, Mapping[str, Any]]], *, tenant: str = "default"
    ) -> list[tuple[dict[str, Any], str]]:
        """Runs `(call id, function name, arguments)` as one batch of `tenant`, the names being
        those `tools_for` gives the model; each call's result and the text to give the model
        back (its output as JSON, or its error). What the framework adapters use."""
        message = {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(dict(args))},
                }
                for call_id, name, args in calls
            ],
        }
        out = await self.run_response("openai", message, tenant=tenant)
        texts = [str(m.get("content", "")) for m in out["reply"]]
        return list(zip(out["results"], texts, strict=True))

    def tools_for(
        self, api: str, *, all_versions: bool = False, strict: bool = False
    ) -> list[dict[str, Any]]:
        """The tools as `api`'s tool definitions (`openai`, `openai-responses`, `anthropic`,
        `gemini`, `mcp`), named so that the model's calls come back to them."""
        out: list[dict[str, Any]] = json.loads(self._native.tools_for(api, all_versions, strict))
        return out

    def open(self, *, tenant: str = "default") -> Batch:
        """Opens a batch of `tenant` for streaming: submit calls as the model streams them,
        read completions as they end. Use it inside a running event loop."""
        return Batch(self._native.open(tenant, asyncio.get_running_loop()))

    def load(self, tenant: str = "default") -> tuple[int, int]:
        """For `tenant`: (calls not finished, calls its conflict index still remembers); both
        return to 0 when the tenant is idle."""
        unfinished, remembered = self._native.load(tenant)
        return (unfinished, remembered)

    def manifests(self) -> list[dict[str, Any]]:
        """The registered tools' manifests."""
        out: list[dict[str, Any]] = json.loads(self._native.manifests())
        return out
