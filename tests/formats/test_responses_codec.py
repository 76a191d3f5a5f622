"""Responses codec: request/response mapping, judged by the real openai SDK types and helpers."""

from __future__ import annotations

import base64
from typing import Any

import httpx2
import openai
import orjson
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from modelgate import errors, ir
from modelgate.formats.responses import encoder as responses_encoder
from modelgate.formats.responses import request as responses_request
from modelgate.formats.responses import response as responses_response
from modelgate.formats.sse import SSEParser

STREAM_EVENT = TypeAdapter(ResponseStreamEvent)

CODEX_BODY: dict[str, Any] = {
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
            "content": [{"type": "input_text", "text": "<environment_context/>"}],
        },
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "thinking"}],
            "encrypted_content": "gAAAAB...",
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_a",
            "name": "exec_command",
            "arguments": '{"cmd":"ls"}',
        },
        {
            "type": "function_call",
            "call_id": "call_b",
            "name": "spawn_agent",
            "namespace": "multi_agent_v1",
            "arguments": "{}",
        },
        {"type": "function_call_output", "id": "fco_1", "call_id": "call_a", "output": "a.txt\nb.txt"},
        {
            "type": "function_call_output",
            "call_id": "call_b",
            "output": [{"type": "input_text", "text": "ok"}],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Two files.", "annotations": []}],
        },
        {"type": "message", "role": "developer", "content": "mid-conversation note"},
        {"role": "user", "content": "thanks"},
    ],
    "tools": [
        {
            "type": "function",
            "name": "exec_command",
            "description": "Run",
            "parameters": {"type": "object"},
            "strict": False,
        },
        {"type": "web_search", "external_web_access": False},
        {
            "type": "namespace",
            "name": "multi_agent_v1",
            "description": "agents",
            "tools": [
                {
                    "type": "function",
                    "name": "spawn_agent",
                    "parameters": {"type": "object", "properties": {}},
                }
            ],
        },
    ],
    "tool_choice": "auto",
    "parallel_tool_calls": False,
    "reasoning": {"effort": "high", "summary": "auto"},
    "store": False,
    "stream": True,
    "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "0199-session",
    "client_metadata": {"x": 1},
    "text": {"verbosity": "low"},
    "stream_options": {"include_obfuscation": False},
}


def test_codex_request_decodes() -> None:
    req = responses_request.decode_request(CODEX_BODY)
    assert req.model == "nova-5.5" and req.stream
    assert req.system == ["You are Codex."]
    assert [m.role for m in req.messages] == ["user", "assistant", "user", "assistant", "system", "user"]
    # the two user items merged; the reasoning item dropped; both calls in one assistant turn
    assert [p.text for p in req.messages[0].content if isinstance(p, ir.TextPart)] == [
        "<environment_context/>",
        "list files",
    ]
    calls = req.messages[1].content
    assert calls == [
        ir.ToolUsePart("call_a", "exec_command", {"cmd": "ls"}),
        ir.ToolUsePart("call_b", "multi_agent_v1__spawn_agent", {}),
    ]
    results = req.messages[2].content
    assert results == [
        ir.ToolResultPart("call_a", [ir.TextPart("a.txt\nb.txt")]),
        ir.ToolResultPart("call_b", [ir.TextPart("ok")]),
    ]
    assert req.messages[4].content == [ir.TextPart("mid-conversation note")]
    assert [t.name for t in req.tools] == ["exec_command", "multi_agent_v1__spawn_agent"]
    assert req.tool_choice == ir.ToolChoice("auto", disable_parallel=True)
    assert req.reasoning_effort == "high"
    assert req.response_format is None
    # Codex's hosted web search is carried for dialects that can run one; nothing else is hosted.
    assert req.web_search == ir.WebSearchTool("web_search") and req.hosted_tools == []
    assert responses_request.tool_namespaces(CODEX_BODY) == {
        "multi_agent_v1__spawn_agent": ("multi_agent_v1", "spawn_agent")
    }


def test_string_input_and_scalars() -> None:
    req = responses_request.decode_request(
        {
            "model": "m",
            "input": "hi",
            "instructions": "be brief",
            "max_output_tokens": 100,
            "temperature": 0.5,
            "top_p": 1,
            "safety_identifier": "u1",
            "tool_choice": {"type": "function", "name": "f"},
            "text": {
                "format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": True}
            },
            "metadata": {"a": "b"},
            "truncation": "auto",
            "store": True,
        }
    )
    assert req.messages == [ir.Message("user", [ir.TextPart("hi")])]
    assert req.system == ["be brief"] and req.max_tokens == 100
    assert req.temperature == 0.5 and req.top_p == 1.0 and req.user == "u1"
    assert req.tool_choice == ir.ToolChoice("tool", name="f")
    assert req.response_format == {
        "type": "json_schema",
        "name": "out",
        "schema": {"type": "object"},
        "strict": True,
    }
    json_object = responses_request.decode_request(
        {"model": "m", "input": "x", "text": {"format": {"type": "json_object"}}}
    )
    assert json_object.response_format == {"type": "json_object"}
    assert responses_request.decode_request(
        {"model": "m", "input": "x", "tool_choice": "required"}
    ).tool_choice == ir.ToolChoice("any")
    assert responses_request.decode_request(
        {"model": "m", "input": "x", "tool_choice": "none"}
    ).tool_choice == ir.ToolChoice("none")


def test_images_and_files() -> None:
    text_b64 = base64.b64encode(b"hello doc").decode()
    req = responses_request.decode_request(
        {
            "model": "m",
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"},
                        {"type": "input_image", "image_url": "https://x/y.png"},
                        {
                            "type": "input_file",
                            "file_data": "data:application/pdf;base64,JVBE",
                            "filename": "a.pdf",
                        },
                        {"type": "input_file", "file_data": f"data:text/plain;base64,{text_b64}"},
                    ],
                }
            ],
        }
    )
    assert req.messages[0].content == [
        ir.ImagePart(media_type="image/png", data="AAAA"),
        ir.ImagePart(url="https://x/y.png"),
        ir.DocumentPart(media_type="application/pdf", data="JVBE", filename="a.pdf"),
        ir.DocumentPart(text="hello doc"),
    ]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x"}, "model"),
        ({"model": "m"}, "input"),
        ({"model": "m", "input": 3}, "input"),
        ({"model": "m", "input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
        ({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]"),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "input[0].content[0]",
        ),
        ({"model": "m", "input": "x", "max_output_tokens": "10"}, "max_output_tokens"),
    ],
)
def test_invalid_requests(body: dict[str, Any], param: str) -> None:
    with pytest.raises(errors.InvalidRequest) as info:
        responses_request.decode_request(body)
    assert info.value.param == param


def test_function_call_bad_arguments_kept_raw() -> None:
    req = responses_request.decode_request(
        {
            "model": "m",
            "input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{oops"}],
        }
    )
    assert req.messages[0].content == [ir.ToolUsePart("c", "f", {"_raw": "{oops"})]


def test_encode_request_round_trip() -> None:
    req = responses_request.decode_request(CODEX_BODY)
    req.stop_sequences = ["END"]
    body = responses_request.encode_request(req, "gpt-upstream")
    assert body["model"] == "gpt-upstream" and body["store"] is False and body["stream"] is True
    assert body["instructions"] == "You are Codex."
    assert body["parallel_tool_calls"] is False and body["reasoning"] == {"effort": "high"}
    assert "stop" not in body and "stop_sequences" not in body
    types = [(i["type"], i.get("role")) for i in body["input"]]
    assert types == [
        ("message", "user"),
        ("function_call", None),
        ("function_call", None),
        ("function_call_output", None),
        ("function_call_output", None),
        ("message", "assistant"),
        ("message", "developer"),
        ("message", "user"),
    ]
    assert body["input"][1] == {
        "type": "function_call",
        "call_id": "call_a",
        "name": "exec_command",
        "arguments": '{"cmd":"ls"}',
    }
    assert body["input"][5]["content"] == [{"type": "output_text", "text": "Two files."}]
    assert [t.get("name") for t in body["tools"]] == ["exec_command", "multi_agent_v1__spawn_agent", None]
    assert body["tools"][2] == {"type": "web_search"}  # hosted: carried, not flattened
    # Decoding what we encoded gives the same conversation back.
    again = responses_request.decode_request(body)
    assert again.messages == req.messages and again.system == req.system and again.tools == req.tools


def test_encode_request_tool_result_error_and_images() -> None:
    req = ir.Request(
        model="m",
        messages=[
            ir.Message("user", [ir.TextPart("see"), ir.ImagePart(media_type="image/jpeg", data="QQ==")]),
            ir.Message("assistant", [ir.ThinkingPart("hm", "sig"), ir.ToolUsePart("call_1", "f", {"a": 1})]),
            ir.Message("user", [ir.ToolResultPart("call_1", [ir.TextPart("boom")], is_error=True)]),
        ],
        tool_choice=ir.ToolChoice("any"),
        response_format={"type": "json_object"},
    )
    body = responses_request.encode_request(req, "u")
    assert body["input"][0]["content"][1] == {
        "type": "input_image",
        "image_url": "data:image/jpeg;base64,QQ==",
        "detail": "auto",
    }
    assert body["input"][1]["type"] == "function_call"  # thinking dropped
    assert body["input"][2] == {"type": "function_call_output", "call_id": "call_1", "output": "Error: boom"}
    assert body["tool_choice"] == "required" and body["text"] == {"format": {"type": "json_object"}}


def _ir_response(stop: ir.StopReason = ir.StopReason.END_TURN) -> ir.Response:
    return ir.Response(
        id="resp_abc",
        model="nova-5.5",
        content=[
            ir.ThinkingPart("let me think", "sig"),
            ir.TextPart("Hello "),
            ir.TextPart("world"),
            ir.ToolUsePart("call_1", "multi_agent_v1__spawn_agent", {"task": "x"}),
            ir.RedactedThinkingPart("opaque"),
        ],
        stop_reason=stop,
        usage=ir.Usage(
            input_tokens=10, output_tokens=7, cache_creation_input_tokens=2, cache_read_input_tokens=3
        ),
    )


def test_encode_response_matches_sdk() -> None:
    req = responses_request.decode_request(CODEX_BODY)
    body = responses_response.encode_response(
        _ir_response(), req, namespaces=responses_request.tool_namespaces(CODEX_BODY)
    )
    parsed = Response.model_validate(body)
    assert parsed.status == "completed" and parsed.incomplete_details is None
    assert parsed.output_text == "Hello world"
    assert [item.type for item in parsed.output] == ["reasoning", "message", "function_call"]
    call = body["output"][2]
    assert (
        call["call_id"] == "call_1"
        and call["name"] == "spawn_agent"
        and call["namespace"] == "multi_agent_v1"
    )
    assert call["id"].startswith("fc_") and body["output"][1]["id"].startswith("msg_")
    assert orjson.loads(call["arguments"]) == {"task": "x"}
    assert body["usage"] == {
        "input_tokens": 15,
        "input_tokens_details": {"cached_tokens": 3, "cache_write_tokens": 2},
        "output_tokens": 7,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 22,
    }
    assert body["store"] is False and body["previous_response_id"] is None and body["metadata"] == {}
    assert body["parallel_tool_calls"] is False and body["reasoning"]["effort"] == "high"
    assert body["instructions"] == "You are Codex."
    required = {
        "id",
        "object",
        "created_at",
        "model",
        "output",
        "parallel_tool_calls",
        "tool_choice",
        "tools",
    }
    assert required <= body.keys()


@pytest.mark.parametrize(
    ("stop", "status", "reason"),
    [
        (ir.StopReason.MAX_TOKENS, "incomplete", "max_output_tokens"),
        (ir.StopReason.CONTEXT_WINDOW, "incomplete", "max_output_tokens"),
        (ir.StopReason.REFUSAL, "incomplete", "content_filter"),
        (ir.StopReason.TOOL_USE, "completed", None),
        (ir.StopReason.PAUSE_TURN, "completed", None),
        (ir.StopReason.STOP_SEQUENCE, "completed", None),
    ],
)
def test_status_mapping(stop: ir.StopReason, status: str, reason: str | None) -> None:
    body = responses_response.encode_response(_ir_response(stop))
    Response.model_validate(body)
    assert body["status"] == status
    assert (body["incomplete_details"] or {}).get("reason") == reason


def test_decode_response() -> None:
    body = responses_response.encode_response(_ir_response(ir.StopReason.TOOL_USE))
    resp = responses_response.decode_response(body)
    assert resp.id == "resp_abc" and resp.stop_reason is ir.StopReason.TOOL_USE
    assert resp.content == [
        ir.ThinkingPart("let me think"),
        ir.TextPart("Hello world"),
        ir.ToolUsePart("call_1", "multi_agent_v1__spawn_agent", {"task": "x"}),
    ]
    assert resp.usage == ir.Usage(10, 7, 2, 3, 0)
    body["output"] = body["output"][:2]
    body["status"], body["incomplete_details"] = "incomplete", {"reason": "max_output_tokens"}
    assert responses_response.decode_response(body).stop_reason is ir.StopReason.MAX_TOKENS
    with pytest.raises(errors.UpstreamFailed, match="boom"):
        responses_response.decode_response(
            {"status": "failed", "error": {"code": "server_error", "message": "boom"}}
        )


def test_render_error() -> None:
    err = errors.InvalidRequest("bad", param="input")
    assert orjson.loads(responses_response.render_error(err, "req_1")) == {
        "error": {"message": "bad", "type": "invalid_request_error", "param": "input", "code": None}
    }
    over = orjson.loads(responses_response.render_error(errors.Overloaded("busy"), "req_1"))
    assert over["error"]["type"] == "server_error" and over["error"]["code"] == "overloaded"


def test_stream_error_frame_validates() -> None:
    frame = responses_response.stream_error_frame(
        errors.UpstreamTimeout("slow"), 7, response_id="resp_x", model="m"
    )
    events = SSEParser().feed(frame)
    assert [e.event for e in events] == ["error", "response.failed"]
    data = [orjson.loads(e.data) for e in events]
    assert [d["sequence_number"] for d in data] == [7, 8]
    for d in data:
        STREAM_EVENT.validate_python(d)
    assert data[0]["error"]["message"] == "slow" and data[0]["code"] == "timeout"
    failed = data[1]["response"]
    assert failed["status"] == "failed" and failed["id"] == "resp_x" and failed["error"]["message"] == "slow"


# ---------------------------------------------------------------------------------------------
# The real SDK over our bytes (network faked with httpx2.MockTransport)
# ---------------------------------------------------------------------------------------------


def _client(payload: bytes, content_type: str = "text/event-stream") -> openai.OpenAI:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": content_type}, content=payload)

    transport = httpx2.MockTransport(handler)
    return openai.OpenAI(
        api_key="sk-cs4-test",
        base_url="http://gateway.test/v1",
        http_client=httpx2.Client(transport=transport),
        max_retries=0,
    )


def _stream_bytes(events: list[ir.Event], request: ir.Request | None = None) -> bytes:
    encoder = responses_encoder.StreamEncoder(request)
    return (
        b"".join(encoder.encode(e) for e in events[:3])
        + encoder.ping()
        + b"".join(encoder.encode(e) for e in events[3:])
    )


TEXT_AND_TOOL: list[ir.Event] = [
    ir.Start("resp_s1", "nova-5.5", ir.Usage(input_tokens=12)),
    ir.BlockStart(0, "thinking"),
    ir.ThinkingDelta(0, "Plan: "),
    ir.ThinkingDelta(0, "greet."),
    ir.SignatureDelta(0, "sig"),
    ir.BlockStop(0),
    ir.BlockStart(1, "redacted_thinking", data="opaque"),
    ir.BlockStop(1),
    ir.BlockStart(2, "text"),
    ir.TextDelta(2, "Hello"),
    ir.TextDelta(2, ", world"),
    ir.BlockStop(2),
    ir.BlockStart(3, "tool_use", tool_id="call_9", tool_name="exec_command"),
    ir.ToolArgsDelta(3, '{"cmd":'),
    ir.ToolArgsDelta(3, '"ls"}'),
    ir.BlockStop(3),
    ir.BlockStart(4, "tool_use", tool_id="call_10", tool_name="noargs"),
    ir.BlockStop(4),
    ir.Finish(ir.StopReason.TOOL_USE, ir.Usage(input_tokens=12, output_tokens=9)),
]


def test_sdk_stream_accumulates_text_and_calls() -> None:
    payload = _stream_bytes(TEXT_AND_TOOL)
    for event in SSEParser().feed(payload):
        STREAM_EVENT.validate_python(orjson.loads(event.data))
    client = _client(payload)
    with client.responses.stream(model="nova-5.5", input="hi") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert final.output_text == "Hello, world"
    calls = [item for item in final.output if item.type == "function_call"]
    assert [(c.call_id, c.name, c.arguments) for c in calls] == [
        ("call_9", "exec_command", '{"cmd":"ls"}'),
        ("call_10", "noargs", "{}"),
    ]
    assert final.usage is not None and final.usage.output_tokens == 9
    reasoning = final.output[0]
    assert reasoning.type == "reasoning" and reasoning.summary[0].text == "Plan: greet."


def test_sdk_stream_incomplete() -> None:
    events: list[ir.Event] = [
        ir.Start("resp_s2", "m", ir.Usage()),
        ir.BlockStart(0, "text"),
        ir.TextDelta(0, "trunc"),
        ir.BlockStop(0),
        ir.Finish(ir.StopReason.MAX_TOKENS, ir.Usage(output_tokens=5)),
    ]
    client = _client(_stream_bytes(events))
    with client.responses.stream(model="m", input="hi") as stream:
        kinds = [event.type for event in stream]
    assert kinds[-1] == "response.incomplete"


def test_sdk_stream_error_raises_api_error() -> None:
    events: list[ir.Event] = [
        ir.Start("resp_s3", "m", ir.Usage()),
        ir.BlockStart(0, "text"),
        ir.TextDelta(0, "par"),
        ir.StreamError("overloaded", "upstream overloaded, retry later"),
    ]
    client = _client(_stream_bytes(events))
    with (
        pytest.raises(openai.APIError, match="upstream overloaded, retry later"),
        client.responses.stream(model="m", input="hi") as stream,
    ):
        for _ in stream:
            pass


def test_sdk_parses_non_streaming_response() -> None:
    body = responses_response.encode_response(
        _ir_response(), responses_request.decode_request({"model": "m", "input": "x"})
    )
    client = _client(orjson.dumps(body), "application/json")
    result = client.responses.create(model="m", input="x")
    assert result.output_text == "Hello world" and result.id == "resp_abc"
