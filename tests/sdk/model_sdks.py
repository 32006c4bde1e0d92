"""Sluice against the official model-API SDKs (openai, anthropic, google-genai).

Run by tests/model_sdks.rs with SLUICE_BIN set and the SDKs on PYTHONPATH. Checks, for each API:
1. every tool definition `sluice tools --format <api>` prints validates as the SDK's own tool type
   (and holds no key the type does not declare);
2. responses built with the SDK's own model classes and serialized by the SDK (nulls, extra
   fields, thinking and text blocks mixed in) run as batches, with the model's ids kept;
3. every reply Sluice prints validates as the SDK's message parameter types, answers each call
   by its id, and says which failed.
Prints one line per check; exits non-zero on the first failure.
"""

import json
import os
import subprocess
import sys
import typing

from pydantic import TypeAdapter

SLUICE = os.environ["SLUICE_BIN"]
CHECKS = []


def sluice(*args, stdin=None):
    p = subprocess.run([SLUICE, *args], input=stdin, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def ok(name):
    CHECKS.append(name)
    print(f"ok   {name}")


def run_batch(fmt, doc_json, extra=()):
    code, out, err = sluice("run", "--batch", "-", "--batch-format", fmt, "--format", fmt,
                            *extra, stdin=doc_json)
    assert code == 0, f"{fmt}: exit {code}: {err}"
    return json.loads(out)


def run_json(fmt, doc_json):
    code, out, err = sluice("run", "--batch", "-", "--batch-format", fmt, stdin=doc_json)
    assert code == 0, f"{fmt}: exit {code}: {err}"
    return json.loads(out)["results"]


# --- strict key checking of TypedDict params (pydantic ignores extra keys there) -----------------

def _is_typeddict(tp):
    return isinstance(tp, type) and hasattr(tp, "__required_keys__")


def _is_union(tp):
    origin = typing.get_origin(tp)
    return origin is typing.Union or str(origin) == "<class 'types.UnionType'>"


def _shape_matches(value, tp):
    """Whether `value` could be a `tp` at all (by JSON kind, and a TypedDict's Literal fields)."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _shape_matches(value, typing.get_args(tp)[0])
    if _is_union(tp):
        return any(_shape_matches(value, b) for b in typing.get_args(tp))
    if origin is typing.Literal:
        return value in typing.get_args(tp)
    if _is_typeddict(tp):
        if not isinstance(value, dict):
            return False
        hints = typing.get_type_hints(tp)
        for k, h in hints.items():
            if k in value and typing.get_origin(h) is typing.Literal:
                if value[k] not in typing.get_args(h):
                    return False
        return all(k in value for k in tp.__required_keys__)
    if origin is not None and (origin in (list, tuple) or "Iterable" in str(origin)
                               or "Sequence" in str(origin)):
        return isinstance(value, list)
    if tp is str:
        return isinstance(value, str)
    if tp is type(None):
        return value is None
    return True


def unknown_keys(value, tp, at=""):
    """Keys of `value` that the TypedDict type `tp` (or the union branch that fits it) does not
    declare, and required keys it lacks."""
    origin = typing.get_origin(tp)
    if _is_union(tp):
        fits = [b for b in typing.get_args(tp) if _shape_matches(value, b)]
        if not fits:
            return [f"{at}: fits no branch of {tp}"]
        # A union that takes any object (a JSON Schema, say) takes this one.
        if isinstance(value, dict) and any(typing.get_origin(b) is dict for b in fits):
            return []
        # A param union may also list response models; a request is held to the TypedDicts.
        fits = [b for b in fits if _is_typeddict(b)] or fits
        return min((unknown_keys(value, b, at) for b in fits), key=len)
    if origin is typing.Annotated:
        return unknown_keys(value, typing.get_args(tp)[0], at)
    if origin in (list, typing.List, tuple) or str(origin) in ("<class 'collections.abc.Iterable'>",
                                                               "<class 'collections.abc.Sequence'>"):
        args = typing.get_args(tp)
        if isinstance(value, list) and args:
            out = []
            for i, v in enumerate(value):
                out += unknown_keys(v, args[0], f"{at}/{i}")
            return out
        return []
    if _is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{at}: not an object"]
        hints = typing.get_type_hints(tp)
        out = [f"{at}/{k}" for k in value if k not in hints]
        missing = [f"{at}/{k} (required)" for k in tp.__required_keys__ if k not in value]
        for k, v in value.items():
            if k in hints:
                out += unknown_keys(v, hints[k], f"{at}/{k}")
        return out + missing
    return []


def valid_param(value, tp, what):
    TypeAdapter(tp).validate_python(value)
    extra = unknown_keys(value, tp)
    assert not extra, f"{what}: keys the SDK type does not declare or misses: {extra} in {value}"


# --- tool definitions ----------------------------------------------------------------------------

def tools(fmt, *extra):
    code, out, err = sluice("tools", "--format", fmt, *extra)
    assert code == 0, f"tools --format {fmt}: {err}"
    return json.loads(out)


def check_tool_definitions():
    from openai.types.chat import ChatCompletionToolParam
    from openai.types.responses import FunctionToolParam
    from anthropic.types import ToolParam
    from google.genai import types as g

    for strict in ((), ("--strict",)):
        for d in tools("openai", *strict):
            valid_param(d, ChatCompletionToolParam, f"openai tool {d['function']['name']}")
            assert d["function"].get("strict", False) == bool(strict)
        ok(f"openai: every tool validates as ChatCompletionToolParam {' '.join(strict)}")
        for d in tools("openai-responses", *strict):
            valid_param(d, FunctionToolParam, f"responses tool {d['name']}")
            assert d["strict"] == bool(strict)
        ok(f"openai-responses: every tool validates as FunctionToolParam {' '.join(strict)}")
    for d in tools("anthropic"):
        valid_param(d, ToolParam, f"anthropic tool {d['name']}")
    ok("anthropic: every tool validates as ToolParam")
    gem = tools("gemini")
    assert len(gem) == 1
    tool = g.Tool.model_validate(gem[0])  # extra keys are refused by the genai models
    names = [f.name for f in tool.function_declarations]
    assert "sluice__kv__put" in names, names
    for f in tool.function_declarations:
        assert f.parameters is None or f.parameters.type == g.Type.OBJECT, f
    ok(f"gemini: one Tool of {len(names)} FunctionDeclarations validates as types.Tool")


# --- OpenAI Chat Completions ---------------------------------------------------------------------

def check_openai_chat():
    from openai.types.chat import (ChatCompletion, ChatCompletionMessage,
                                   ChatCompletionMessageFunctionToolCall,
                                   ChatCompletionMessageParam, ChatCompletionToolMessageParam)
    from openai.types.chat.chat_completion import Choice
    from openai.types.chat.chat_completion_message_function_tool_call import Function

    def call(cid, name, args):
        return ChatCompletionMessageFunctionToolCall(
            id=cid, type="function", function=Function(name=name, arguments=json.dumps(args)))

    message = ChatCompletionMessage(
        role="assistant", content="Saving, then reading back.", refusal=None,
        tool_calls=[call("call_put", "sluice__kv__put", {"key": "k", "value": 1}),
                    call("call_get", "sluice__kv__get", {"key": "k"}),
                    call("call_nope", "no_such_tool", {}),
                    call("call_bad", "sluice__kv__get", {"key": 5})])
    completion = ChatCompletion(
        id="chatcmpl-1", object="chat.completion", created=1764770000, model="gpt-5",
        choices=[Choice(index=0, finish_reason="tool_calls", message=message, logprobs=None)])
    for label, doc in [("ChatCompletion", completion.model_dump_json()),
                       ("ChatCompletion without nulls", completion.model_dump_json(exclude_none=True)),
                       ("assistant message", message.model_dump_json())]:
        reply = run_batch("openai", doc)
        assert [m["tool_call_id"] for m in reply] == ["call_put", "call_get", "call_nope", "call_bad"]
        for m in reply:
            valid_param(m, ChatCompletionToolMessageParam, "tool message")
        assert json.loads(reply[1]["content"])["value"] == 1, reply[1]
        assert "unknown-tool" in reply[2]["content"] and "invalid-input" in reply[3]["content"]
        conversation = [message.model_dump(exclude_none=True)] + reply
        TypeAdapter(typing.List[ChatCompletionMessageParam]).validate_python(conversation)
        ok(f"openai: a {label} built with the SDK runs; replies are ChatCompletionToolMessageParam")

    words = ChatCompletion(
        id="chatcmpl-2", object="chat.completion", created=1, model="gpt-5",
        choices=[Choice(index=0, finish_reason="stop", logprobs=None,
                        message=ChatCompletionMessage(role="assistant", content="Sunny."))])
    assert run_batch("openai", words.model_dump_json()) == []
    ok("openai: a text-only ChatCompletion runs nothing and sends nothing back")


# --- OpenAI Responses ----------------------------------------------------------------------------

def check_openai_responses():
    from openai.types.responses import (Response, ResponseFunctionToolCall, ResponseInputItemParam,
                                        ResponseOutputMessage, ResponseOutputText,
                                        ResponseReasoningItem)
    from openai.types.responses.response_input_item_param import FunctionCallOutput

    response = Response(
        id="resp_1", object="response", created_at=1764770000.0, model="gpt-5",
        parallel_tool_calls=True, tool_choice="auto", tools=[],
        output=[
            ResponseReasoningItem(id="rs_1", type="reasoning", summary=[]),
            ResponseOutputMessage(id="msg_1", type="message", role="assistant", status="completed",
                                  content=[ResponseOutputText(type="output_text", text="On it.",
                                                              annotations=[])]),
            ResponseFunctionToolCall(type="function_call", id="fc_1", call_id="call_a",
                                     name="sluice__kv__put",
                                     arguments=json.dumps({"key": "r", "value": "x"}),
                                     status="completed"),
            ResponseFunctionToolCall(type="function_call", id="fc_2", call_id="call_b",
                                     name="sluice__kv__get", arguments=json.dumps({"key": "r"})),
        ])
    for label, doc in [("Response", response.model_dump_json()),
                       ("Response without nulls", response.model_dump_json(exclude_none=True)),
                       ("output items", json.dumps(response.model_dump()["output"]))]:
        reply = run_batch("openai-responses", doc)
        assert [i["call_id"] for i in reply] == ["call_a", "call_b"], reply
        for item in reply:
            valid_param(item, FunctionCallOutput, "function_call_output")
            TypeAdapter(ResponseInputItemParam).validate_python(item)
        assert json.loads(reply[1]["output"])["value"] == "x"
        ok(f"openai-responses: a {label} built with the SDK runs by call_id; replies are "
           "function_call_output input items")
    words = Response(id="resp_2", object="response", created_at=1.0, model="gpt-5",
                     parallel_tool_calls=True, tool_choice="auto", tools=[],
                     output=[ResponseOutputMessage(
                         id="m", type="message", role="assistant", status="completed",
                         content=[ResponseOutputText(type="output_text", text="Sunny.",
                                                     annotations=[])])])
    assert run_batch("openai-responses", words.model_dump_json()) == []
    ok("openai-responses: a text-only Response runs nothing and sends nothing back")


# --- Anthropic -----------------------------------------------------------------------------------

def check_anthropic():
    from anthropic.types import (Message, MessageParam, TextBlock, ThinkingBlock, ToolUseBlock,
                                 Usage)

    message = Message(
        id="msg_1", type="message", role="assistant", model="claude-opus-4-5",
        stop_reason="tool_use", stop_sequence=None, usage=Usage(input_tokens=3, output_tokens=5),
        content=[ThinkingBlock(type="thinking", thinking="two writes, one read", signature="sig"),
                 TextBlock(type="text", text="Writing."),
                 ToolUseBlock(type="tool_use", id="toolu_1", name="sluice__kv__put",
                              input={"key": "a", "value": [1, 2]}),
                 ToolUseBlock(type="tool_use", id="toolu_2", name="sluice__kv__get",
                              input={"key": "a"}),
                 ToolUseBlock(type="tool_use", id="toolu_3", name="sluice__kv__incr",
                              input={"key": "a"})])
    for label, doc in [("Message", message.model_dump_json()),
                       ("Message without nulls", message.model_dump_json(exclude_none=True)),
                       ("content array", json.dumps(message.model_dump()["content"]))]:
        reply = run_batch("anthropic", doc)
        assert len(reply) == 1
        TypeAdapter(MessageParam).validate_python(reply[0])
        valid_param(reply[0], MessageParam, "user message")
        blocks = reply[0]["content"]
        assert reply[0]["role"] == "user" and blocks
        assert [b["tool_use_id"] for b in blocks] == ["toolu_1", "toolu_2", "toolu_3"]
        assert [b["is_error"] for b in blocks] == [False, False, True], blocks
        assert json.loads(blocks[1]["content"])["value"] == [1, 2]
        conversation = [message.model_dump(exclude_none=True)] + reply
        TypeAdapter(typing.List[MessageParam]).validate_python(conversation)
        ok(f"anthropic: a {label} built with the SDK runs; the reply is a MessageParam, "
           "is_error right")
    words = Message(id="msg_2", type="message", role="assistant", model="claude-opus-4-5",
                    stop_reason="end_turn", usage=Usage(input_tokens=1, output_tokens=1),
                    content=[TextBlock(type="text", text="Sunny.")])
    assert run_batch("anthropic", words.model_dump_json()) == []
    ok("anthropic: a text-only Message runs nothing and sends no empty user message")


# --- Google Gemini -------------------------------------------------------------------------------

def check_gemini():
    from google.genai import types as g

    response = g.GenerateContentResponse(
        model_version="gemini-3-pro",
        candidates=[g.Candidate(
            finish_reason=g.FinishReason.STOP, index=0,
            content=g.Content(role="model", parts=[
                g.Part(text="let me think", thought=True),
                g.Part(function_call=g.FunctionCall(id="fc_put", name="sluice__kv__put",
                                                    args={"key": "g", "value": "v"})),
                g.Part.from_function_call(name="sluice__kv__get", args={"key": "g"}),
                g.Part(text="and done"),
                g.Part.from_function_call(name="sluice__fs__read", args={"path": "../../etc/x"}),
            ]))])
    for label, doc in [("GenerateContentResponse (snake_case)",
                        response.model_dump_json(exclude_none=True)),
                       ("GenerateContentResponse (camelCase, the REST shape)",
                        response.model_dump_json(exclude_none=True, by_alias=True)),
                       ("GenerateContentResponse with nulls", response.model_dump_json()),
                       ("Content", response.candidates[0].content.model_dump_json(by_alias=True))]:
        reply = run_batch("gemini", doc)
        assert len(reply) == 1
        content = g.Content.model_validate(reply[0])
        assert content.role == "user"
        fr = [p.function_response for p in content.parts]
        assert [f.name for f in fr] == ["sluice__kv__put", "sluice__kv__get", "sluice__fs__read"]
        assert [f.id for f in fr] == ["fc_put", None, None], fr
        assert fr[1].response["output"]["value"] == "v"
        assert "error" in fr[2].response, fr[2]
        ok(f"gemini: a {label} built with the SDK runs; the reply is a types.Content of "
           "FunctionResponse parts")
    words = g.GenerateContentResponse(candidates=[g.Candidate(
        content=g.Content(role="model", parts=[g.Part(text="Sunny.")]),
        finish_reason=g.FinishReason.STOP)])
    assert run_batch("gemini", words.model_dump_json(exclude_none=True)) == []
    ok("gemini: a text-only response runs nothing and sends nothing back")


# --- wrong shapes --------------------------------------------------------------------------------

def check_wrong_shapes():
    from openai.types.chat import ChatCompletionUserMessageParam
    from anthropic.types import MessageParam

    user_openai: ChatCompletionUserMessageParam = {"role": "user", "content": "hi"}
    user_anthropic: MessageParam = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    for fmt, doc in [("openai", user_openai), ("anthropic", user_anthropic),
                     ("openai-responses", user_openai), ("gemini", user_anthropic),
                     ("openai", "call a tool"), ("anthropic", None)]:
        code, out, err = sluice("run", "--batch", "-", "--batch-format", fmt,
                                stdin=json.dumps(doc))
        assert code == 1 and "expected" in err and out == "", (fmt, code, out, err)
    ok("every format refuses a user message or a bare value (exit 1, saying what came)")


def main():
    check_tool_definitions()
    check_openai_chat()
    check_openai_responses()
    check_anthropic()
    check_gemini()
    check_wrong_shapes()
    print(f"{len(CHECKS)} checks passed")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAIL {e}", file=sys.stderr)
        sys.exit(1)
