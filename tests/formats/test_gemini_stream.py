"""Gemini streams (``streamGenerateContent?alt=sse``): IR events in, SSE chunks out, event by
event; every chunk parsed by the ``google-genai`` SDK's own types."""

from __future__ import annotations

import orjson
from google.genai import types

from modelgate import ir
from modelgate.formats.gemini.parts import signature_wire
from modelgate.formats.gemini.stream import StreamEncoder
from modelgate.formats.sse import SSEParser


def chunks(data: bytes) -> list[dict[str, object]]:
    """The SSE events of ``data``: data-only events, each one JSON object."""
    events = SSEParser().feed(data)
    assert all(e.event is None for e in events)
    return [orjson.loads(e.data) for e in events]


def sdk(chunk: dict[str, object]) -> types.GenerateContentResponse:
    return types.GenerateContentResponse.model_validate_json(orjson.dumps(chunk))


def run(events: list[ir.Event], *, show_thoughts: bool = False) -> list[bytes]:
    encoder = StreamEncoder(show_thoughts=show_thoughts)
    return [encoder.encode(e) for e in events]


START = ir.Start("r1", "aria-large", ir.Usage(input_tokens=9))
HEAD = {"modelVersion": "aria-large", "responseId": "r1"}


def test_text_stream_event_by_event() -> None:
    out = run(
        [
            START,
            ir.BlockStart(0, "text"),
            ir.TextDelta(0, "Hel"),
            ir.TextDelta(0, ""),
            ir.TextDelta(0, "lo"),
            ir.BlockStop(0),
            ir.Finish(ir.StopReason.END_TURN, ir.Usage(input_tokens=9, output_tokens=2)),
            ir.TextDelta(0, "after the end"),
        ]
    )
    assert out[0] == out[1] == out[3] == out[5] == out[7] == b""
    assert chunks(out[2]) == [
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}, "index": 0}], **HEAD}
    ]
    assert out[2].startswith(b'data: {"candidates":') and out[2].endswith(b"}\n\n")
    final = chunks(out[6])[0]
    assert final == {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": ""}]}, "index": 0, "finishReason": "STOP"}
        ],
        "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 2, "totalTokenCount": 11},
        **HEAD,
    }
    parsed = [sdk(c) for o in out if o for c in chunks(o)]
    assert "".join(p.text or "" for p in parsed) == "Hello"
    assert parsed[-1].candidates and parsed[-1].candidates[0].finish_reason == types.FinishReason.STOP


def test_function_call_arrives_whole_after_its_argument_deltas() -> None:
    out = run(
        [
            START,
            ir.BlockStart(0, "text"),
            ir.TextDelta(0, "Let me check."),
            ir.BlockStop(0),
            ir.BlockStart(1, "tool_use", tool_id="toolu_1", tool_name="get_weather"),
            ir.ToolArgsDelta(1, '{"ci'),
            ir.ToolArgsDelta(1, 'ty": "Par'),
            ir.ToolArgsDelta(1, 'is"}'),
            ir.BlockStop(1),
            ir.BlockStart(2, "tool_use", tool_id="toolu_2", tool_name="now"),
            ir.BlockStop(2),
            ir.Finish(ir.StopReason.TOOL_USE, ir.Usage(input_tokens=9, output_tokens=20)),
        ]
    )
    assert out[5] == out[6] == out[7] == b""  # argument deltas are held
    first = sdk(chunks(out[8])[0])
    assert [(c.id, c.name, c.args) for c in first.function_calls or []] == [
        ("toolu_1", "get_weather", {"city": "Paris"})
    ]
    second = sdk(chunks(out[10])[0])
    assert [(c.id, c.name, c.args) for c in second.function_calls or []] == [("toolu_2", "now", {})]
    final = sdk(chunks(out[11])[0])
    assert final.candidates and final.candidates[0].finish_reason == types.FinishReason.STOP
    assert final.usage_metadata and final.usage_metadata.candidates_token_count == 20


def test_thoughts_stream_only_when_asked_for() -> None:
    events: list[ir.Event] = [
        START,
        ir.BlockStart(0, "thinking"),
        ir.ThinkingDelta(0, "Hmm."),
        ir.SignatureDelta(0, "sig+/="),
        ir.BlockStop(0),
        ir.BlockStart(1, "redacted_thinking", data="opaque"),
        ir.BlockStop(1),
        ir.BlockStart(2, "text"),
        ir.TextDelta(2, "42"),
        ir.BlockStop(2),
        ir.Finish(ir.StopReason.END_TURN, ir.Usage(output_tokens=30, reasoning_tokens=25)),
    ]
    hidden = [c for o in run(events) if o for c in chunks(o)]
    assert [c["candidates"][0]["content"]["parts"] for c in hidden] == [  # type: ignore[index]
        [{"text": "42"}],
        [{"text": ""}],
    ]
    shown = [sdk(c) for o in run(events, show_thoughts=True) if o for c in chunks(o)]
    parts = [
        p
        for s in shown
        if s.candidates and s.candidates[0].content
        for p in s.candidates[0].content.parts or []
    ]
    assert [(p.thought, p.text, p.thought_signature) for p in parts] == [
        (True, "Hmm.", None),
        (True, "", b"sig+/="),
        (None, "42", None),
        (None, "", None),
    ]
    usage = shown[-1].usage_metadata
    assert usage and (usage.thoughts_token_count, usage.candidates_token_count) == (25, 5)
    raw = b"".join(run(events, show_thoughts=True))
    assert signature_wire("sig+/=").encode() in raw


def test_web_search_and_citations_go_to_the_last_chunk() -> None:
    result = ir.WebSearchResult([ir.WebSearchSource("https://a.example", "A")])
    out = run(
        [
            START,
            ir.BlockStart(0, "web_search", tool_id="srv_1"),
            ir.ToolArgsDelta(0, '{"query": "paris weather"}'),
            ir.BlockStop(0),
            ir.BlockStart(1, "web_search_result", tool_id="srv_1", result=result),
            ir.BlockStop(1),
            ir.BlockStart(2, "text"),
            ir.TextDelta(2, "Sunny."),
            ir.CitationDelta(2, ir.Citation("https://b.example", "B")),
            ir.BlockStop(2),
            ir.Finish(ir.StopReason.END_TURN, ir.Usage()),
        ]
    )
    assert [i for i, o in enumerate(out) if o] == [7, 10]  # nothing but the text and the end
    final = sdk(chunks(out[10])[0])
    assert final.candidates
    grounding = final.candidates[0].grounding_metadata
    assert grounding and grounding.web_search_queries == ["paris weather"]
    assert [c.web.uri for c in grounding.grounding_chunks or [] if c.web] == [
        "https://a.example",
        "https://b.example",
    ]


def test_error_ends_the_stream_in_googles_shape() -> None:
    encoder = StreamEncoder(show_thoughts=False)
    encoder.encode(START)
    assert encoder.encode(ir.TextDelta(0, "Hi")).startswith(b"data: ")
    frame = encoder.encode(ir.StreamError("overloaded", "the upstream is busy"))
    # The SDK raises APIError on a chunk that starts with {"error": exactly.
    assert frame.startswith(b'data: {"error":')
    assert chunks(frame) == [
        {"error": {"code": 503, "message": "the upstream is busy", "status": "UNAVAILABLE"}}
    ]
    assert encoder.encode(ir.Finish(ir.StopReason.END_TURN, ir.Usage())) == b""
    assert encoder.completed is None


def test_ping_is_a_blank_line() -> None:
    ping = StreamEncoder(show_thoughts=False).ping()
    assert ping == b"\n" and SSEParser().feed(b'data: {"a":1}\n\n' + ping + ping) == SSEParser().feed(
        b'data: {"a":1}\n\n'
    )
