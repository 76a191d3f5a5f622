"""Chat Completions codec: request mapping both ways, whole responses, errors, streams and the tap.

The ``openai`` SDK's own types judge every response body and chunk we produce.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from modelgate import errors, ir
from modelgate.billing.estimate import DELTA_ESTIMATOR, text_tokens
from modelgate.formats.chat import request as chat_request
from modelgate.formats.chat import response as chat_response
from modelgate.formats.chat import stream as chat_stream
from modelgate.formats.chat import tap as chat_tap
from modelgate.formats.messages import request as messages_request
from modelgate.formats.passthrough import DEFERRED_CHARS
from modelgate.formats.sse import SSEParser


def body(**extra: Any) -> dict[str, Any]:
    return {"model": "nova-6-sol", "messages": [{"role": "user", "content": "Hi"}], **extra}


# ---------------------------------------------------------------------------------------------
# decode_request
# ---------------------------------------------------------------------------------------------


def test_decode_conversation() -> None:
    data = body(
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "w", "arguments": '{"city":"Paris"}'},
                    },
                    {"id": "call_2", "type": "function", "function": {"name": "w", "arguments": "{not json"}},
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "rain"}]},
            {"role": "system", "content": "Mid reminder."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64,iVBO", "detail": "high"},
                    },
                    {"type": "image_url", "image_url": {"url": "https://x/cat.jpg"}},
                    {
                        "type": "file",
                        "file": {"file_data": "data:application/pdf;base64,JVBE", "filename": "r.pdf"},
                    },
                    {"type": "file", "file": {"file_id": "file-abc"}},
                    {"type": "input_audio", "input_audio": {"data": "AAA", "format": "wav"}},
                ],
            },
        ]
    )
    req = chat_request.decode_request(data)
    assert req.system == ["Be brief.", "Use tools."]
    assert req.messages == [
        ir.Message("user", [ir.TextPart("weather?")]),
        ir.Message(
            "assistant",
            [
                ir.ToolUsePart("call_1", "w", {"city": "Paris"}),
                ir.ToolUsePart("call_2", "w", {"_raw": "{not json"}),
            ],
        ),
        ir.Message(
            "user",
            [
                ir.ToolResultPart("call_1", [ir.TextPart("sunny")]),
                ir.ToolResultPart("call_2", [ir.TextPart("rain")]),
            ],
        ),
        ir.Message("system", [ir.TextPart("Mid reminder.")]),
        ir.Message(
            "user",
            [
                ir.TextPart("look"),
                ir.ImagePart(media_type="image/png", data="iVBO"),
                ir.ImagePart(url="https://x/cat.jpg"),
                ir.DocumentPart(media_type="application/pdf", data="JVBE", filename="r.pdf"),
            ],
        ),
    ]


def test_decode_options() -> None:
    data = body(
        max_tokens=100,
        max_completion_tokens=200,
        stop="END",
        stream=True,
        stream_options={"include_usage": True},
        temperature=1.5,
        top_p=0.5,
        tools=[
            {
                "type": "function",
                "function": {
                    "name": "f",
                    "description": "F",
                    "parameters": {"type": "object"},
                    "strict": True,
                },
            },
            {"type": "function", "function": {"name": "g"}},
            {"type": "custom", "custom": {"name": "raw"}},
        ],
        tool_choice="required",
        parallel_tool_calls=False,
        reasoning_effort="low",
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "out", "schema": {"type": "object"}, "strict": True},
        },
        safety_identifier="user-9",
        seed=3,
        logit_bias={"1": 2},
        frequency_penalty=0.1,
        n=1,
    )
    req = chat_request.decode_request(data)
    assert req.max_tokens == 200 and req.stop_sequences == ["END"]
    assert req.stream and req.include_usage and req.temperature == 1.5 and req.top_p == 0.5
    assert req.tools == [ir.Tool("f", "F", {"type": "object"}), ir.Tool("g")]
    assert req.tool_choice == ir.ToolChoice("any", disable_parallel=True)
    assert req.reasoning_effort == "low" and req.user == "user-9"
    assert req.response_format == {
        "type": "json_schema",
        "name": "out",
        "schema": {"type": "object"},
        "strict": True,
    }
    # strict survives a translation to another Chat upstream (it was dropped before).
    assert chat_request.encode_request(req, "m")["response_format"]["json_schema"]["strict"] is True
    assert chat_request.decode_request(body(max_tokens=7, stop=["a", "b"])).max_tokens == 7
    assert chat_request.decode_request(body(response_format={"type": "json_object"})).response_format == {
        "type": "json_object"
    }
    assert chat_request.decode_request(body(response_format={"type": "text"})).response_format is None
    assert not chat_request.decode_request(
        body(stream_options={"include_usage": True})
    ).include_usage  # not streaming


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("none", ir.ToolChoice("none")),
        ("auto", ir.ToolChoice("auto")),
        ("required", ir.ToolChoice("any")),
        ({"type": "function", "function": {"name": "f"}}, ir.ToolChoice("tool", "f")),
        ({"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}}, ir.ToolChoice("auto")),
    ],
)
def test_decode_tool_choice(choice: Any, expected: ir.ToolChoice) -> None:
    assert chat_request.decode_request(body(tool_choice=choice)).tool_choice == expected


@pytest.mark.parametrize(
    ("patch", "param"),
    [
        ({"n": 2}, "n"),
        ({"messages": []}, "messages"),
        ({"model": 5}, "model"),
        (
            {"messages": [{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]},
            "messages.1.role",
        ),
        ({"messages": [{"role": "user", "content": 3}]}, "messages.0.content"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages.0.tool_call_id"),
        ({"max_completion_tokens": "many"}, "max_completion_tokens"),
        ({"stop": 5}, "stop"),
        ({"tool_choice": "sometimes"}, "tool_choice"),
        ({"tools": [{"type": "function", "function": {}}]}, "tools.0.function.name"),
    ],
)
def test_decode_rejects_bad_fields_naming_them(patch: dict[str, Any], param: str) -> None:
    with pytest.raises(errors.InvalidRequest) as info:
        chat_request.decode_request(body(**patch))
    assert info.value.param == param


# ---------------------------------------------------------------------------------------------
# encode_request
# ---------------------------------------------------------------------------------------------


def test_encode_request() -> None:
    req = ir.Request(
        model="aria-opus-4.8",
        system=["Be brief.", "Use tools."],
        messages=[
            ir.Message(
                "user", [ir.TextPart("weather?"), ir.DocumentPart(media_type="application/pdf", data="JVBE")]
            ),
            ir.Message(
                "assistant",
                [
                    ir.ThinkingPart("t", "sig"),
                    ir.TextPart("Checking."),
                    ir.ToolUsePart("toolu_1", "w", {"city": "Paris"}),
                ],
            ),
            ir.Message(
                "user",
                [
                    ir.TextPart("thanks"),
                    ir.ToolResultPart(
                        "toolu_1", [ir.TextPart("sunny"), ir.ImagePart(media_type="image/png", data="iVBO")]
                    ),
                    ir.ToolResultPart("toolu_2", [ir.TextPart("boom")], is_error=True),
                ],
            ),
            ir.Message("system", [ir.TextPart("Reminder.")]),
            ir.Message("assistant", [ir.ThinkingPart("only thinking")]),
        ],
        max_tokens=300,
        stream=True,
        stop_sequences=["a", "b", "c", "d", "e"],
        temperature=0.2,
        top_k=40,
        tools=[ir.Tool("w", "Weather", {"type": "object", "properties": {"city": {"type": "string"}}})],
        tool_choice=ir.ToolChoice("tool", "w", disable_parallel=True),
        user="u",
        reasoning_effort="high",
        response_format={"type": "json_schema", "name": "out", "schema": {"type": "object"}},
    )
    out = chat_request.encode_request(req, "gpt-5.1")
    assert out["messages"] == [
        {"role": "system", "content": "Be brief.\n\nUse tools."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "weather?"},
                {
                    "type": "file",
                    "file": {"file_data": "data:application/pdf;base64,JVBE", "filename": "document.pdf"},
                },
            ],
        },
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "w", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: boom"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "thanks"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
            ],
        },
        {"role": "system", "content": "Reminder."},
    ]
    assert out["model"] == "gpt-5.1" and out["max_completion_tokens"] == 300 and "max_tokens" not in out
    assert out["stream"] is True and out["stream_options"] == {"include_usage": True}
    assert out["stop"] == ["a", "b", "c", "d"] and "top_k" not in out and out["temperature"] == 0.2
    assert out["tools"] == [
        {
            "type": "function",
            "function": {"name": "w", "description": "Weather", "parameters": req.tools[0].input_schema},
        }
    ]
    assert out["tool_choice"] == {"type": "function", "function": {"name": "w"}}
    assert out["parallel_tool_calls"] is False
    assert (out["user"], out["reasoning_effort"]) == ("u", "high")
    assert out["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "out", "schema": {"type": "object"}},
    }


def test_request_round_trip() -> None:
    original = body(
        messages=[
            {"role": "system", "content": "S"},
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"a":[1,2]}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "r"},
        ],
        max_completion_tokens=50,
        tools=[
            {
                "type": "function",
                "function": {
                    "name": "f",
                    "description": "F",
                    "parameters": {"type": "object", "properties": {}},
                },
            }
        ],
        tool_choice="auto",
        stop=["s"],
        user="u",
    )
    encoded = chat_request.encode_request(chat_request.decode_request(original), "nova-6-sol")
    assert encoded == original


def test_chat_client_through_messages_upstream_and_back() -> None:
    """Chat request -> IR -> Messages upstream request -> IR -> Chat request keeps the conversation."""
    original = body(
        messages=[
            {"role": "developer", "content": "S"},
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": "let me see",
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "r"},
        ],
        max_completion_tokens=50,
    )
    upstream = messages_request.encode_request(chat_request.decode_request(original), "claude-x")
    back = chat_request.encode_request(messages_request.decode_request(upstream), "nova-6-sol")
    assert back["messages"] == [{**original["messages"][0], "role": "system"}, *original["messages"][1:]]


# ---------------------------------------------------------------------------------------------
# Whole responses
# ---------------------------------------------------------------------------------------------

FINISH = [
    (ir.StopReason.END_TURN, "stop"),
    (ir.StopReason.STOP_SEQUENCE, "stop"),
    (ir.StopReason.PAUSE_TURN, "stop"),
    (ir.StopReason.MAX_TOKENS, "length"),
    (ir.StopReason.CONTEXT_WINDOW, "length"),
    (ir.StopReason.TOOL_USE, "tool_calls"),
    (ir.StopReason.REFUSAL, "content_filter"),
]


@pytest.mark.parametrize(("stop", "finish"), FINISH)
def test_encode_response_stop_reasons(stop: ir.StopReason, finish: str) -> None:
    resp = ir.Response("chatcmpl-1", "nova-6-sol", [ir.TextPart("Hi")], stop, ir.Usage(5, 2))
    out = chat_response.encode_response(resp)
    assert ChatCompletion.model_validate(out).choices[0].finish_reason == finish


def test_encode_response_shape() -> None:
    resp = ir.Response(
        "chatcmpl-1",
        "nova-6-sol",
        [ir.ThinkingPart("t", "s"), ir.ToolUsePart("call_1", "f", {"a": 1})],
        ir.StopReason.TOOL_USE,
        ir.Usage(10, 20, cache_creation_input_tokens=2, cache_read_input_tokens=3, reasoning_tokens=4),
    )
    out = chat_response.encode_response(resp)
    parsed = ChatCompletion.model_validate(out)
    assert parsed.id == "chatcmpl-1" and parsed.object == "chat.completion"
    assert out["choices"][0] == {
        "index": 0,
        "message": {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
            ],
        },
        "logprobs": None,
        "finish_reason": "tool_calls",
    }
    assert out["usage"] == {
        "prompt_tokens": 15,
        "completion_tokens": 20,
        "total_tokens": 35,
        "prompt_tokens_details": {"cached_tokens": 3},
        "completion_tokens_details": {"reasoning_tokens": 4},
    }
    assert out["system_fingerprint"] is None
    text_only = chat_response.encode_response(
        ir.Response("c", "m", [ir.TextPart("a"), ir.TextPart("b")], ir.StopReason.END_TURN, ir.Usage())
    )
    assert text_only["choices"][0]["message"] == {"role": "assistant", "content": "ab", "refusal": None}


def test_decode_response() -> None:
    raw: dict[str, Any] = {
        "id": "chatcmpl-up",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-5.1",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Hi",
                    "reasoning_content": "think",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "f", "arguments": '{"a":1}'},
                        }
                    ],
                },
                "finish_reason": "stop",  # compatible servers say stop even with tool calls
            }
        ],
        "usage": {
            "prompt_tokens": 100,
            "completion_tokens": 7,
            "total_tokens": 107,
            "prompt_tokens_details": {"cached_tokens": 60},
        },
    }
    resp = chat_response.decode_response(raw)
    assert resp.content == [
        ir.ThinkingPart("think"),
        ir.TextPart("Hi"),
        ir.ToolUsePart("call_1", "f", {"a": 1}),
    ]
    assert resp.stop_reason is ir.StopReason.TOOL_USE
    assert resp.usage == ir.Usage(input_tokens=40, output_tokens=7, cache_read_input_tokens=60)
    assert resp.usage.total_input == 100
    for stop, finish in FINISH:
        raw["choices"][0] = {
            "index": 0,
            "message": {"role": "assistant", "content": "x"},
            "finish_reason": finish,
        }
        if stop in (
            ir.StopReason.END_TURN,
            ir.StopReason.MAX_TOKENS,
            ir.StopReason.TOOL_USE,
            ir.StopReason.REFUSAL,
        ):
            assert chat_response.decode_response(raw).stop_reason is stop
    with pytest.raises(errors.UpstreamFailed):
        chat_response.decode_response({"choices": []})


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


def test_render_error() -> None:
    bad = errors.InvalidRequest("messages: required", param="messages")
    assert orjson.loads(chat_response.render_error(bad, "req_1")) == {
        "error": {
            "message": "messages: required",
            "type": "invalid_request_error",
            "param": "messages",
            "code": None,
        }
    }
    cap = orjson.loads(chat_response.render_error(errors.BillingRefused("cap", code="monthly_cap"), "req_1"))
    assert cap["error"] == {
        "message": "cap",
        "type": "insufficient_quota",
        "param": None,
        "code": "monthly_cap",
    }
    missing = orjson.loads(chat_response.render_error(errors.NotFound("model x"), "req_1"))
    assert missing["error"]["code"] == "model_not_found"


def test_stream_error_frame() -> None:
    raw = chat_response.stream_error_frame(errors.Overloaded("busy"))
    (event,) = SSEParser().feed(raw)
    assert event.event is None
    assert orjson.loads(event.data) == {
        "error": {"message": "busy", "type": "server_error", "param": None, "code": "overloaded"}
    }


# ---------------------------------------------------------------------------------------------
# StreamEncoder
# ---------------------------------------------------------------------------------------------

EVENTS: list[ir.Event] = [
    ir.Start("chatcmpl-1", "nova-6-sol", ir.Usage(10, 1)),
    ir.BlockStart(0, "thinking"),
    ir.ThinkingDelta(0, "hidden"),
    ir.SignatureDelta(0, "sig"),
    ir.BlockStop(0),
    ir.BlockStart(1, "text"),
    ir.TextDelta(1, "Hi"),
    ir.BlockStop(1),
    ir.BlockStart(2, "tool_use", "toolu_a", "f"),
    ir.ToolArgsDelta(2, '{"a":'),
    ir.ToolArgsDelta(2, "1}"),
    ir.BlockStop(2),
    ir.BlockStart(3, "tool_use", "toolu_b", "g"),
    ir.ToolArgsDelta(3, "{}"),
    ir.BlockStop(3),
    ir.Finish(ir.StopReason.TOOL_USE, ir.Usage(10, 30, cache_read_input_tokens=5)),
]


def chunks_of(raw: bytes) -> list[dict[str, Any]]:
    events = SSEParser().feed(raw)
    assert events[-1].data == b"[DONE]"
    return [orjson.loads(e.data) for e in events[:-1]]


@pytest.mark.parametrize("include_usage", [True, False])
def test_stream_encoder(include_usage: bool) -> None:
    enc = chat_stream.StreamEncoder(include_usage=include_usage)
    raw = b"".join(enc.encode(e) for e in EVENTS)
    chunks = chunks_of(raw)
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)
        assert (chunk["id"], chunk["model"], chunk["created"]) == (
            "chatcmpl-1",
            "nova-6-sol",
            chunks[0]["created"],
        )
        assert ("usage" in chunk) is include_usage
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas == [
        {"role": "assistant", "content": ""},
        {"content": "Hi"},
        {
            "tool_calls": [
                {"index": 0, "id": "toolu_a", "type": "function", "function": {"name": "f", "arguments": ""}}
            ]
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]},
        {
            "tool_calls": [
                {"index": 1, "id": "toolu_b", "type": "function", "function": {"name": "g", "arguments": ""}}
            ]
        },
        {"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]},
        {},
    ]
    finish = [c for c in chunks if c["choices"]][-1]["choices"][0]["finish_reason"]
    assert finish == "tool_calls"
    if include_usage:
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] == 15
        assert all(c["usage"] is None for c in chunks[:-1])
    assert enc.encode(ir.TextDelta(1, "late")) == b""
    assert enc.ping() == b": ping\n\n"


def test_stream_encoder_error_ends_the_stream_without_done() -> None:
    enc = chat_stream.StreamEncoder()
    raw = enc.encode(EVENTS[0]) + enc.encode(ir.StreamError("rate_limit", "slow down"))
    events = SSEParser().feed(raw)
    assert orjson.loads(events[-1].data) == {
        "error": {
            "message": "slow down",
            "type": "rate_limit_error",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }
    assert enc.encode(ir.Finish(ir.StopReason.END_TURN, ir.Usage())) == b""


# ---------------------------------------------------------------------------------------------
# StreamDecoder
# ---------------------------------------------------------------------------------------------


def data(obj: Any) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else orjson.dumps(obj)) + b"\n\n"


def chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, usage: Any = None, choices: bool = True
) -> bytes:
    body: dict[str, Any] = {
        "id": "chatcmpl-u",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-5.1",
    }
    body["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}] if choices else []
    body["usage"] = usage
    return data(body)


USAGE = {
    "prompt_tokens": 20,
    "completion_tokens": 5,
    "total_tokens": 25,
    "prompt_tokens_details": {"cached_tokens": 8},
}


def test_decoder_holds_finish_until_usage_chunk() -> None:
    dec = chat_stream.StreamDecoder()
    events = dec.feed(
        chunk({"role": "assistant", "content": ""}) + chunk({"content": "Hi"}) + chunk(finish="length")
    )
    assert events == [
        ir.Start("chatcmpl-u", "gpt-5.1", ir.Usage()),
        ir.BlockStart(0, "text"),
        ir.TextDelta(0, "Hi"),
        ir.BlockStop(0),
    ]
    assert dec.feed(chunk(usage=USAGE, choices=False)) == [
        ir.Finish(ir.StopReason.MAX_TOKENS, ir.Usage(12, 5, cache_read_input_tokens=8))
    ]
    assert dec.feed(data(b"[DONE]")) == [] and dec.finish() == []


def test_decoder_done_without_usage_and_eof_cases() -> None:
    dec = chat_stream.StreamDecoder()
    events = dec.feed(chunk({"content": "Hi"}) + chunk(finish="stop") + data(b"[DONE]"))
    assert events[-1] == ir.Finish(ir.StopReason.END_TURN, ir.Usage())
    # finish_reason then EOF with neither usage nor [DONE]: complete answer.
    dec = chat_stream.StreamDecoder()
    dec.feed(chunk({"content": "Hi"}) + chunk(finish="stop", usage=USAGE))
    assert dec.finish() == [ir.Finish(ir.StopReason.END_TURN, ir.Usage(12, 5, cache_read_input_tokens=8))]
    # EOF before any finish_reason: the encoder must end the client stream with an error.
    dec = chat_stream.StreamDecoder()
    assert dec.feed(chunk({"content": "Hi"}))[-1] == ir.TextDelta(0, "Hi")
    assert dec.finish() == [ir.StreamError("upstream_error", "upstream stream ended early")]


def test_decoder_errors_are_events() -> None:
    dec = chat_stream.StreamDecoder()
    events = dec.feed(chunk({"content": "Hi"}) + data(b"{broken"))
    last = events[-1]
    assert isinstance(last, ir.StreamError) and last.kind == "upstream_error"
    assert dec.feed(chunk({"content": "more"})) == [] and dec.finish() == []
    for error, kind in [
        ({"message": "m", "type": "server_error", "code": "overloaded"}, "overloaded"),
        ({"message": "m", "type": "rate_limit_error", "code": "rate_limit_exceeded"}, "rate_limit"),
        ({"message": "m", "type": "server_error", "code": None}, "upstream_error"),
        ({"message": "m", "type": "insufficient_quota", "code": "insufficient_quota"}, "upstream_error"),
    ]:
        dec = chat_stream.StreamDecoder()
        assert dec.feed(data({"error": error}))[-1] == ir.StreamError(kind, "m")


def test_decoder_tool_call_variants() -> None:
    # Text after a tool call, "stop" with tool calls, and fragments without an explicit index.
    dec = chat_stream.StreamDecoder()
    raw = (
        chunk(
            {
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a"'}}
                ]
            }
        )
        + chunk({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]})
        + chunk({"content": "done"})
        + chunk(finish="stop")
        + data(b"[DONE]")
    )
    events = dec.feed(raw)
    assert events[1:] == [
        ir.BlockStart(0, "tool_use", "call_1", "f"),
        ir.ToolArgsDelta(0, '{"a"'),
        ir.ToolArgsDelta(0, ":1}"),
        ir.BlockStop(0),
        ir.BlockStart(1, "text"),
        ir.TextDelta(1, "done"),
        ir.BlockStop(1),
        ir.Finish(ir.StopReason.TOOL_USE, ir.Usage()),
    ]


# ---------------------------------------------------------------------------------------------
# StreamTap
# ---------------------------------------------------------------------------------------------

TAP_STREAM = (
    chunk({"role": "assistant", "content": ""})
    + chunk({"content": 'a "model":"gpt-5.1" ü'})
    + chunk(
        {
            "tool_calls": [
                {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}
            ]
        }
    )
    + chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"x":1}'}}]})
    + chunk(finish="tool_calls")
    + chunk(usage=USAGE, choices=False)
    + data(b"[DONE]")
)


def check_tap(tap: chat_tap.StreamTap) -> None:
    assert tap.usage == ir.Usage(12, 5, cache_read_input_tokens=8)
    assert tap.stop_reason is ir.StopReason.TOOL_USE
    assert tap.finished and tap.error is None
    # Escaped quotes inside a delta do not end it: both deltas are counted whole.
    assert tap.output_tokens == text_tokens('a "model":"gpt-5.1" ü') + text_tokens('{"x":1}')


def test_tap_forwards_exactly_when_models_match() -> None:
    tap = chat_tap.StreamTap("gpt-5.1", "gpt-5.1", DELTA_ESTIMATOR)
    assert tap.feed(TAP_STREAM) + tap.finish() == TAP_STREAM
    check_tap(tap)


def test_tap_rewrites_model_at_every_split() -> None:
    expected = TAP_STREAM.replace(b'"model":"gpt-5.1"', b'"model":"nova-6-sol"')
    assert expected.count(b"gpt-5.1") == 1  # the mention inside the text is escaped and stays
    for cut in range(len(TAP_STREAM) + 1):
        tap = chat_tap.StreamTap("gpt-5.1", "nova-6-sol", DELTA_ESTIMATOR)
        first = tap.feed(TAP_STREAM[:cut])
        assert first + tap.feed(TAP_STREAM[cut:]) + tap.finish() == expected
        check_tap(tap)


def test_tap_strips_the_forced_usage_chunk_but_records_usage() -> None:
    tap = chat_tap.StreamTap("gpt-5.1", "nova-6-sol", DELTA_ESTIMATOR, strip_usage=True)
    out = b"".join(tap.feed(TAP_STREAM[i : i + 50]) for i in range(0, len(TAP_STREAM), 50)) + tap.finish()
    check_tap(tap)
    events = SSEParser().feed(out)
    assert events[-1].data == b"[DONE]"
    chunks = [orjson.loads(e.data) for e in events[:-1]]
    assert len(chunks) == 5 and all(c["choices"] and "usage" not in c for c in chunks)
    for c in chunks:
        ChatCompletionChunk.model_validate(c)
        assert c["model"] == "nova-6-sol"


def test_tap_records_in_band_error() -> None:
    tap = chat_tap.StreamTap("m", "m", DELTA_ESTIMATOR)
    raw = chunk({"content": "x"}) + data(
        {"error": {"message": "busy", "type": "server_error", "code": "overloaded"}}
    )
    assert tap.feed(raw) == raw
    assert tap.error == ir.StreamError("overloaded", "busy") and not tap.finished


def test_tap_counts_deferred_deltas_exactly_across_folds() -> None:
    """Deltas wait uncounted until the estimate is read or DEFERRED_CHARS of text wait; either
    way the estimate is the sum of the per-delta estimates."""
    pieces = [f"word{i} " * (i % 7 + 1) for i in range(3_000)]  # far more than DEFERRED_CHARS
    tap = chat_tap.StreamTap("gpt-5.1", "gpt-5.1", DELTA_ESTIMATOR)
    for piece in pieces[:1_500]:
        tap.feed(chunk({"content": piece}))
    assert tap.output_tokens == sum(text_tokens(p) for p in pieces[:1_500])
    for piece in pieces[1_500:]:
        tap.feed(chunk({"content": piece}))
    assert tap.output_tokens == sum(text_tokens(p) for p in pieces)
    assert sum(len(p) for p in pieces) > 3 * DEFERRED_CHARS
