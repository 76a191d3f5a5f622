"""Golden stream transcripts: upstream SSE of one dialect -> IR -> client SSE of the other.

Each ``golden/messages_chat/<case>.upstream.sse`` is fed through the upstream dialect's
``StreamDecoder`` (whole, and in random chunk splits) and the client format's ``StreamEncoder``;
the result must equal ``<case>.<client>.sse`` byte for byte. As the gateway does, the test sets
``Start.id``/``Start.model`` to the client-format id and the client's model; Chat's ``created``
is the only value normalised. Regenerate with ``MODELGATE_REGEN_GOLDEN=1`` and review the diff.
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import orjson
import pytest

from modelgate import ir
from modelgate.formats import CODECS, ClientRequest, FormatName

GOLDEN = Path(__file__).parent / "golden" / "messages_chat"
CLIENT_MODEL = "aria-sonnet-4.6"
CLIENT_IDS = {"chat": "chatcmpl-GOLDEN0000000000000000000000", "messages": "msg_01GOLDEN000000000000000000"}

# (case, upstream dialect, client format, client asked for usage)
CASES: list[tuple[str, FormatName, FormatName, bool]] = [
    ("msg_text", "messages", "chat", True),
    ("msg_tool", "messages", "chat", False),
    ("msg_error", "messages", "chat", True),
    ("chat_text", "chat", "messages", False),
    ("chat_parallel_tools", "chat", "messages", False),
    ("chat_interleaved_tools", "chat", "messages", False),
    ("chat_error", "chat", "messages", False),
]


def translate(
    upstream: FormatName, client: FormatName, include_usage: bool, chunks: list[bytes]
) -> tuple[bytes, list[ir.Event]]:
    decoder = CODECS[upstream].stream_decoder()
    codec = CODECS[client]
    body = {"stream_options": {"include_usage": include_usage}}
    encoder = codec.stream_encoder(ClientRequest(codec, body, CLIENT_MODEL))
    events: list[ir.Event] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    events.extend(decoder.finish())
    out = b""
    for event in events:
        if isinstance(event, ir.Start):
            event.id, event.model = CLIENT_IDS[client], CLIENT_MODEL
        out += encoder.encode(event)
    return re.sub(rb'"created":\d+', b'"created":1700000000', out), events


def random_split(data: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(data)), k=min(len(data) - 1, rng.randint(1, 40))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


@pytest.mark.parametrize(("case", "upstream", "client", "include_usage"), CASES)
def test_golden(case: str, upstream: FormatName, client: FormatName, include_usage: bool) -> None:
    source = (GOLDEN / f"{case}.upstream.sse").read_bytes()
    expected_path = GOLDEN / f"{case}.{client}.sse"
    out, events = translate(upstream, client, include_usage, [source])
    if os.environ.get("MODELGATE_REGEN_GOLDEN"):
        expected_path.write_bytes(out)
    assert out == expected_path.read_bytes()
    # The IR stream obeys its grammar: Start, blocks opened and closed in order, one terminal.
    assert isinstance(events[0], ir.Start | ir.StreamError)
    assert isinstance(events[-1], ir.Finish | ir.StreamError)
    assert sum(isinstance(e, ir.Finish | ir.StreamError) for e in events) == 1
    open_block: int | None = None
    next_index = 0
    for event in events:
        if isinstance(event, ir.BlockStart):
            assert open_block is None and event.index == next_index
            open_block, next_index = event.index, next_index + 1
        elif isinstance(event, ir.BlockStop):
            assert event.index == open_block
            open_block = None
        elif isinstance(event, ir.TextDelta | ir.ToolArgsDelta | ir.ThinkingDelta | ir.SignatureDelta):
            assert event.index == open_block


@pytest.mark.parametrize(("case", "upstream", "client", "include_usage"), CASES)
def test_golden_random_chunk_splits(
    case: str, upstream: FormatName, client: FormatName, include_usage: bool
) -> None:
    source = (GOLDEN / f"{case}.upstream.sse").read_bytes()
    expected = (GOLDEN / f"{case}.{client}.sse").read_bytes()
    rng = random.Random(case)
    for _ in range(50):
        assert translate(upstream, client, include_usage, random_split(source, rng))[0] == expected
    # CRLF line endings from the upstream change nothing.
    crlf = source.replace(b"\n", b"\r\n")
    assert translate(upstream, client, include_usage, random_split(crlf, rng))[0] == expected


# ---------------------------------------------------------------------------------------------
# The official SDKs as judges of the expected client transcripts
# ---------------------------------------------------------------------------------------------


def _transport(body: bytes) -> httpx2.Client:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})

    return httpx2.Client(transport=httpx2.MockTransport(handler))


def _anthropic_final(body: bytes) -> anthropic.types.Message:
    client = anthropic.Anthropic(api_key="k", base_url="http://gw", http_client=_transport(body))
    user: Any = [{"role": "user", "content": "x"}]
    with client.messages.stream(model=CLIENT_MODEL, max_tokens=100, messages=user) as s:
        return s.get_final_message()


def _openai_chunks(body: bytes, include_usage: bool) -> list[Any]:
    client = openai.OpenAI(api_key="k", base_url="http://gw/v1", http_client=_transport(body))
    options: Any = {"include_usage": True} if include_usage else openai.omit
    stream = client.chat.completions.create(
        model=CLIENT_MODEL, messages=[{"role": "user", "content": "x"}], stream=True, stream_options=options
    )
    return list(stream)


def test_sdk_reads_chat_text() -> None:
    chunks = _openai_chunks((GOLDEN / "msg_text.chat.sse").read_bytes(), include_usage=True)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == 'Hello, "world" — ünïcødé!\n'
    assert {c.id for c in chunks} == {CLIENT_IDS["chat"]}
    assert chunks[-2].choices[0].finish_reason == "stop"
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (125, 9, 134)
    assert usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens == 100


def test_sdk_accumulates_chat_tool_calls() -> None:
    body = (GOLDEN / "msg_tool.chat.sse").read_bytes()
    client = openai.OpenAI(api_key="k", base_url="http://gw/v1", http_client=_transport(body))
    with client.chat.completions.stream(model=CLIENT_MODEL, messages=[{"role": "user", "content": "x"}]) as s:
        final = s.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me run that."
    calls = choice.message.tool_calls or []
    assert [(c.id, c.function.name, orjson.loads(c.function.arguments)) for c in calls] == [
        ("toolu_01A09q90qw90lq917835lq9", "Bash", {"command": "echo hi"}),
        ("toolu_01B", "Read", {"path": "/tmp/x"}),
    ]
    assert final.usage is None  # the client did not ask for usage


def test_sdk_raises_on_chat_error_chunk() -> None:
    body = (GOLDEN / "msg_error.chat.sse").read_bytes()
    assert b"[DONE]" not in body
    with pytest.raises(openai.APIError, match="Overloaded"):
        _openai_chunks(body, include_usage=True)


def test_sdk_reads_messages_text() -> None:
    message = _anthropic_final((GOLDEN / "chat_text.messages.sse").read_bytes())
    assert message.id == CLIENT_IDS["messages"] and message.model == CLIENT_MODEL
    assert [b.type for b in message.content] == ["text"]
    text = message.content[0]
    assert text.type == "text" and text.text == 'Hello, "world" — ünïcødé!\n'
    assert message.stop_reason == "end_turn"
    usage = message.usage
    assert (usage.input_tokens, usage.cache_read_input_tokens, usage.output_tokens) == (25, 100, 9)


@pytest.mark.parametrize("case", ["chat_parallel_tools", "chat_interleaved_tools"])
def test_sdk_reads_messages_parallel_tools(case: str) -> None:
    message = _anthropic_final((GOLDEN / f"{case}.messages.sse").read_bytes())
    assert message.stop_reason == "tool_use"
    tools = [(b.id, b.input) for b in message.content if b.type == "tool_use"]
    if case == "chat_parallel_tools":
        assert [b.type for b in message.content] == ["text", "tool_use", "tool_use"]
        assert tools == [("call_Paris", {"city": "Paris"}), ("call_Tokyo", {"city": "Tokyo"})]
        assert message.usage.output_tokens == 44
    else:
        assert [b.type for b in message.content] == ["thinking", "tool_use", "tool_use"]
        assert tools == [("call_A", {"q": "a"}), ("call_B", {"q": "b"})]
        assert (message.usage.input_tokens, message.usage.output_tokens) == (30, 20)


def test_sdk_raises_on_messages_error_event() -> None:
    body = (GOLDEN / "chat_error.messages.sse").read_bytes()
    with pytest.raises(anthropic.APIStatusError, match="overloaded"):
        _anthropic_final(body)
