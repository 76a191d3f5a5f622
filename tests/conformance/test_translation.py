"""Cross-format pairs through the IR, whole and streamed, against a fake upstream on loopback.

The fake records what the gateway sent (so the request translation is checked on the wire) and
answers in its own dialect; the official SDKs judge what the client gets back. Deployments:
``aria-haiku-4.5`` → Messages upstream, ``aria-sonnet-4.6`` and ``nova-5.6-sol`` → Chat-only
upstream, ``nova-5.5`` → OpenAI (Chat + Responses) upstream (see conftest).
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from tests.conformance.conftest import UPSTREAM_KEY, Wired, issue_key, usage_records
from tests.fakes.upstream import Fault, Reply
from tests.gateway.clients import SdkClients, anthropic_client, openai_client

WEATHER: dict[str, object] = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
PNG = "iVBORw0KGgo="
# A stream the fake cuts after four events; the pause between events lets them leave the
# fake's socket before it aborts the connection (an abort discards unsent bytes).
CUT_REPLY = Reply(text="partial answer text", chunks=6, event_delay=0.01)
TOOL_REPLY = Reply.tool_call(
    "get_weather", {"city": "Paris"}, text="Let me check.", input_tokens=30, output_tokens=9
)


# --- Chat client -> Messages upstream ---------------------------------------------------------


def test_chat_request_is_translated_to_messages(wired: Wired, sdk: SdkClients) -> None:
    secret, _ = issue_key(wired.gateway, "Pro")
    wired.script.reset(Reply(text="Sunny."))
    sdk.openai(wired.gateway.base_url, secret).chat.completions.create(
        model="aria-haiku-4.5",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use metric units."}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Weather here?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/sky.jpg"}},
                ],
            },
            {
                "role": "assistant",
                "content": "Checking.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "12 C"},
        ],
        tools=[
            {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER, "strict": True}}
        ],
        tool_choice="required",
        parallel_tool_calls=False,
        stop=["END"],
        max_completion_tokens=500,
        frequency_penalty=0.5,
        logit_bias={"50256": -100},
        seed=7,
        temperature=1.5,
    )
    sent = wired.fake.requests[-1]
    assert sent.path == "/v1/messages" and sent.headers["x-api-key"] == UPSTREAM_KEY
    assert "authorization" not in sent.headers and sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.json() == {
        "model": "claude-haiku-4-5",
        # System and developer instructions merged into one top-level system (spec rule 1).
        "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use metric units."}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Weather here?"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/sky.jpg"}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Oslo"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_1",
                        "content": [{"type": "text", "text": "12 C"}],
                    }
                ],
            },
        ],
        "max_tokens": 500,
        "stop_sequences": ["END"],
        "temperature": 1.0,  # clamped to the Messages range
        "tools": [{"name": "get_weather", "input_schema": WEATHER}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
    }


def test_chat_client_gets_a_messages_tool_call_whole(wired: Wired, sdk: SdkClients) -> None:
    secret, key_id = issue_key(wired.gateway, "Pro")
    wired.script.reset(TOOL_REPLY)
    completion = sdk.openai(wired.gateway.base_url, secret).chat.completions.create(
        model="aria-haiku-4.5",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}],
    )
    assert completion.id.startswith("chatcmpl-") and completion.model == "aria-haiku-4.5"
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me check."
    assert choice.message.tool_calls is not None
    call = choice.message.tool_calls[0]
    assert call.type == "function"
    assert call.id == "toolu_01FakeToolCall0001"  # the tool-call id stays stable across formats
    assert orjson.loads(call.function.arguments) == {"city": "Paris"}
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (30, 9)
    record = usage_records(wired.gateway, key_id)[0]
    assert (record.input_tokens, record.output_tokens, record.model) == (30, 9, "aria-haiku-4.5")


@pytest.mark.parametrize("include_usage", [True, False])
def test_chat_client_streams_a_messages_tool_call(wired: Wired, include_usage: bool, sdk: SdkClients) -> None:
    secret, key_id = issue_key(wired.gateway, "Pro")
    wired.script.reset(TOOL_REPLY)
    options: Any = {"stream_options": {"include_usage": True}} if include_usage else {}
    chunks = list(
        sdk.openai(wired.gateway.base_url, secret).chat.completions.create(
            model="aria-haiku-4.5",
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=[{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}],
            stream=True,
            **options,
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Let me check."
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
    assert calls[0].id == "toolu_01FakeToolCall0001" and calls[0].function.name == "get_weather"
    assert len(calls) >= 3  # the opening fragment, then the argument deltas as they came
    assert orjson.loads("".join(c.function.arguments or "" for c in calls)) == {"city": "Paris"}
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["tool_calls"]
    if include_usage:
        assert chunks[-1].choices == [] and chunks[-1].usage is not None
        assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (30, 9)
    else:
        assert all(c.usage is None for c in chunks)
    record = usage_records(wired.gateway, key_id)[0]
    assert (record.input_tokens, record.output_tokens, record.status) == (30, 9, "ok")


def test_chat_round_trip_over_a_messages_upstream(wired: Wired, sdk: SdkClients) -> None:
    secret, _ = issue_key(wired.gateway, "Basic")
    client = sdk.openai(wired.gateway.base_url, secret)
    wired.script.reset(TOOL_REPLY, Reply(text="It is sunny in Paris."))
    tools: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
    ask: Any = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.chat.completions.create(model="aria-haiku-4.5", messages=ask, tools=tools)
    assert first.choices[0].finish_reason == "tool_calls"
    assert first.choices[0].message.tool_calls is not None
    call = first.choices[0].message.tool_calls[0]
    echoed: Any = first.choices[0].message.model_dump(exclude_none=True)  # as a client echoes it
    second = client.chat.completions.create(
        model="aria-haiku-4.5",
        messages=[*ask, echoed, {"role": "tool", "tool_call_id": call.id, "content": "Sunny"}],
        tools=tools,
    )
    assert (
        second.choices[0].finish_reason == "stop"
        and second.choices[0].message.content == "It is sunny in Paris."
    )
    upstream_turns = wired.fake.requests[-1].json()["messages"]
    assert upstream_turns[1]["content"][-1] == {
        "type": "tool_use",
        "id": call.id,
        "name": "get_weather",
        "input": {"city": "Paris"},
    }
    assert upstream_turns[2]["content"][0]["tool_use_id"] == call.id


# --- Messages client -> Chat upstream ---------------------------------------------------------


def test_messages_request_is_translated_to_chat(wired: Wired, sdk: SdkClients) -> None:
    secret, _ = issue_key(wired.gateway, "Pro")
    sdk.anthropic(wired.gateway.base_url, secret).messages.create(
        model="aria-sonnet-4.6",
        max_tokens=400,
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Weather?"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "12 C"},
                    {"type": "text", "text": "And tomorrow?"},
                ],
            },
        ],
        tools=[{"name": "get_weather", "input_schema": WEATHER, "cache_control": {"type": "ephemeral"}}],
        tool_choice={"type": "tool", "name": "get_weather"},
        stop_sequences=["END"],
        metadata={"user_id": "u-1"},
    )
    sent = wired.fake.requests[-1]
    assert sent.path == "/v1/chat/completions" and "x-api-key" not in sent.headers
    assert sent.json() == {
        "model": "llama-3.3-70b",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Weather?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                ],
            },
            # Thinking is dropped: its signature means nothing to another upstream.
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "toolu_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "toolu_1", "content": "12 C"},
            {"role": "user", "content": "And tomorrow?"},
        ],
        "max_completion_tokens": 400,
        "stop": ["END"],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "user": "u-1",
    }


def test_messages_client_streams_a_chat_tool_call(wired: Wired, sdk: SdkClients) -> None:
    secret, key_id = issue_key(wired.gateway, "Pro")
    wired.script.reset(TOOL_REPLY)
    client = sdk.anthropic(wired.gateway.base_url, secret)
    with client.messages.stream(
        model="aria-sonnet-4.6",
        max_tokens=400,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[{"name": "get_weather", "input_schema": WEATHER}],
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    sent = wired.fake.requests[-1].json()
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert text == "Let me check." and final.id.startswith("msg_") and final.model == "aria-sonnet-4.6"
    assert final.stop_reason == "tool_use"
    call = final.content[1]
    assert (
        call.type == "tool_use" and call.id == "call_01FakeToolCall0001" and call.input == {"city": "Paris"}
    )
    assert (final.usage.input_tokens, final.usage.output_tokens) == (30, 9)
    record = usage_records(wired.gateway, key_id)[0]
    assert (record.input_tokens, record.output_tokens) == (30, 9)


def test_messages_round_trip_over_a_chat_upstream(wired: Wired, sdk: SdkClients) -> None:
    secret, _ = issue_key(wired.gateway, "Pro")
    wired.script.reset(TOOL_REPLY, Reply(text="Sunny.", output_tokens=2))
    client = sdk.anthropic(wired.gateway.base_url, secret)
    tools: Any = [{"name": "get_weather", "input_schema": WEATHER}]
    ask: Any = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.messages.create(model="aria-sonnet-4.6", max_tokens=300, messages=ask, tools=tools)
    assert first.stop_reason == "tool_use"
    call = first.content[1]
    assert call.type == "tool_use"
    echoed: Any = [b.model_dump(exclude_none=True) for b in first.content]  # as a client echoes it
    second = client.messages.create(
        model="aria-sonnet-4.6",
        max_tokens=300,
        tools=tools,
        messages=[
            *ask,
            {"role": "assistant", "content": echoed},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "Sunny"}],
            },
        ],
    )
    answer = second.content[0]
    assert second.stop_reason == "end_turn" and answer.type == "text" and answer.text == "Sunny."
    assert wired.fake.requests[-1].json()["messages"][-1] == {
        "role": "tool",
        "tool_call_id": call.id,
        "content": "Sunny",
    }


# --- Responses client -> Chat upstream --------------------------------------------------------


CODEX_TOOLS: Any = [
    {"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {}}},
    {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "agents",
        "tools": [{"type": "function", "name": "spawn", "parameters": WEATHER}],
    },
]


def test_responses_request_is_translated_to_chat(wired: Wired, sdk: SdkClients) -> None:
    secret, _ = issue_key(wired.gateway, "Nova")
    sdk.openai(wired.gateway.base_url, secret).responses.create(
        model="nova-5.6-sol",
        instructions="Be brief.",
        input=[
            {"role": "developer", "content": "Use metric units."},
            {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
            {
                "type": "function_call",
                "call_id": "call_7",
                "name": "exec_command",
                "arguments": '{"cmd":"ls"}',
            },
            {"type": "function_call_output", "call_id": "call_7", "output": "a.txt"},
        ],
        tools=CODEX_TOOLS,
        max_output_tokens=300,
        store=False,
        reasoning={"summary": "auto"},
    )
    assert wired.fake.requests[-1].json() == {
        "model": "qwen3-235b",
        "messages": [
            {"role": "system", "content": "Be brief.\n\nUse metric units."},
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_7",
                        "type": "function",
                        "function": {"name": "exec_command", "arguments": '{"cmd":"ls"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_7", "content": "a.txt"},
        ],
        "max_completion_tokens": 300,
        "tools": [
            {
                "type": "function",
                "function": {"name": "exec_command", "parameters": {"type": "object", "properties": {}}},
            },
            {"type": "function", "function": {"name": "multi_agent_v1__spawn", "parameters": WEATHER}},
        ],
    }


def test_responses_client_streams_a_namespaced_chat_tool_call(wired: Wired, sdk: SdkClients) -> None:
    secret, key_id = issue_key(wired.gateway, "Nova")
    wired.script.reset(
        Reply.tool_call("multi_agent_v1__spawn", {"city": "Paris"}, input_tokens=30, output_tokens=9)
    )
    client = sdk.openai(wired.gateway.base_url, secret)
    with client.responses.stream(model="nova-5.6-sol", input="spawn", tools=CODEX_TOOLS) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert orjson.loads(args) == {"city": "Paris"}
    call = final.output[0].model_dump()
    assert call["type"] == "function_call" and call["id"].startswith("fc_")
    assert (call["name"], call["namespace"], call["call_id"]) == (
        "spawn",
        "multi_agent_v1",
        "call_01FakeToolCall0001",
    )
    assert final.status == "completed" and final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens, final.usage.total_tokens) == (30, 9, 39)
    record = usage_records(wired.gateway, key_id)[0]
    assert (record.input_tokens, record.output_tokens) == (30, 9)
    # Whole, the same mapping.
    wired.script.reset(Reply.tool_call("multi_agent_v1__spawn", {"city": "Paris"}))
    whole = client.responses.create(model="nova-5.6-sol", input="spawn", tools=CODEX_TOOLS)
    item = whole.output[0].model_dump()
    assert (item["name"], item["namespace"]) == ("spawn", "multi_agent_v1") and whole.id.startswith("resp_")


def test_responses_round_trip_over_a_chat_upstream(wired: Wired, sdk: SdkClients) -> None:
    secret, _ = issue_key(wired.gateway, "Nova")
    wired.script.reset(TOOL_REPLY, Reply(text="Sunny in Paris."))
    client = sdk.openai(wired.gateway.base_url, secret)
    tools: Any = [{"type": "function", "name": "get_weather", "parameters": WEATHER}]
    first = client.responses.create(model="nova-5.6-sol", input="Weather in Paris?", tools=tools)
    assert [item.type for item in first.output] == ["message", "function_call"]
    call = first.output[1]
    assert call.type == "function_call"
    assert first.output_text == "Let me check." and call.call_id == "call_01FakeToolCall0001"
    second = client.responses.create(
        model="nova-5.6-sol",
        tools=tools,
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": "get_weather",
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny"},
        ],
    )
    assert second.status == "completed" and second.output_text == "Sunny in Paris."


# --- Error mid-stream, every endpoint, passthrough and translated ------------------------------


def _messages_stream(base_url: str, secret: str, model: str) -> None:
    with (
        anthropic_client(base_url, secret) as client,
        client.messages.stream(
            model=model, max_tokens=100, messages=[{"role": "user", "content": "hi"}]
        ) as stream,
    ):
        for _ in stream:
            pass


def _chat_stream(base_url: str, secret: str, model: str) -> None:
    with openai_client(base_url, secret) as client:
        for _ in client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}], stream=True
        ):
            pass


def _responses_stream(base_url: str, secret: str, model: str) -> None:
    with (
        openai_client(base_url, secret) as client,
        client.responses.stream(model=model, input="hi") as stream,
    ):
        for _ in stream:
            pass


@pytest.mark.parametrize(
    ("group", "model", "drive", "error"),
    [
        ("Pro", "aria-haiku-4.5", _messages_stream, anthropic.APIStatusError),  # passthrough
        ("Pro", "aria-sonnet-4.6", _messages_stream, anthropic.APIStatusError),  # Chat upstream
        ("Nova", "nova-5.5", _chat_stream, openai.APIError),  # passthrough
        ("Pro", "aria-haiku-4.5", _chat_stream, openai.APIError),  # Messages upstream
        ("Nova", "nova-5.5", _responses_stream, openai.APIError),  # passthrough
        ("Nova", "nova-5.6-sol", _responses_stream, openai.APIError),  # Chat upstream
    ],
)
def test_upstream_failure_mid_stream_ends_with_an_in_band_error(
    wired: Wired, group: str, model: str, drive: Any, error: type[Exception]
) -> None:
    secret, key_id = issue_key(wired.gateway, group)
    wired.script.reset(Fault.reset_after(4, then=CUT_REPLY))
    with pytest.raises(error, match="connection broke mid-response"):
        drive(wired.gateway.base_url, secret, model)
    record = usage_records(wired.gateway, key_id)[0]
    assert record.status == "upstream_failed_mid_stream"


def test_in_band_failure_frames_continue_the_stream(wired: Wired) -> None:
    """Raw bytes: the Responses failure continues the upstream's sequence numbers and response id;
    the Messages one is a proper ``event: error`` frame after the started stream."""
    secret, _ = issue_key(wired.gateway, "Nova")
    wired.script.reset(Fault.reset_after(4, then=CUT_REPLY))
    body = {"model": "nova-5.5", "input": "hi", "stream": True}
    raw = httpx.post(
        f"{wired.gateway.base_url}/v1/responses", json=body, headers={"authorization": f"Bearer {secret}"}
    )
    events = [orjson.loads(line[6:]) for line in raw.text.splitlines() if line.startswith("data: ")]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events][-2:] == ["error", "response.failed"]
    assert (
        events[-1]["response"]["id"]
        == events[0]["response"]["id"]
        == "resp_" + events[0]["response"]["id"][5:]
    )
    assert events[-1]["response"]["model"] == "nova-5.5"

    pro, _ = issue_key(wired.gateway, "Pro")
    wired.script.reset(Fault.reset_after(4, then=CUT_REPLY))
    raw = httpx.post(
        f"{wired.gateway.base_url}/v1/messages",
        json={
            "model": "aria-haiku-4.5",
            "max_tokens": 50,
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
        },
        headers={"x-api-key": pro, "anthropic-version": "2023-06-01"},
    )
    frames = raw.text.strip().split("\n\n")
    assert frames[0].startswith("event: message_start") and frames[-1].startswith("event: error\n")
    assert orjson.loads(frames[-1].split("data: ", 1)[1])["error"]["type"] == "api_error"
