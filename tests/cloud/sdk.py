"""One conversation turn through the gateway with an official SDK, whole or streamed, reduced to
what the client observed. Streams go through the SDKs' own stream helpers (their accumulators
must accept every event we send), so the SDK judges the output."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import anthropic
import openai
import orjson

from tests.gateway.clients import anthropic_client, openai_client

Format = Literal["messages", "chat", "responses"]
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
QUESTION = "What is the weather in Paris?"


@dataclass
class ToolUse:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class Turn:
    text: str
    finish: str
    model: str
    tool: ToolUse | None = None
    #: What the client would send back as the assistant's turn (for the next request).
    echo: Any = None


def turn(
    fmt: Format,
    base_url: str,
    key: str,
    model: str,
    *,
    stream: bool,
    tools: bool = False,
    after: Turn | None = None,
) -> Turn:
    """A first turn (with the weather tool offered when ``tools``), or, with ``after``, the
    turn that answers ``after``'s tool call with "Sunny"."""
    if fmt == "messages":
        with anthropic_client(base_url, key) as ant:
            return _messages(ant, model, stream, tools, after)
    with openai_client(base_url, key) as oai:
        if fmt == "chat":
            return _chat(oai, model, stream, tools, after)
        return _responses(oai, model, stream, tools, after)


def _messages(client: anthropic.Anthropic, model: str, stream: bool, tools: bool, after: Turn | None) -> Turn:
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    if after is not None and after.tool is not None:
        messages += [
            {"role": "assistant", "content": after.echo},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": after.tool.id, "content": "Sunny"}],
            },
        ]
    offered: Any = [{"name": "get_weather", "input_schema": WEATHER}] if tools or after else []
    kwargs: dict[str, Any] = {"model": model, "max_tokens": 300, "messages": messages}
    if offered:
        kwargs["tools"] = offered
    if stream:
        with client.messages.stream(**kwargs) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**kwargs)
    text = "".join(b.text for b in message.content if b.type == "text")
    uses = [b for b in message.content if b.type == "tool_use"]
    tool = ToolUse(uses[0].id, uses[0].name, dict(uses[0].input)) if uses else None
    echo = [b.model_dump(exclude_none=True) for b in message.content]
    return Turn(text, str(message.stop_reason), message.model, tool, echo)


def _chat(client: openai.OpenAI, model: str, stream: bool, tools: bool, after: Turn | None) -> Turn:
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    if after is not None and after.tool is not None:
        messages += [after.echo, {"role": "tool", "tool_call_id": after.tool.id, "content": "Sunny"}]
    kwargs: dict[str, Any] = {"model": model, "messages": messages}
    if tools or after:
        kwargs["tools"] = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
    if stream:
        with client.chat.completions.stream(**kwargs) as events:
            completion = events.get_final_completion()
    else:
        completion = client.chat.completions.create(**kwargs)
    choice = completion.choices[0]
    calls = choice.message.tool_calls or []
    tool = None
    if calls:
        function = calls[0].function
        tool = ToolUse(calls[0].id, function.name, orjson.loads(function.arguments))
    echo = choice.message.model_dump(exclude_none=True, exclude={"parsed"})
    for call in echo.get("tool_calls", []):
        call.get("function", {}).pop("parsed_arguments", None)
    return Turn(choice.message.content or "", str(choice.finish_reason), completion.model, tool, echo)


def _responses(client: openai.OpenAI, model: str, stream: bool, tools: bool, after: Turn | None) -> Turn:
    items: list[Any] = [{"role": "user", "content": QUESTION}]
    if after is not None and after.tool is not None:
        items += [*after.echo, {"type": "function_call_output", "call_id": after.tool.id, "output": "Sunny"}]
    kwargs: dict[str, Any] = {"model": model, "input": items}
    if tools or after:
        kwargs["tools"] = [{"type": "function", "name": "get_weather", "parameters": WEATHER}]
    if stream:
        with client.responses.stream(**kwargs) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(**kwargs)
    calls = [item for item in response.output if item.type == "function_call"]
    tool = ToolUse(calls[0].call_id, calls[0].name, orjson.loads(calls[0].arguments)) if calls else None
    echo = [item.model_dump(exclude_none=True) for item in calls]
    finish = "tool_calls" if calls else str(response.status)
    return Turn(response.output_text, finish, response.model, tool, echo)
