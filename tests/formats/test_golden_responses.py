"""Golden transcripts for the Responses stream machines.

* IR events -> client SSE (``encode_*.sse``): ids minted at random are replaced by ``resp_1``,
  ``msg_1``, ``fc_1``, ``rs_1`` … in order of appearance; ``created_at`` is fixed.
* upstream Responses SSE (``upstream_*.sse``, recorded-shape fixtures) -> IR events
  (``upstream_*.events.json``), and the same fixtures through ``StreamTap`` under every split.

Set ``MODELGATE_UPDATE_GOLDEN=1`` to rewrite expected files after an intended change.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import random
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from modelgate import ir
from modelgate.billing.estimate import DELTA_ESTIMATOR, text_tokens
from modelgate.formats.chat import stream as chat_stream
from modelgate.formats.responses import decoder as responses_decoder
from modelgate.formats.responses import encoder as responses_encoder
from modelgate.formats.responses import response as responses_response
from modelgate.formats.responses import tap as responses_tap
from modelgate.formats.sse import SSEParser

GOLDEN = Path(__file__).parent / "golden" / "responses"
UPDATE = os.environ.get("MODELGATE_UPDATE_GOLDEN") == "1"
STREAM_EVENT = TypeAdapter(ResponseStreamEvent)
_MINTED = re.compile(rb"\b(resp|msg|fc|rs)_[0-9a-f]{48}\b")


def _normalise(data: bytes) -> bytes:
    seen: dict[bytes, bytes] = {}
    counters: dict[bytes, int] = {}

    def replace(match: re.Match[bytes]) -> bytes:
        token = match.group(0)
        if token not in seen:
            prefix = match.group(1)
            counters[prefix] = counters.get(prefix, 0) + 1
            seen[token] = prefix + b"_" + str(counters[prefix]).encode()
        return seen[token]

    return _MINTED.sub(replace, data)


def _check(name: str, actual: bytes) -> None:
    path = GOLDEN / name
    if UPDATE or not path.exists():
        path.write_bytes(actual)
        if not UPDATE:
            pytest.fail(f"golden file {name} was missing and has been written; rerun")
    assert actual == path.read_bytes()


REQUEST = ir.Request(
    model="nova-5.5",
    messages=[ir.Message("user", [ir.TextPart("hi")])],
    max_tokens=256,
    tools=[
        ir.Tool(
            "exec_command", "Run a command", {"type": "object", "properties": {"cmd": {"type": "string"}}}
        )
    ],
    stream=True,
)
USAGE = ir.Usage(input_tokens=40, output_tokens=12, cache_read_input_tokens=8)

ENCODE_CASES: dict[str, list[ir.Event]] = {
    "encode_text": [
        ir.Start("resp_golden1", "nova-5.5", ir.Usage(input_tokens=40)),
        ir.BlockStart(0, "text"),
        ir.TextDelta(0, "Hello"),
        ir.TextDelta(0, ", "),
        ir.TextDelta(0, 'wörld "quoted"'),
        ir.BlockStop(0),
        ir.Finish(ir.StopReason.END_TURN, USAGE),
    ],
    "encode_tool_call": [
        ir.Start("resp_golden2", "nova-5.5", ir.Usage(input_tokens=40)),
        ir.BlockStart(0, "thinking"),
        ir.ThinkingDelta(0, "Need to "),
        ir.ThinkingDelta(0, "list files."),
        ir.SignatureDelta(0, "EqQBCkYIBRgC"),
        ir.BlockStop(0),
        ir.BlockStart(1, "text"),
        ir.TextDelta(1, "Running ls."),
        ir.BlockStop(1),
        ir.BlockStart(2, "tool_use", tool_id="toolu_01AbC", tool_name="exec_command"),
        ir.ToolArgsDelta(2, ""),
        ir.ToolArgsDelta(2, '{"cmd": "l'),
        ir.ToolArgsDelta(2, 's"}'),
        ir.BlockStop(2),
        ir.Finish(ir.StopReason.TOOL_USE, USAGE),
    ],
    "encode_incomplete": [
        ir.Start("resp_golden3", "nova-5.5", ir.Usage()),
        ir.BlockStart(0, "redacted_thinking", data="opaque"),
        ir.BlockStop(0),
        ir.BlockStart(1, "thinking"),
        ir.SignatureDelta(1, "sig-only"),
        ir.BlockStop(1),
        ir.BlockStart(2, "text"),
        ir.TextDelta(2, "Once upon a"),
        ir.BlockStop(2),
        ir.Finish(ir.StopReason.MAX_TOKENS, USAGE),
    ],
    "encode_failure": [
        ir.Start("resp_golden4", "nova-5.5", ir.Usage()),
        ir.BlockStart(0, "text"),
        ir.TextDelta(0, "Partial"),
        ir.BlockStop(0),
        ir.BlockStart(1, "text"),
        ir.TextDelta(1, "more"),
        ir.StreamError("upstream_error", "upstream connection reset"),
        ir.TextDelta(1, "ignored after the terminal event"),
        ir.Finish(ir.StopReason.END_TURN, USAGE),
    ],
}


@pytest.mark.parametrize("name", sorted(ENCODE_CASES))
def test_encode_golden(name: str) -> None:
    encoder = responses_encoder.StreamEncoder(REQUEST, created_at=1_700_000_000)
    out = b"".join(encoder.encode(event) for event in ENCODE_CASES[name])
    events = SSEParser().feed(out)
    payloads = [orjson.loads(e.data) for e in events]
    # Every event: event line == type, validates as the SDK's stream event, sequence 0..n-1.
    assert [e.event for e in events] == [p["type"] for p in payloads]
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    for payload in payloads:
        STREAM_EVENT.validate_python(payload)
    terminal = [p["type"] for p in payloads if p["type"].startswith("response.") and "response" in p]
    assert terminal[:2] == ["response.created", "response.in_progress"] and len(terminal) == 3
    # output_index counts emitted items only, without gaps.
    added = [p["output_index"] for p in payloads if p["type"] == "response.output_item.added"]
    assert added == list(range(len(added)))
    _check(name + ".sse", _normalise(out))


def _event_json(event: ir.Event) -> dict[str, Any]:
    return {"event": type(event).__name__, **orjson.loads(orjson.dumps(dataclasses.asdict(event)))}


UPSTREAM = [
    "upstream_text_tool",
    "upstream_incomplete",
    "upstream_failed",
    "upstream_error_event",
    "upstream_truncated",
]


@pytest.mark.parametrize("name", UPSTREAM)
def test_decode_golden(name: str) -> None:
    raw = (GOLDEN / f"{name}.sse").read_bytes()
    decoder = responses_decoder.StreamDecoder()
    events = decoder.feed(raw) + decoder.finish()
    actual = orjson.dumps([_event_json(e) for e in events], option=orjson.OPT_INDENT_2) + b"\n"
    _check(f"{name}.events.json", actual)
    # Byte-at-a-time feeding decodes to the same events.
    slow = responses_decoder.StreamDecoder()
    events_slow = [e for i in range(len(raw)) for e in slow.feed(raw[i : i + 1])] + slow.finish()
    assert events_slow == events


def test_decoder_malformed_json_is_a_stream_error() -> None:
    decoder = responses_decoder.StreamDecoder()
    events = decoder.feed(b"event: response.created\ndata: {not json\n\n")
    assert events == [ir.StreamError("upstream_error", "upstream sent malformed JSON in the stream")]
    assert decoder.feed(b'event: response.completed\ndata: {"type":"response.completed"}\n\n') == []
    assert decoder.finish() == []


def test_encoder_output_decodes_back() -> None:
    """Our own client stream, read by our upstream decoder, gives the IR back (minus thinking sigs)."""
    encoder = responses_encoder.StreamEncoder(REQUEST)
    out = b"".join(encoder.encode(e) for e in ENCODE_CASES["encode_tool_call"])
    decoder = responses_decoder.StreamDecoder()
    events = decoder.feed(out) + decoder.finish()
    assert events[0] == ir.Start("resp_golden2", "nova-5.5", ir.Usage())
    assert events[-1] == ir.Finish(ir.StopReason.TOOL_USE, USAGE)
    assert [type(e).__name__ for e in events[1:-1]] == [
        "BlockStart",
        "ThinkingDelta",
        "ThinkingDelta",
        "BlockStop",
        "BlockStart",
        "TextDelta",
        "BlockStop",
        "BlockStart",
        "ToolArgsDelta",
        "ToolArgsDelta",
        "BlockStop",
    ]
    assert events[8] == ir.BlockStart(2, "tool_use", "toolu_01AbC", "exec_command")


# ---------------------------------------------------------------------------------------------
# StreamTap: same-dialect passthrough
# ---------------------------------------------------------------------------------------------

TAP_EXPECT: dict[str, dict[str, Any]] = {
    "upstream_text_tool": {
        "usage": ir.Usage(
            input_tokens=176, output_tokens=57, cache_read_input_tokens=1024, reasoning_tokens=20
        ),
        "stop_reason": ir.StopReason.TOOL_USE,
        "error": None,
        "next_seq": 22,
    },
    "upstream_incomplete": {
        "usage": ir.Usage(input_tokens=30, output_tokens=4),
        "stop_reason": ir.StopReason.MAX_TOKENS,
        "error": None,
        "next_seq": 9,
    },
    "upstream_failed": {
        "usage": ir.Usage(),
        "stop_reason": None,
        "error": ir.StreamError("rate_limit", "Rate limit reached for requests"),
        "next_seq": 6,
    },
    "upstream_error_event": {
        "usage": None,
        "stop_reason": None,
        "error": ir.StreamError("upstream_error", "The server had an error"),
        "next_seq": 2,
    },
}


def _rewritten(raw: bytes) -> bytes:
    return raw.replace(b'"model":"gpt-5.1-codex-up"', b'"model":"nova-5.5"').replace(
        b'"model": "gpt-5.1-codex-up"', b'"model": "nova-5.5"'
    )


def _relayed_tokens(raw: bytes) -> int:
    """Output tokens of the text and argument deltas in a stream, each delta counted alone (the
    tap's per-delta estimate), read with the SSE parser rather than the tap's byte scan."""
    total = 0
    for event in SSEParser().feed(raw):
        data = orjson.loads(event.data)
        if data.get("type") in ("response.output_text.delta", "response.function_call_arguments.delta"):
            total += text_tokens(data["delta"])
    return total


def _run_tap(raw: bytes, cuts: list[int]) -> tuple[responses_tap.StreamTap, bytes, list[bytes]]:
    tap = responses_tap.StreamTap("gpt-5.1-codex-up", "nova-5.5", DELTA_ESTIMATOR)
    pieces: list[bytes] = []
    bounds = [0, *cuts, len(raw)]
    for start, end in itertools.pairwise(bounds):
        pieces.append(tap.feed(raw[start:end]))
    pieces.append(tap.finish())
    return tap, b"".join(pieces), pieces


@pytest.mark.parametrize("name", sorted(TAP_EXPECT))
def test_tap_every_split(name: str) -> None:
    raw = (GOLDEN / f"{name}.sse").read_bytes()
    expected = _rewritten(raw)
    assert expected != raw and b"gpt-5.1-codex-up" not in expected
    want = TAP_EXPECT[name]
    splits = [[i] for i in range(1, len(raw))]
    rng = random.Random(7)
    splits += [sorted(rng.sample(range(1, len(raw)), 5)) for _ in range(200)]
    splits.append(list(range(1, len(raw))))  # byte at a time
    relayed = _relayed_tokens(raw)
    assert relayed > 0 or name == "upstream_error_event"
    for cuts in splits:
        tap, out, pieces = _run_tap(raw, cuts)
        assert out == expected, cuts
        # Only whole events are forwarded: every non-empty piece ends an event.
        assert all(p.endswith(b"\n\n") for p in pieces if p), cuts
        assert tap.finished
        assert tap.usage == want["usage"] and tap.stop_reason == want["stop_reason"], cuts
        assert tap.error == want["error"] and tap.output_tokens == relayed, cuts
        assert tap.next_sequence_number == want["next_seq"]


def test_tap_truncated_stream() -> None:
    raw = (GOLDEN / "upstream_truncated.sse").read_bytes()
    tap, out, _ = _run_tap(raw, [len(raw) // 2])
    # The cut event is not forwarded (half a JSON would break the client's parser); the stream
    # has no terminal event, so the tap reports an error the gateway turns into an in-band failure.
    cut = raw.rindex(b"\n\n") + 2
    assert out == _rewritten(raw[:cut])
    assert not tap.finished and tap.usage is None
    assert tap.error == ir.StreamError("upstream_error", "upstream stream ended early")
    frame = responses_response.stream_error_frame(
        responses_error(), tap.next_sequence_number, response_id="resp_0a1b2c", model="nova-5.5"
    )
    seqs = [orjson.loads(e.data)["sequence_number"] for e in SSEParser().feed(frame)]
    assert seqs == [16, 17]


def responses_error() -> Any:
    from modelgate import errors

    return errors.UpstreamFailed("upstream stream ended early")


def test_tap_flushes_whole_final_event_without_blank_line() -> None:
    raw = (GOLDEN / "upstream_incomplete.sse").read_bytes()
    tap, out, _ = _run_tap(raw[:-2], [100])
    assert out == _rewritten(raw) and tap.finished and tap.error is None


def test_tap_same_model_and_crlf() -> None:
    raw = (GOLDEN / "upstream_incomplete.sse").read_bytes()
    tap = responses_tap.StreamTap("same", "same", DELTA_ESTIMATOR)
    crlf = raw.replace(b"\n", b"\r\n")
    out = b"".join(tap.feed(crlf[i : i + 7]) for i in range(0, len(crlf), 7)) + tap.finish()
    assert out == raw  # line endings normalised to LF, nothing else touched
    assert tap.stop_reason is ir.StopReason.MAX_TOKENS


def test_tap_text_mentioning_terminal_names() -> None:
    """A delta whose text names a terminal event takes the slow path without false positives."""
    text = 'see "response.completed" and event: error'
    delta = {"type": "response.output_text.delta", "sequence_number": 3, "delta": text}
    chunk = b"event: response.output_text.delta\ndata: " + orjson.dumps(delta) + b"\n\n"
    tap = responses_tap.StreamTap("a", "b", DELTA_ESTIMATOR)
    assert tap.feed(chunk) == chunk
    assert not tap.finished and tap.error is None
    assert tap.output_tokens == text_tokens(text) and tap.next_sequence_number == 4


# ---------------------------------------------------------------------------------------------
# Cross-format: recorded Chat upstream stream -> Responses client stream
# ---------------------------------------------------------------------------------------------

CHAT_CASES = ["chat_text", "chat_parallel_tools", "chat_interleaved_tools", "chat_error"]


@pytest.mark.parametrize("name", CHAT_CASES)
def test_chat_upstream_to_responses_client(name: str) -> None:

    raw = (GOLDEN / f"{name}.upstream.sse").read_bytes()
    decoder = chat_stream.StreamDecoder()
    encoder = responses_encoder.StreamEncoder(REQUEST, created_at=1_700_000_000)
    out = b""
    for start in range(0, len(raw), 37):  # arbitrary network-like chunking
        out += b"".join(encoder.encode(e) for e in decoder.feed(raw[start : start + 37]))
    out += b"".join(encoder.encode(e) for e in decoder.finish())
    payloads = [orjson.loads(e.data) for e in SSEParser().feed(out)]
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    for payload in payloads:
        STREAM_EVENT.validate_python(payload)
    assert payloads[-1]["type"] in ("response.completed", "response.incomplete", "response.failed")
    assert b"chatcmpl-" not in out  # the upstream's id is replaced by a minted resp_ id
    assert all(p["response"]["model"] == "nova-5.5" for p in payloads if "response" in p)
    _check(f"{name}.responses.sse", _normalise(out))
