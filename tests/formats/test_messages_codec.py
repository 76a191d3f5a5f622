"""Messages codec: request mapping both ways, whole responses, errors, streams and the tap.

The ``anthropic`` SDK's own types judge every response body and stream event we produce.
"""

from __future__ import annotations

from typing import Any

import anthropic
import orjson
import pydantic
import pytest

from modelgate import errors, ir
from modelgate.billing.estimate import DELTA_ESTIMATOR, text_tokens
from modelgate.formats import CODECS
from modelgate.formats.messages import request as messages_request
from modelgate.formats.messages import response as messages_response
from modelgate.formats.messages import stream as messages_stream
from modelgate.formats.messages import tap as messages_tap
from modelgate.formats.sse import SSEParser

STREAM_EVENT = pydantic.TypeAdapter(anthropic.types.RawMessageStreamEvent)


def body(**extra: Any) -> dict[str, Any]:
    return {
        "model": "aria-opus-4.8",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "Hi"}],
        **extra,
    }


# ---------------------------------------------------------------------------------------------
# decode_request
# ---------------------------------------------------------------------------------------------


def test_decode_minimal() -> None:
    req = messages_request.decode_request(body())
    assert req.model == "aria-opus-4.8" and req.max_tokens == 1024 and not req.stream
    assert req.messages == [ir.Message("user", [ir.TextPart("Hi")])]


@pytest.mark.parametrize(
    ("patch", "param"),
    [
        ({"model": None}, "model"),
        ({"messages": "hi"}, "messages"),
        ({"max_tokens": None}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"max_tokens": -1}, "max_tokens"),
        (
            {"messages": [{"role": "user", "content": "a"}] * 3 + [{"role": "user", "content": 5}]},
            "messages.3.content",
        ),
        ({"messages": [{"role": "tool", "content": "a"}]}, "messages.0.role"),
        ({"system": 5}, "system"),
        ({"tool_choice": {"type": "tool"}}, "tool_choice.name"),
        ({"stop_sequences": "x"}, "stop_sequences"),
        ({"temperature": "hot"}, "temperature"),
    ],
)
def test_decode_rejects_bad_fields_naming_them(patch: dict[str, Any], param: str) -> None:
    data = body()
    for key, value in patch.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    with pytest.raises(errors.InvalidRequest) as info:
        messages_request.decode_request(data)
    assert info.value.param == param
    assert info.value.http_status() == 400


def test_count_tokens_bodies_need_no_max_tokens() -> None:
    data = body()
    del data["max_tokens"]
    assert messages_request.decode_request(data, require_max_tokens=False).max_tokens is None


def test_decode_is_lenient_with_claude_code_fields() -> None:
    data = body(
        system=[
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Be brief."},
        ],
        messages=[
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
            },
            {"role": "system", "content": "Mid-conversation reminder."},
            {
                "role": "user",
                "content": [{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search"}],
            },
        ],
        thinking={"type": "adaptive", "display": "summarized"},
        output_config={"effort": "high"},
        context_management={"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        cache_control={"type": "ephemeral"},
        metadata={"user_id": '{"device_id":"d"}'},
        service_tier="auto",
        speed="fast",
        mcp_servers=[],
    )
    req = messages_request.decode_request(data)
    assert req.system == ["You are Claude Code.", "Be brief."]
    assert req.messages[1] == ir.Message("system", [ir.TextPart("Mid-conversation reminder.")])
    assert req.messages[2].content == []  # server-tool blocks are not translatable
    assert req.reasoning_effort == "high"
    assert req.user == '{"device_id":"d"}'


def test_decode_thinking_budget_becomes_effort_and_format_becomes_response_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    req = messages_request.decode_request(
        body(
            thinking={"type": "enabled", "budget_tokens": 31999},
            output_config={"format": {"type": "json_schema", "schema": schema}},
        )
    )
    assert req.reasoning_effort == "high"
    assert req.response_format == {"type": "json_schema", "name": "response", "schema": schema}
    low = messages_request.decode_request(body(thinking={"type": "enabled", "budget_tokens": 1024}))
    assert low.reasoning_effort == "low"


def test_the_older_output_format_field_becomes_response_format_too() -> None:
    schema = {"type": "object", "properties": {"b": {"type": "integer"}}}
    older = messages_request.decode_request(
        body(output_format={"type": "json_schema", "name": "shape", "schema": schema})
    )
    assert older.response_format == {"type": "json_schema", "name": "shape", "schema": schema}
    # Chat upstreams get it as response_format (the bug: it used to vanish on translation).
    chat = CODECS["chat"].encode_request(older, "gpt")
    assert chat["response_format"]["json_schema"]["schema"] == schema
    newer = {"type": "json_schema", "schema": {"type": "object"}}
    both = messages_request.decode_request(
        body(output_format={"type": "json_schema", "schema": schema}, output_config={"format": newer})
    )
    assert both.response_format == {"type": "json_schema", "name": "response", "schema": {"type": "object"}}


def test_decode_content_blocks() -> None:
    data = body(
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"},
                    },
                    {"type": "image", "source": {"type": "url", "url": "https://x/cat.jpg"}},
                    {
                        "type": "document",
                        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"},
                        "title": "a.pdf",
                    },
                    {
                        "type": "document",
                        "source": {"type": "text", "media_type": "text/plain", "data": "plain"},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "ok",
                        "is_error": False,
                        "cache_control": {"type": "ephemeral"},
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "is_error": True,
                        "content": [
                            {"type": "text", "text": "boom"},
                            {"type": "image", "source": {"type": "url", "url": "https://x/s.png"}},
                        ],
                    },
                ],
            },
        ]
    )
    user, assistant, results = messages_request.decode_request(data).messages
    assert user.content == [
        ir.ImagePart(media_type="image/png", data="iVBO"),
        ir.ImagePart(url="https://x/cat.jpg"),
        ir.DocumentPart(media_type="application/pdf", data="JVBE", filename="a.pdf"),
        ir.DocumentPart(media_type="text/plain", text="plain"),
    ]
    assert assistant.content == [
        ir.ThinkingPart("hmm", "sig"),
        ir.RedactedThinkingPart("opaque"),
        ir.ToolUsePart("toolu_1", "f", {"a": 1}),
    ]
    assert results.content == [
        ir.ToolResultPart("toolu_1", [ir.TextPart("ok")]),
        ir.ToolResultPart(
            "toolu_2", [ir.TextPart("boom"), ir.ImagePart(url="https://x/s.png")], is_error=True
        ),
    ]


def test_decode_tools_and_choice() -> None:
    data = body(
        tools=[
            {
                "name": "get_weather",
                "description": "d",
                "input_schema": {"type": "object", "properties": {}},
                "cache_control": {"type": "ephemeral"},
            },
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
        ],
        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        stop_sequences=["END"],
        temperature=0.5,
        top_p=0.9,
        top_k=40,
        stream=True,
    )
    req = messages_request.decode_request(data)
    assert req.tools == [ir.Tool("get_weather", "d", {"type": "object", "properties": {}})]
    assert req.tool_choice == ir.ToolChoice("tool", "get_weather", disable_parallel=True)
    assert (req.stop_sequences, req.temperature, req.top_p, req.top_k, req.stream) == (
        ["END"],
        0.5,
        0.9,
        40,
        True,
    )


# ---------------------------------------------------------------------------------------------
# encode_request
# ---------------------------------------------------------------------------------------------


def test_encode_request_shapes_a_valid_conversation() -> None:
    req = ir.Request(
        model="nova-6-sol",
        system=["Be brief.", "Use tools."],
        messages=[
            ir.Message("assistant", [ir.TextPart("Earlier answer")]),
            ir.Message("system", [ir.TextPart("Reminder.")]),
            ir.Message("assistant", [ir.TextPart(""), ir.ToolUsePart("call_1", "f", {"x": 1})]),
            ir.Message("user", [ir.TextPart("and also")]),
            ir.Message("user", [ir.ToolResultPart("call_1", [ir.TextPart("42")], is_error=True)]),
            ir.Message("assistant", [ir.ThinkingPart("no signature"), ir.TextPart("done")]),
        ],
        max_tokens=None,
        temperature=1.7,
        stream=True,
        stop_sequences=["x"],
        user="u1",
        reasoning_effort="medium",
        tools=[ir.Tool("f", None, {"type": "object", "properties": {"x": {"type": "integer"}}})],
        tool_choice=ir.ToolChoice("any", disable_parallel=True),
    )
    out = messages_request.encode_request(req, "claude-sonnet-4-6")
    assert out["model"] == "claude-sonnet-4-6"
    assert out["max_tokens"] == 4096 and out["temperature"] == 1.0 and out["stream"] is True
    assert out["system"] == [{"type": "text", "text": t} for t in ("Be brief.", "Use tools.", "Reminder.")]
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "user", "assistant"]
    assert out["messages"][0]["content"] == [{"type": "text", "text": messages_request.CONTINUE_PLACEHOLDER}]
    # Two adjacent assistant turns merged (the system turn between them went to the top level).
    assert out["messages"][1]["content"] == [
        {"type": "text", "text": "Earlier answer"},
        {"type": "tool_use", "id": "call_1", "name": "f", "input": {"x": 1}},
    ]
    # Merged user turn with the tool result first, as the API requires.
    assert out["messages"][2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "call_1",
            "content": [{"type": "text", "text": "42"}],
            "is_error": True,
        },
        {"type": "text", "text": "and also"},
    ]
    assert out["messages"][3]["content"] == [{"type": "text", "text": "done"}]  # unsigned thinking dropped
    assert out["tools"] == [{"name": "f", "input_schema": req.tools[0].input_schema}]
    assert out["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert out["metadata"] == {"user_id": "u1"}
    assert out["output_config"] == {"effort": "medium"}
    assert out["stop_sequences"] == ["x"]
    assert "top_k" not in out and "thinking" not in out


def test_encode_request_parts_and_formats() -> None:
    req = ir.Request(
        model="m",
        max_tokens=10,
        messages=[
            ir.Message(
                "user",
                [
                    ir.ImagePart(media_type="image/jpeg", data="AAA"),
                    ir.ImagePart(url="https://x/y.png"),
                    ir.DocumentPart(media_type="application/pdf", data="JVBE", filename="r.pdf"),
                    ir.DocumentPart(text="notes"),
                ],
            ),
            ir.Message("assistant", [ir.ThinkingPart("t", "sig"), ir.RedactedThinkingPart("r")]),
        ],
        response_format={"type": "json_object"},
    )
    out = messages_request.encode_request(req, "m")
    assert out["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "AAA"}},
        {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"},
            "title": "r.pdf",
        },
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "notes"}},
    ]
    assert out["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "t", "signature": "sig"},
        {"type": "redacted_thinking", "data": "r"},
    ]
    assert out["system"] == [{"type": "text", "text": messages_request.JSON_OBJECT_INSTRUCTION}]
    schema_req = ir.Request(
        model="m",
        messages=[],
        response_format={"type": "json_schema", "name": "n", "schema": {"type": "object"}},
    )
    assert messages_request.encode_request(schema_req, "m")["output_config"] == {
        "format": {"type": "json_schema", "schema": {"type": "object"}}
    }


def test_request_round_trip() -> None:
    original = body(
        system=[{"type": "text", "text": "S"}],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "q"}]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": [1, 2]}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "r"}],
                    }
                ],
            },
        ],
        tools=[{"name": "f", "description": "F", "input_schema": {"type": "object", "properties": {}}}],
        tool_choice={"type": "auto"},
        stop_sequences=["s"],
        top_k=5,
        metadata={"user_id": "u"},
    )
    encoded = messages_request.encode_request(messages_request.decode_request(original), "aria-opus-4.8")
    assert encoded == {**original, "system": [{"type": "text", "text": "S"}]}
    assert messages_request.decode_request(encoded) == messages_request.decode_request(original)


# ---------------------------------------------------------------------------------------------
# Whole responses
# ---------------------------------------------------------------------------------------------


def response(stop: ir.StopReason = ir.StopReason.TOOL_USE) -> ir.Response:
    return ir.Response(
        id="msg_01abc",
        model="aria-opus-4.8",
        content=[
            ir.ThinkingPart("think", "sig"),
            ir.TextPart("Hi"),
            ir.ToolUsePart("toolu_1", "get_weather", {"city": "Paris"}),
        ],
        stop_reason=stop,
        usage=ir.Usage(12, 20, cache_creation_input_tokens=3, cache_read_input_tokens=4),
    )


def test_encode_response_is_a_valid_message_with_every_key() -> None:
    out = messages_response.encode_response(response())
    parsed = anthropic.types.Message.model_validate(out)
    assert parsed.stop_reason == "tool_use" and parsed.usage.cache_read_input_tokens == 4
    assert set(out) == {"id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage"}
    assert out["stop_sequence"] is None
    assert out["usage"]["cache_creation"] == {"ephemeral_5m_input_tokens": 3, "ephemeral_1h_input_tokens": 0}
    assert out["content"][2] == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "get_weather",
        "input": {"city": "Paris"},
    }


@pytest.mark.parametrize("stop", list(ir.StopReason))
def test_every_stop_reason_is_valid_and_round_trips(stop: ir.StopReason) -> None:
    out = messages_response.encode_response(response(stop))
    assert anthropic.types.Message.model_validate(out).stop_reason == stop.value
    assert messages_response.decode_response(out).stop_reason is stop


def test_decode_response() -> None:
    resp = response()
    resp.stop_sequence = None
    assert messages_response.decode_response(messages_response.encode_response(resp)) == resp
    raw = messages_response.encode_response(response(ir.StopReason.STOP_SEQUENCE))
    raw["stop_sequence"] = "END"
    raw["content"] += [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}},
        {"type": "server_tool_use", "id": "srvtoolu_2", "name": "code_execution", "input": {}},
        {
            "type": "web_search_tool_result",
            "tool_use_id": "srvtoolu_1",
            "content": [
                {
                    "type": "web_search_result",
                    "url": "https://a.example",
                    "title": "A",
                    "encrypted_content": "e",
                }
            ],
        },
        {"type": "code_execution_tool_result", "tool_use_id": "srvtoolu_2", "content": {}},
    ]
    decoded = messages_response.decode_response(raw)
    # A web search (call and result) is one part; other server tools have no IR equivalent.
    assert decoded.stop_sequence == "END" and len(decoded.content) == 4
    source = ir.WebSearchSource("https://a.example", "A", "e")
    assert decoded.content[3] == ir.WebSearchCallPart("srvtoolu_1", "q", ir.WebSearchResult([source]))
    again = messages_response.decode_response(messages_response.encode_response(decoded))
    assert again.content == decoded.content
    with pytest.raises(errors.UpstreamFailed):
        messages_response.decode_response({"type": "message"})


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


def test_render_error() -> None:
    err = errors.BillingRefused("monthly cap reached", code="monthly_cap")
    assert orjson.loads(messages_response.render_error(err, "req_1")) == {
        "type": "error",
        "error": {
            "type": "billing_error",
            "message": "monthly cap reached",
            "details": {"error_code": "monthly_cap"},
        },
        "request_id": "req_1",
    }
    plain = orjson.loads(messages_response.render_error(errors.Overloaded("Overloaded"), "req_2"))
    assert plain["error"] == {"type": "overloaded_error", "message": "Overloaded"}


def test_stream_error_frame() -> None:
    raw = messages_response.stream_error_frame(errors.UpstreamTimeout("idle"))
    (event,) = SSEParser().feed(raw)
    assert event.event == "error"
    assert orjson.loads(event.data) == {
        "type": "error",
        "error": {"type": "timeout_error", "message": "idle"},
    }


# ---------------------------------------------------------------------------------------------
# StreamEncoder
# ---------------------------------------------------------------------------------------------


def test_stream_encoder_events_validate_and_close_open_blocks() -> None:
    enc = messages_stream.StreamEncoder()
    events: list[ir.Event] = [
        ir.Start("msg_1", "m", ir.Usage(10, 1, cache_read_input_tokens=5)),
        ir.BlockStart(0, "thinking"),
        ir.ThinkingDelta(0, "t"),
        ir.SignatureDelta(0, "sig"),
        ir.BlockStop(0),
        ir.BlockStart(1, "redacted_thinking", data="opaque"),
        ir.BlockStop(1),
        ir.BlockStart(2, "text"),
        ir.TextDelta(2, 'a "quoted"\nline'),
        ir.BlockStart(3, "tool_use", "toolu_1", "f"),  # the encoder closes block 2 itself
        ir.ToolArgsDelta(3, '{"a":1}'),
        ir.Finish(ir.StopReason.TOOL_USE, ir.Usage(10, 7, cache_read_input_tokens=5)),
        ir.TextDelta(3, "after the end"),
    ]
    raw = b"".join(enc.encode(e) for e in events) + enc.ping()
    parsed = SSEParser().feed(raw)
    names = [e.event for e in parsed]
    assert names == [
        "message_start",
        *["content_block_start", "content_block_delta", "content_block_delta", "content_block_stop"],
        *["content_block_start", "content_block_stop"],
        *["content_block_start", "content_block_delta", "content_block_stop"],
        *["content_block_start", "content_block_delta", "content_block_stop"],
        "message_delta",
        "message_stop",
        "ping",
    ]
    for event in parsed:
        data = orjson.loads(event.data)
        assert data["type"] == event.event
        if event.event != "ping":
            STREAM_EVENT.validate_python(data)
    delta = orjson.loads(parsed[-3].data)
    assert delta["usage"] == {
        "input_tokens": 10,
        "output_tokens": 7,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 5,
    }
    assert enc.encode(ir.TextDelta(0, "x")) == b""


def test_stream_encoder_error() -> None:
    enc = messages_stream.StreamEncoder()
    raw = enc.encode(ir.StreamError("overloaded", "Overloaded"))
    error = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    assert raw == b"event: error\ndata: " + error + b"\n\n"
    assert enc.encode(ir.Finish(ir.StopReason.END_TURN, ir.Usage())) == b""


# ---------------------------------------------------------------------------------------------
# StreamDecoder
# ---------------------------------------------------------------------------------------------


def sse(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps({"type": name, **data}) + b"\n\n"


START = sse(
    "message_start",
    {
        "message": {
            "id": "msg_u",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 3},
        }
    },
)


def test_decoder_merges_cumulative_usage_and_skips_server_blocks() -> None:
    raw = (
        START
        + sse(
            "content_block_start",
            {
                "index": 0,
                "content_block": {
                    "type": "server_tool_use",
                    "id": "s",
                    "name": "code_execution",
                    "input": {},
                },
            },
        )
        + sse(
            "content_block_delta", {"index": 0, "delta": {"type": "input_json_delta", "partial_json": "{}"}}
        )
        + sse("content_block_stop", {"index": 0})
        + sse(
            "content_block_start",
            {"index": 1, "content_block": {"type": "redacted_thinking", "data": "opaque"}},
        )
        + sse("content_block_stop", {"index": 1})
        + sse("content_block_start", {"index": 2, "content_block": {"type": "text", "text": ""}})
        + sse("content_block_delta", {"index": 2, "delta": {"type": "citations_delta", "citation": {}}})
        + sse("content_block_delta", {"index": 2, "delta": {"type": "text_delta", "text": "hi"}})
        + sse("content_block_stop", {"index": 2})
        + sse(
            "message_delta",
            {
                "delta": {"stop_reason": "stop_sequence", "stop_sequence": "END"},
                "usage": {"output_tokens": 5},
            },
        )
        + sse(
            "message_delta",
            {
                "delta": {"stop_reason": "stop_sequence", "stop_sequence": "END"},
                "usage": {"output_tokens": 8, "input_tokens": 11},
            },
        )
        + sse("message_stop", {})
    )
    dec = messages_stream.StreamDecoder()
    events = dec.feed(raw) + dec.finish()
    assert events == [
        ir.Start("msg_u", "claude-x", ir.Usage(10, 1, cache_read_input_tokens=3)),
        ir.BlockStart(0, "redacted_thinking", data="opaque"),
        ir.BlockStop(0),
        ir.BlockStart(1, "text"),
        ir.TextDelta(1, "hi"),
        ir.BlockStop(1),
        ir.Finish(ir.StopReason.STOP_SEQUENCE, ir.Usage(11, 8, cache_read_input_tokens=3), "END"),
    ]


def test_decoder_end_of_stream_cases() -> None:
    dec = messages_stream.StreamDecoder()
    start = dec.feed(START)[0]
    assert isinstance(start, ir.Start) and start.id == "msg_u"
    assert dec.finish() == [ir.StreamError("upstream_error", "upstream stream ended early")]
    # message_delta seen but no message_stop: the answer is complete.
    dec = messages_stream.StreamDecoder()
    events = dec.feed(
        START + sse("message_delta", {"delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 2}})
    )
    assert events[-1] == ir.Start("msg_u", "claude-x", ir.Usage(10, 1, cache_read_input_tokens=3))
    assert dec.finish() == [ir.Finish(ir.StopReason.MAX_TOKENS, ir.Usage(10, 2, cache_read_input_tokens=3))]


@pytest.mark.parametrize(
    ("error_type", "kind"),
    [
        ("overloaded_error", "overloaded"),
        ("rate_limit_error", "rate_limit"),
        ("api_error", "upstream_error"),
        ("new_error", "upstream_error"),
    ],
)
def test_decoder_in_band_errors(error_type: str, kind: str) -> None:
    dec = messages_stream.StreamDecoder()
    events = dec.feed(
        START + sse("error", {"error": {"type": error_type, "message": "m"}}) + sse("message_stop", {})
    )
    assert events[-1] == ir.StreamError(kind, "m")
    assert dec.finish() == []


def test_decoder_malformed_json_is_an_event_not_an_exception() -> None:
    dec = messages_stream.StreamDecoder()
    events = dec.feed(START + b"event: content_block_start\ndata: {not json\n\n")
    assert isinstance(events[-1], ir.StreamError) and events[-1].kind == "upstream_error"


# ---------------------------------------------------------------------------------------------
# StreamTap
# ---------------------------------------------------------------------------------------------

TAP_STREAM = (
    START
    + sse("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    + b'event: ping\ndata: {"type": "ping"}\n\n'
    + sse(
        "content_block_delta",
        {"index": 0, "delta": {"type": "text_delta", "text": 'say "model":"claude-x" ünï'}},
    )
    + sse("content_block_stop", {"index": 0})
    + sse(
        "content_block_start",
        {"index": 1, "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {}}},
    )
    + sse(
        "content_block_delta",
        {"index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"a": "\\\\"}'}},
    )
    + sse("content_block_stop", {"index": 1})
    + sse(
        "message_delta",
        {"delta": {"stop_reason": "tool_use", "stop_sequence": None}, "usage": {"output_tokens": 9}},
    )
    + sse("message_stop", {})
)
REWRITTEN = TAP_STREAM.replace(b'"model":"claude-x","content"', b'"model":"aria-opus-4.8","content"')


def check_tap(tap: messages_tap.StreamTap) -> None:
    assert tap.usage == ir.Usage(10, 9, cache_read_input_tokens=3)
    assert tap.stop_reason is ir.StopReason.TOOL_USE
    assert tap.finished and tap.error is None
    # Escaped quotes and backslashes inside a delta do not end it: both deltas are counted whole.
    assert tap.output_tokens == text_tokens('say "model":"claude-x" ünï') + text_tokens('{"a": "\\\\"}')


def test_tap_forwards_bytes_exactly_when_models_match() -> None:
    tap = messages_tap.StreamTap("claude-x", "claude-x", DELTA_ESTIMATOR)
    assert tap.feed(TAP_STREAM) + tap.finish() == TAP_STREAM
    check_tap(tap)


def test_tap_rewrites_only_the_model_field_at_every_split() -> None:
    assert REWRITTEN != TAP_STREAM and REWRITTEN.count(b"claude-x") == 1  # the text keeps its mention
    for cut in range(len(TAP_STREAM) + 1):
        tap = messages_tap.StreamTap("claude-x", "aria-opus-4.8", DELTA_ESTIMATOR)
        first = tap.feed(TAP_STREAM[:cut])
        assert first.endswith(b"\n\n") or first == b""
        assert first + tap.feed(TAP_STREAM[cut:]) + tap.finish() == REWRITTEN
        check_tap(tap)


def test_tap_records_error_and_holds_back_a_cut_tail() -> None:
    tap = messages_tap.StreamTap("m", "m", DELTA_ESTIMATOR)
    raw = START + sse("error", {"error": {"type": "overloaded_error", "message": "Overloaded"}})
    assert tap.feed(raw + b"event: ping\ndata: {") == raw
    assert tap.error == ir.StreamError("overloaded", "Overloaded") and not tap.finished
    # The stream ended inside an event: half a JSON is never forwarded (the tap validates every
    # event it relays), and the cut is flagged for the gateway's in-band error.
    assert tap.finish() == b"" and tap.malformed


def test_tap_handles_crlf() -> None:
    crlf = TAP_STREAM.replace(b"\n", b"\r\n")
    tap = messages_tap.StreamTap("claude-x", "aria-opus-4.8", DELTA_ESTIMATOR)
    out = b"".join(tap.feed(crlf[i : i + 7]) for i in range(0, len(crlf), 7)) + tap.finish()
    assert out == REWRITTEN.replace(b"\n", b"\r\n")
    check_tap(tap)
