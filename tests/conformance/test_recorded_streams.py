"""Recorded upstream streams (the codec goldens in tests/formats/golden) played through a real
gateway: the client stream must match the codec-level golden transcript (ids and timestamps
aside), carry the right id prefixes and stop reasons, and the usage record must equal the usage
the upstream reported.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.conformance.conftest import Wired, issue_key, usage_records
from tests.conformance.upstreams import Recorded

GOLDEN = Path(__file__).parent.parent / "formats" / "golden"
GOLDEN_MODEL = b"aria-sonnet-4.6"  # the client model the codec goldens were written with

# case, client format, gateway model (deployed on the replay upstream), client asks usage,
# expected (input, cache read, output) of the usage record, expected status.
CASES = [
    ("msg_text", "chat", "aria-opus-4.8", True, (25, 100, 9), "ok"),
    ("msg_tool", "chat", "aria-opus-4.8", False, (40, 0, 61), "ok"),
    ("msg_error", "chat", "aria-opus-4.8", True, None, "upstream_error_in_band"),
    ("chat_text", "messages", "aria-opus-4.7", False, (25, 100, 9), "ok"),
    ("chat_parallel_tools", "messages", "aria-opus-4.7", False, (80, 0, 44), "ok"),
    ("chat_interleaved_tools", "messages", "aria-opus-4.7", False, (30, 0, 20), "ok"),
    ("chat_error", "messages", "aria-opus-4.7", False, None, "upstream_error_in_band"),
]
_IDS = re.compile(rb'"id":"(chatcmpl-|msg_)[A-Za-z0-9]+"')


def _normalise(stream: bytes, model: bytes) -> bytes:
    stream = re.sub(rb'"created":\d+', b'"created":0', stream).replace(b'"' + model + b'"', b'"MODEL"')
    return _IDS.sub(lambda m: b'"id":"' + m.group(1) + b'ID"', stream)


def _post(wired: Wired, secret: str, fmt: str, model: str, include_usage: bool) -> httpx.Response:
    if fmt == "chat":
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
        }
        if include_usage:
            body["stream_options"] = {"include_usage": True}
        return httpx.post(
            f"{wired.gateway.base_url}/v1/chat/completions",
            json=body,
            headers={"authorization": f"Bearer {secret}"},
        )
    return httpx.post(
        f"{wired.gateway.base_url}/v1/messages",
        json={
            "model": model,
            "max_tokens": 100,
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
        },
        headers={"x-api-key": secret, "anthropic-version": "2023-06-01"},
    )


@pytest.mark.parametrize(("case", "fmt", "model", "include_usage", "usage", "status"), CASES)
def test_recorded_stream_through_the_gateway_matches_the_golden_transcript(
    wired: Wired,
    case: str,
    fmt: str,
    model: str,
    include_usage: bool,
    usage: tuple[int, int, int] | None,
    status: str,
) -> None:
    secret, key_id = issue_key(wired.gateway, "Pro")
    wired.replay.answers.append(Recorded((GOLDEN / "messages_chat" / f"{case}.upstream.sse").read_bytes()))
    response = _post(wired, secret, fmt, model, include_usage)
    assert response.status_code == 200
    expected = (GOLDEN / "messages_chat" / f"{case}.{fmt}.sse").read_bytes()
    assert _normalise(response.content, model.encode()) == _normalise(expected, GOLDEN_MODEL)
    # Ids were minted by the gateway in the client's format.
    prefix = b'"id":"chatcmpl-' if fmt == "chat" else b'"id":"msg_'
    assert prefix in response.content and b"Upstream" not in response.content
    sent = orjson.loads(wired.replay.bodies[-1])
    assert sent["stream"] is True
    if fmt == "messages":  # a Chat upstream is always asked for usage, whatever the client asked
        assert sent["stream_options"] == {"include_usage": True}
    record = usage_records(wired.gateway, key_id)[0]
    assert record.status == status and record.model == model
    if usage is not None:
        assert (record.input_tokens, record.cache_read_tokens, record.output_tokens) == usage


RESPONSES_CASES = [
    ("chat_text", "completed", [], (25, 100, 9)),
    ("chat_parallel_tools", "completed", ["function_call", "function_call"], (80, 0, 44)),
    # reasoning_content from the upstream becomes a reasoning item (summary text).
    ("chat_interleaved_tools", "completed", ["reasoning", "function_call", "function_call"], (30, 0, 20)),
    ("chat_error", "failed", None, None),
]


@pytest.mark.parametrize(("case", "status", "calls", "usage"), RESPONSES_CASES)
def test_recorded_chat_stream_to_a_responses_client(
    wired: Wired, case: str, status: str, calls: list[str] | None, usage: tuple[int, int, int] | None
) -> None:
    secret, key_id = issue_key(wired.gateway, "Nova")
    upstream = (GOLDEN / "responses" / f"{case}.upstream.sse").read_bytes()
    wired.replay.answers.append(Recorded(upstream))
    response = httpx.post(
        f"{wired.gateway.base_url}/v1/responses",
        json={"model": "nova-6-astra", "input": "hi", "stream": True},
        headers={"authorization": f"Bearer {secret}"},
    )
    frames = [f for f in response.text.split("\n\n") if f.strip()]
    events = []
    for frame in frames:
        name, data = frame.split("\n", 1)
        event = orjson.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        events.append(event)
    kinds = [e["type"] for e in events]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert kinds[:2] == ["response.created", "response.in_progress"]
    response_id = events[0]["response"]["id"]
    assert response_id.startswith("resp_")
    terminal = events[-1]
    assert terminal["type"] == f"response.{status}" and terminal["response"]["id"] == response_id
    assert terminal["response"]["model"] == "nova-6-astra"
    record = usage_records(wired.gateway, key_id)[0]
    if calls is None:
        assert kinds[-2] == "error" and record.status == "upstream_error_in_band"
        return
    # Every item is added before its deltas and done before the next one starts.
    added = [i for i, k in enumerate(kinds) if k == "response.output_item.added"]
    done = [i for i, k in enumerate(kinds) if k == "response.output_item.done"]
    assert len(added) == len(done) and all(a < d for a, d in zip(added, done, strict=True))
    assert all(d < a for d, a in zip(done, added[1:], strict=False))
    output = terminal["response"]["output"]
    assert [item["type"] for item in output if item["type"] != "message"] == calls
    upstream_call_ids = re.findall(r'"id":"(call_[A-Za-z0-9]+)"', upstream.decode())
    assert [item["call_id"] for item in output if item["type"] == "function_call"] == upstream_call_ids
    prefixes = {"function_call": "fc_", "message": "msg_", "reasoning": "rs_"}
    assert all(item["id"].startswith(prefixes[item["type"]]) for item in output)
    wire_usage = terminal["response"]["usage"]
    assert usage is not None
    assert (wire_usage["input_tokens"], wire_usage["input_tokens_details"]["cached_tokens"]) == (
        usage[0] + usage[1],
        usage[1],
    )
    assert wire_usage["output_tokens"] == usage[2]
    assert (record.input_tokens, record.cache_read_tokens, record.output_tokens, record.status) == (
        *usage,
        "ok",
    )
