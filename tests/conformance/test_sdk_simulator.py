"""Endpoint × stream × (text, tool call) conformance, judged by the official SDKs.

Every model is served by the built-in simulator, so every path here is a same-dialect passthrough
of the simulator's own wire output. The simulator is deterministic: a streamed answer must
accumulate to exactly the non-streamed one, and it calls a tool when the request offers tools and
``tool_choice`` demands one, filling required properties with placeholders (``"simulated"``).
Usage reported in every stream must equal the gateway's usage record of that request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.conformance.conftest import issue_key, usage_records
from tests.gateway.clients import SdkClients
from tests.gateway_server import GatewayServer, running_gateway

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
}
ANTHROPIC_TOOL: Any = {
    "name": "get_weather",
    "description": "Weather by city",
    "input_schema": WEATHER_SCHEMA,
}
CHAT_TOOL: Any = {
    "type": "function",
    "function": {"name": "get_weather", "description": "Weather by city", "parameters": WEATHER_SCHEMA},
}
RESPONSES_TOOL: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather by city",
    "parameters": WEATHER_SCHEMA,
}
PLACEHOLDER_ARGS = {"city": "simulated"}
ASK: Any = [{"role": "user", "content": "What is the weather in Paris today?"}]


# --- Messages ---------------------------------------------------------------------------------


def test_messages_text_whole_and_streamed_agree(sim: GatewayServer, sdk: SdkClients) -> None:
    secret, key_id = issue_key(sim, "Pro")
    client = sdk.anthropic(sim.base_url, secret)
    whole = client.messages.create(model="aria-haiku-4.5", max_tokens=300, messages=ASK)
    assert whole.stop_reason == "end_turn" and whole.id.startswith("msg_")
    with client.messages.stream(model="aria-haiku-4.5", max_tokens=300, messages=ASK) as stream:
        accumulated = "".join(stream.text_stream)
        final = stream.get_final_message()
    final_text, whole_text = final.content[0], whole.content[0]
    assert final_text.type == whole_text.type == "text"
    assert accumulated == final_text.text == whole_text.text
    assert final.id.startswith("msg_") and final.id != whole.id and final.model == "aria-haiku-4.5"
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == whole.usage.output_tokens > 0
    assert final.usage.input_tokens == whole.usage.input_tokens > 0
    streamed_record = usage_records(sim, key_id, 2)[1]
    assert (streamed_record.input_tokens, streamed_record.output_tokens) == (
        final.usage.input_tokens,
        final.usage.output_tokens,
    )
    assert streamed_record.status == "ok" and streamed_record.charged_uc > 0


def test_messages_raw_stream_has_the_full_event_grammar(sim: GatewayServer, sdk: SdkClients) -> None:
    secret, _ = issue_key(sim, "Pro")
    client = sdk.anthropic(sim.base_url, secret)
    events = list(
        client.messages.create(
            model="aria-haiku-4.5",
            max_tokens=300,
            messages=ASK,
            tools=[ANTHROPIC_TOOL],
            tool_choice={"type": "any"},
            stream=True,
        )
    )
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    start = events[0]
    assert start.type == "message_start" and start.message.usage.input_tokens > 0
    assert start.message.content == [] and start.message.stop_reason is None
    # Blocks open, take deltas and close in index order; one block open at a time.
    blocks = [
        e for e in events if e.type in ("content_block_start", "content_block_delta", "content_block_stop")
    ]
    opened = [e.index for e in blocks if e.type == "content_block_start"]
    assert opened == list(range(len(opened))) == [0, 1]
    tool_block = next(e for e in blocks if e.type == "content_block_start" and e.index == 1)
    assert tool_block.content_block.type == "tool_use" and tool_block.content_block.name == "get_weather"
    assert tool_block.content_block.id.startswith("toolu_")
    json_deltas = [
        e.delta for e in blocks if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert len(json_deltas) >= 2
    assert "".join(d.partial_json for d in json_deltas) == '{"city":"simulated"}'
    delta = events[-2]
    assert delta.type == "message_delta" and delta.delta.stop_reason == "tool_use"
    assert delta.usage.output_tokens > 0


def test_messages_tool_round_trip(sim: GatewayServer, sdk: SdkClients) -> None:
    secret, _ = issue_key(sim, "Pro")
    client = sdk.anthropic(sim.base_url, secret)
    with client.messages.stream(
        model="aria-sonnet-4.6",
        max_tokens=300,
        messages=ASK,
        tools=[ANTHROPIC_TOOL],
        tool_choice={"type": "tool", "name": "get_weather"},
    ) as stream:
        first = stream.get_final_message()
    assert first.stop_reason == "tool_use"
    call = next(b for b in first.content if b.type == "tool_use")
    assert call.name == "get_weather" and call.input == PLACEHOLDER_ARGS
    history: Any = [
        *ASK,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "Sunny, 24 C"}],
        },
    ]
    second = client.messages.create(
        model="aria-sonnet-4.6", max_tokens=300, messages=history, tools=[ANTHROPIC_TOOL]
    )
    assert second.stop_reason == "end_turn"
    answer = second.content[0]
    assert answer.type == "text"
    assert answer.text.startswith("[simulator] Tool result received: Sunny, 24 C")


# --- Chat Completions -------------------------------------------------------------------------


@pytest.mark.parametrize(("group", "model"), [("Nova", "nova-5.5"), ("Basic", "aria-haiku-4.5")])
def test_chat_text_stream_with_usage(sim: GatewayServer, group: str, model: str, sdk: SdkClients) -> None:
    secret, key_id = issue_key(sim, group)
    client = sdk.openai(sim.base_url, secret)
    whole = client.chat.completions.create(model=model, messages=ASK)
    chunks = list(
        client.chat.completions.create(
            model=model, messages=ASK, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].choices[0].finish_reason is None
    assert all(c.id == chunks[0].id and c.id.startswith("chatcmpl-") and c.model == model for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finish) == 1 and finish[0].choices[0].finish_reason == "stop" and finish[0] is chunks[-2]
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == [] and usage_chunk.usage is not None
    assert usage_chunk.usage == whole.usage
    record = usage_records(sim, key_id, 2)[1]
    assert (record.input_tokens, record.output_tokens) == (
        usage_chunk.usage.prompt_tokens,
        usage_chunk.usage.completion_tokens,
    )


def test_chat_stream_without_include_usage_gets_no_usage_chunk_but_is_billed(
    sim: GatewayServer, sdk: SdkClients
) -> None:
    secret, key_id = issue_key(sim, "Nova")
    client = sdk.openai(sim.base_url, secret)
    whole = client.chat.completions.create(model="nova-5.5", messages=ASK)
    chunks = list(client.chat.completions.create(model="nova-5.5", messages=ASK, stream=True))
    assert all(c.usage is None and c.choices for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"
    record = usage_records(sim, key_id, 2)[1]
    assert whole.usage is not None
    assert (record.input_tokens, record.output_tokens) == (
        whole.usage.prompt_tokens,
        whole.usage.completion_tokens,
    )
    assert record.output_tokens > 0 and record.charged_uc > 0


def test_chat_streamed_tool_call_and_round_trip(sim: GatewayServer, sdk: SdkClients) -> None:
    secret, _ = issue_key(sim, "Nova")
    client = sdk.openai(sim.base_url, secret)
    chunks = list(
        client.chat.completions.create(
            model="nova-5.6-sol",
            messages=ASK,
            tools=[CHAT_TOOL],
            tool_choice="required",
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    deltas = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
    assert deltas[0].id and deltas[0].id.startswith("call_") and deltas[0].function is not None
    assert deltas[0].function.name == "get_weather" and deltas[0].type == "function"
    assert all(d.index == 0 and d.id is None for d in deltas[1:])
    arguments = "".join(d.function.arguments or "" for d in deltas if d.function)
    assert len(deltas) >= 3 and arguments == '{"city":"simulated"}'
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0

    history: Any = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": deltas[0].id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": deltas[0].id, "content": "Sunny, 24 C"},
    ]
    second = client.chat.completions.create(model="nova-5.6-sol", messages=history, tools=[CHAT_TOOL])
    assert second.choices[0].finish_reason == "stop"
    assert (second.choices[0].message.content or "").startswith("[simulator] Tool result received: Sunny")


def test_chat_whole_tool_call(sim: GatewayServer, sdk: SdkClients) -> None:
    secret, _ = issue_key(sim, "Pro")
    completion = sdk.openai(sim.base_url, secret).chat.completions.create(
        model="aria-haiku-4.5",
        messages=[{"role": "user", "content": "please call get_weather for Oslo"}],
        tools=[CHAT_TOOL],
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    call = choice.message.tool_calls[0]
    assert call.type == "function"
    assert call.function.name == "get_weather" and call.function.arguments == '{"city":"simulated"}'


# --- Responses --------------------------------------------------------------------------------


def test_responses_text_whole_and_streamed_agree(sim: GatewayServer, sdk: SdkClients) -> None:
    secret, key_id = issue_key(sim, "Nova")
    client = sdk.openai(sim.base_url, secret)
    whole = client.responses.create(model="nova-5.5", input="What is the weather in Paris today?")
    assert whole.status == "completed" and whole.id.startswith("resp_") and whole.output_text
    with client.responses.stream(model="nova-5.5", input="What is the weather in Paris today?") as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.output_text == whole.output_text
    message = final.output[0]
    assert message.type == "message" and message.id.startswith("msg_") and final.model == "nova-5.5"
    assert final.usage is not None and final.usage == whole.usage
    record = usage_records(sim, key_id, 2)[1]
    assert (record.input_tokens, record.output_tokens) == (
        final.usage.input_tokens,
        final.usage.output_tokens,
    )


def test_responses_tool_call_stream_and_round_trip(sim: GatewayServer, sdk: SdkClients) -> None:
    secret, _ = issue_key(sim, "Nova")
    client = sdk.openai(sim.base_url, secret)
    request: Any = {
        "model": "nova-6-sol",
        "instructions": "You are terse.",
        "input": [
            {"role": "developer", "content": "Use tools when asked."},
            {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
        ],
        "tools": [RESPONSES_TOOL],
        "tool_choice": "required",
    }
    with client.responses.stream(**request) as stream:
        events = list(stream)
        first = stream.get_final_response()
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds and kinds[-1] == "response.completed"
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert done.arguments == '{"city":"simulated"}'
    call = next(item for item in first.output if item.type == "function_call")
    assert call.type == "function_call"  # narrows the union for the type checker
    assert call.name == "get_weather" and call.call_id.startswith("call_")
    assert call.id is not None and call.id.startswith("fc_")
    second = client.responses.create(
        model="nova-6-sol",
        input=[
            *request["input"],
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": "get_weather",
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 24 C"},
        ],
        tools=[RESPONSES_TOOL],
    )
    assert second.status == "completed"
    assert second.output_text.startswith("[simulator] Tool result received: Sunny")


def test_codex_style_request_is_answered_with_namespaced_calls(sim: GatewayServer, sdk: SdkClients) -> None:
    """What Codex 0.169 sends (reference §3): store:false, a developer item, include, a hosted
    web_search tool and a namespace tool. The call comes back under its own name and namespace."""
    secret, _ = issue_key(sim, "Nova")
    body: Any = {
        "model": "nova-5.5",
        "instructions": None,
        "input": [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "You are Codex."}],
            },
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "spawn an agent"}],
            },
        ],
        "tools": [
            {"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {}}},
            {"type": "web_search", "external_web_access": False},
            {
                "type": "namespace",
                "name": "multi_agent_v1",
                "description": "agents",
                "tools": [
                    {
                        "type": "function",
                        "name": "spawn",
                        "parameters": {
                            "type": "object",
                            "properties": {"task": {"type": "string"}},
                            "required": ["task"],
                        },
                    }
                ],
            },
        ],
        "tool_choice": {"type": "function", "name": "multi_agent_v1__spawn"},
        "parallel_tool_calls": False,
        "reasoning": {"summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0199-session",
        "client_metadata": {"x": "y"},
    }
    headers = {"authorization": f"Bearer {secret}", "originator": "codex_exec", "accept": "text/event-stream"}
    with httpx.stream("POST", f"{sim.base_url}/v1/responses", json=body, headers=headers) as response:
        assert response.status_code == 200
        text = response.read().decode()
    assert "event: response.completed" in text
    client = sdk.openai(sim.base_url, secret)
    # The SDK's typed signature lacks Codex's private fields; send them as extra body.
    typed = {k: v for k, v in body.items() if k not in ("client_metadata", "stream")}
    whole = client.responses.create(**typed, extra_body={"client_metadata": body["client_metadata"]})
    call = next(item for item in whole.output if item.type == "function_call")
    wire = call.model_dump()
    assert (wire["name"], wire.get("namespace")) == ("spawn", "multi_agent_v1")
    assert call.arguments == '{"task":"simulated"}'


def test_responses_unknown_previous_response_id_is_a_404_naming_it(
    sim: GatewayServer, sdk: SdkClients
) -> None:
    secret, _ = issue_key(sim, "Nova")
    with pytest.raises(openai.NotFoundError, match="resp_123") as caught:
        sdk.openai(sim.base_url, secret).responses.create(
            model="nova-5.5", input="continue", previous_response_id="resp_123"
        )
    assert caught.value.param == "previous_response_id"


# --- count_tokens and real-client request shapes -----------------------------------------------


def test_count_tokens_matches_billing_and_spends_nothing(sim: GatewayServer, sdk: SdkClients) -> None:
    secret, key_id = issue_key(sim, "Basic")
    client = sdk.anthropic(sim.base_url, secret)
    system = "You are a careful assistant."
    counted = client.messages.count_tokens(model="haiku", system=system, messages=ASK, tools=[ANTHROPIC_TOOL])
    message = client.messages.create(
        model="haiku", max_tokens=50, system=system, messages=ASK, tools=[ANTHROPIC_TOOL]
    )
    assert counted.input_tokens == message.usage.input_tokens > 0
    records = usage_records(sim, key_id, 1)
    assert [r.endpoint for r in records] == ["messages"]  # the count made no record
    # Same auth and version rules as /v1/messages; the query string is ignored.
    url = f"{sim.base_url}/v1/messages/count_tokens?beta=true"
    body = {"model": "haiku", "messages": ASK}
    ok = httpx.post(url, json=body, headers={"x-api-key": secret, "anthropic-version": "2023-06-01"})
    alone = client.messages.count_tokens(model="haiku", messages=ASK).input_tokens
    assert ok.status_code == 200 and ok.json() == {"input_tokens": alone} and 0 < alone < counted.input_tokens
    assert httpx.post(url, json=body, headers={"x-api-key": secret}).status_code == 400
    assert httpx.post(url, json=body, headers={"anthropic-version": "2023-06-01"}).status_code == 401
    nova, _ = issue_key(sim, "Nova")
    with pytest.raises(anthropic.PermissionDeniedError):
        sdk.anthropic(sim.base_url, nova).messages.count_tokens(model="nova-5.5", messages=ASK)


CLAUDE_CODE_BETAS = (
    "claude-code-20250219,context-1m-2025-08-07,interleaved-thinking-2025-05-14,"
    "context-management-2025-06-27,prompt-caching-scope-2026-01-05,mid-conversation-system-2026-04-07,"
    "effort-2025-11-24"
)


@pytest.mark.parametrize(
    "thinking",
    [
        {"type": "adaptive"},
        {"type": "enabled", "budget_tokens": 1024},
        {"type": "disabled"},
        {"type": "future-kind"},
    ],
)
def test_claude_code_shaped_requests_are_accepted(sim: GatewayServer, thinking: dict[str, Any]) -> None:
    secret, _ = issue_key(sim, "Pro")
    body = {
        "model": "aria-sonnet-4.6",
        "max_tokens": 32000,
        "stream": True,
        "system": [
            {"type": "text", "text": "You are Claude Code."},
            {"type": "text", "text": "Project context.", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
        ],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
            },
            {"role": "system", "content": "The user switched to plan mode."},
            {"role": "user", "content": "list files"},
        ],
        "tools": [
            {
                **ANTHROPIC_TOOL,
                "input_schema": {**WEATHER_SCHEMA, "$schema": "https://json-schema.org/draft/2020-12/schema"},
            }
        ],
        "metadata": {"user_id": '{"device_id":"d","account_uuid":"a","session_id":"s"}'},
        "thinking": thinking,
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
        "some_future_field": {"x": 1},
    }
    headers = {
        "x-api-key": secret,
        "anthropic-version": "2023-06-01",
        "anthropic-beta": CLAUDE_CODE_BETAS,
        "anthropic-dangerous-direct-browser-access": "true",
        "x-app": "cli",
    }
    with httpx.stream(
        "POST", f"{sim.base_url}/v1/messages?beta=true", json=body, headers=headers
    ) as response:
        assert response.status_code == 200, response.read()
        text = response.read().decode()
    assert text.startswith("event: message_start\n") and text.rstrip().endswith(
        'data: {"type":"message_stop"}'
    )
    assert response.headers["x-modelgate-max-tokens-clamped"] == "32000->16384; reason=model_limit"


def test_documented_claude_code_aliases_serve_its_default_model_ids(tmp_path: Path, sdk: SdkClients) -> None:
    aliases = {
        "claude-opus-4-8": "aria-opus-4.8",
        "claude-sonnet-5": "aria-sonnet-5",
        "claude-haiku-4-5-20251001": "aria-haiku-4.5",
    }
    with running_gateway(tmp_path / "data", catalogue={"aliases": aliases}) as gateway:
        secret, _ = issue_key(gateway, "Pro")
        client = sdk.anthropic(gateway.base_url, secret, header="x-api-key", version="2023-06-01")
        for alias, canonical in aliases.items():
            reply = client.messages.create(model=alias, max_tokens=200, messages=ASK)
            assert reply.model == canonical
        listed = {m.id for m in client.models.list()}
        assert not listed & set(aliases)
