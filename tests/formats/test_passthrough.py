"""The passthrough taps' one-event fast path (in ``PassthroughTap.feed``) against the general path.

A chunk holding exactly one whole LF-framed event (the usual chunk of a paced stream) is relayed
without being split into blocks; everything else goes the general way (``_relay``). The two must
agree byte for byte and on everything the tap reads: these tests feed the same streams one event
per chunk (fast path) and whole (general path), and the events the fast path must hand over.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from modelgate.billing.estimate import DELTA_ESTIMATOR
from modelgate.formats.chat import tap as chat_tap
from modelgate.formats.messages import tap as messages_tap
from modelgate.formats.passthrough import PassthroughTap
from modelgate.formats.responses import tap as responses_tap

GOLDEN = Path(__file__).parent / "golden"

MakeTap = Callable[[str], PassthroughTap]

TAPS: dict[str, MakeTap] = {
    "chat": lambda upstream: chat_tap.StreamTap(upstream, "nova-5.5", DELTA_ESTIMATOR, strip_usage=True),
    "chat-usage": lambda upstream: chat_tap.StreamTap(upstream, "nova-5.5", DELTA_ESTIMATOR),
    "messages": lambda upstream: messages_tap.StreamTap(upstream, "aria-sonnet-4.6", DELTA_ESTIMATOR),
    "responses": lambda upstream: responses_tap.StreamTap(upstream, "nova-5.5", DELTA_ESTIMATOR),
}

# (golden upstream stream, tap kind, the upstream's model id in it)
STREAMS = [
    ("messages_chat/chat_text.upstream.sse", "chat", "gpt-5.1"),
    ("messages_chat/chat_text.upstream.sse", "chat-usage", "gpt-5.1"),
    ("messages_chat/chat_parallel_tools.upstream.sse", "chat", "gpt-5.1"),
    ("messages_chat/chat_error.upstream.sse", "chat", "gpt-5.1"),
    ("messages_chat/msg_text.upstream.sse", "messages", "claude-sonnet-4-6"),
    ("messages_chat/msg_tool.upstream.sse", "messages", "claude-sonnet-4-6"),
    ("messages_chat/msg_error.upstream.sse", "messages", "claude-sonnet-4-6"),
    ("responses/upstream_text_tool.sse", "responses", "gpt-5.1-codex-up"),
    ("responses/upstream_failed.sse", "responses", "gpt-5.1-codex-up"),
    ("responses/upstream_incomplete.sse", "responses", "gpt-5.1-codex-up"),
]


def state(tap: PassthroughTap) -> tuple[object, ...]:
    return (
        tap.usage,
        tap.stop_reason,
        tap.finished,
        tap.error,
        tap.malformed,
        tap.output_tokens,
        tap.completed,
    )


def run(tap: PassthroughTap, chunks: list[bytes]) -> tuple[bytes, list[bytes]]:
    pieces = [tap.feed(chunk) for chunk in chunks]
    pieces.append(tap.finish())
    return b"".join(pieces), pieces


def events_of(raw: bytes) -> list[bytes]:
    parts = raw.split(b"\n\n")
    return [part + b"\n\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


@pytest.mark.parametrize(("path", "kind", "upstream"), STREAMS)
def test_one_event_per_chunk_equals_the_whole_stream(path: str, kind: str, upstream: str) -> None:
    raw = (GOLDEN / path).read_bytes()
    assert b"\r" not in raw and upstream.encode() in raw
    whole = TAPS[kind](upstream)
    expected, _ = run(whole, [raw])
    per_event = TAPS[kind](upstream)
    out, pieces = run(per_event, events_of(raw))
    assert out == expected
    assert state(per_event) == state(whole)
    # Every event went out as its own piece, in order (none held back, none merged).
    assert [p for p in pieces if p] == [e for e in events_of(expected)]


@pytest.mark.parametrize(
    "event",
    [
        b"data: [DONE]\n\n",
        b"data:[DONE]\n\n",
        b"data:\n\n",
        b"data: \n\n",
        b": keep-alive\n\n",
        b"event: ping\n\n",
        b'data: {"a":\ndata: 1}\n\n',  # two data lines: one JSON value joined
        b'data: {"x": 1}\nid: 7\n\n',  # the data line is not the last
        b'data: {"a":\n1}\n\n',  # "1}" is a field line, not data: the data alone is cut JSON
        b"data: [1\n,2]\n\n",
        b'event: data: x\ndata: {"x": 1}\n\n',
        b'id: 3\ndata: {"x": 1}\n\n',
        b'data: {"x": 1} \n\n',
        b"\n\n",
    ],
)
@pytest.mark.parametrize("kind", sorted(TAPS))
def test_events_the_fast_path_hands_over_are_relayed_as_before(kind: str, event: bytes) -> None:
    """The same event alone (fast path candidate) and after a held partial event's end (general
    path, since something was held) give the same bytes and state."""
    alone = TAPS[kind]("m")
    first = alone.feed(event)
    general = TAPS[kind]("m")
    assert general.feed(event[:1]) == b""  # held: the next chunk goes the general way
    second = general.feed(event[1:])
    assert first == second
    assert state(alone) == state(general)


@pytest.mark.parametrize("kind", sorted(TAPS))
def test_a_malformed_event_alone_stops_the_stream_before_it(kind: str) -> None:
    tap = TAPS[kind]("m")
    assert tap.feed(b'data: {"x": \n\n') == b""
    assert tap.malformed
    assert tap.feed(b'data: {"x": 1}\n\n') == b""  # nothing after the fault is relayed


texts = st.text(max_size=12) | st.sampled_from(['"model":"gpt-5.1"', "\\u0000", "[DONE]", "data: x"])
json_values = st.fixed_dictionaries(
    {"model": st.sampled_from(["gpt-5.1", "m"])},
    optional={
        "type": st.sampled_from(
            ["content_block_delta", "message_start", "message_stop", "response.output_text.delta", "error"]
        ),
        "choices": st.lists(
            st.fixed_dictionaries(
                {"delta": st.fixed_dictionaries({}, optional={"content": texts, "refusal": texts})},
                optional={"finish_reason": st.sampled_from(["stop", "length", None])},
            ),
            max_size=2,
        ),
        "delta": texts | st.fixed_dictionaries({"type": st.just("text_delta"), "text": texts}),
        "usage": st.none() | st.just({"prompt_tokens": 3, "completion_tokens": 2}),
        "sequence_number": st.integers(0, 9),
    },
)


@st.composite
def events(draw: st.DrawFn) -> bytes:
    """One SSE event of any shape an upstream might send, sound or not."""
    data = draw(
        st.one_of(
            json_values.map(orjson.dumps),
            json_values.map(lambda v: orjson.dumps(v, option=orjson.OPT_INDENT_2).replace(b"\n", b" ")),
            st.sampled_from([b"[DONE]", b"", b" ", b'{"cut": ', b"\xff\xfe", b"1", b"[1,2]", b'"s"']),
            st.binary(max_size=8).filter(lambda b: b"\n" not in b and b"\r" not in b),
        )
    )
    space = draw(st.sampled_from([b" ", b""]))
    head = draw(st.sampled_from([b"", b"event: x\n", b": note\n", b"id: 1\n"]))
    tail = draw(st.sampled_from([b"", b"", b"retry: 5\n", b"data: more\n"]))
    return head + b"data:" + space + data + b"\n" + tail + b"\n"


def feed_general(tap: PassthroughTap, chunk: bytes) -> bytes:
    """``PassthroughTap.feed`` without its one-event path: every chunk the general way."""
    if tap.malformed:
        return b""
    out = tap._events.take(chunk)
    return tap._relay(out) if out else b""


@settings(max_examples=300, deadline=None)
@given(stream=st.lists(events(), min_size=1, max_size=8), kind=st.sampled_from(sorted(TAPS)))
def test_any_events_one_per_chunk_relay_as_through_the_general_path(stream: list[bytes], kind: str) -> None:
    fast = TAPS[kind]("gpt-5.1")
    _, fast_pieces = run(fast, stream)
    general = TAPS[kind]("gpt-5.1")
    general_pieces = [feed_general(general, chunk) for chunk in stream] + [general.finish()]
    assert fast_pieces == general_pieces
    assert state(fast) == state(general)


def test_the_fast_path_strips_the_usage_nulls_in_any_spacing() -> None:
    compact = b'data: {"id":"c","model":"gpt-5.1","choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}\n\n'
    spaced = compact.replace(b'"usage":null', b'"usage" : null').replace(b"{", b"{ ")
    for event in (compact, spaced):
        tap = chat_tap.StreamTap("gpt-5.1", "nova-5.5", DELTA_ESTIMATOR, strip_usage=True)
        out = tap.feed(event)
        assert b"usage" not in out and b'"nova-5.5"' in out and b"gpt-5.1" not in out
