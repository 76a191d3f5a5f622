"""An upstream's in-band stream error may quote our upstream credential or address; the client
never sees either, on the passthrough path or the translated one."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

import httpx
import orjson

from tests.conformance.conftest import UPSTREAM_KEY, Wired, issue_key
from tests.conformance.upstreams import Recorded

START = {
    "type": "message_start",
    "message": {"id": "msg_up", "type": "message", "role": "assistant", "model": "claude-opus-4-8", "content": [],
                "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 1}},
}  # fmt: skip
ASK = {
    "model": "aria-opus-4.8",
    "max_tokens": 50,
    "stream": True,
    "messages": [{"role": "user", "content": "hi"}],
}


def _sse(event: str, data: Mapping[str, object]) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def test_passthrough_in_band_error_is_scrubbed(wired: Wired) -> None:
    host = urlsplit(wired.replay.base_url).netloc
    leak = f"invalid x-api-key {UPSTREAM_KEY} for {wired.replay.base_url}/v1/messages ({host})"
    wired.replay.answers.append(
        Recorded(
            _sse("message_start", START)
            + _sse("error", {"type": "error", "error": {"type": "api_error", "message": leak}})
        )
    )
    key, _ = issue_key(wired.gateway, "Basic")
    with httpx.stream("POST", f"{wired.gateway.base_url}/v1/messages", json=ASK,
                      headers={"x-api-key": key, "anthropic-version": "2023-06-01"}) as response:  # fmt: skip
        body = response.read()
    assert b"event: error" in body and b"[redacted]" in body
    assert UPSTREAM_KEY.encode() not in body and host.encode() not in body


def test_translated_in_band_error_is_scrubbed(wired: Wired) -> None:
    host = urlsplit(wired.replay.base_url).netloc
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "llama-replay",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "finish_reason": None}]}  # fmt: skip
    error = {
        "error": {"message": f"backend {wired.replay.base_url} ({host}) crashed", "type": "server_error"}
    }
    wired.replay.answers.append(
        Recorded(b"data: " + orjson.dumps(chunk) + b"\n\ndata: " + orjson.dumps(error) + b"\n\n")
    )
    key, _ = issue_key(wired.gateway, "Basic")
    ask = {**ASK, "model": "aria-opus-4.7"}  # routed to an openai-compatible upstream: translated
    with httpx.stream("POST", f"{wired.gateway.base_url}/v1/messages", json=ask,
                      headers={"x-api-key": key, "anthropic-version": "2023-06-01"}) as response:  # fmt: skip
        body = response.read()
    assert b"event: error" in body and b"crashed" in body
    assert host.encode() not in body


def test_an_escaped_credential_in_an_error_event_is_scrubbed_after_decoding(wired: Wired) -> None:
    """JSON escapes (``\\u0073k-…``) cannot smuggle the key past the scrubber: the client's parser
    would decode them, so the gateway decodes before it scrubs (issue #11)."""
    escaped = "".join(f"\\u{ord(c):04x}" for c in UPSTREAM_KEY)
    event = (
        b'event: error\ndata: {"type":"error","error":{"type":"api_error","message":"bad key '
        + escaped.encode()
        + b'"}}\n\n'
    )
    wired.replay.answers.append(Recorded(_sse("message_start", START) + event))
    key, _ = issue_key(wired.gateway, "Basic")
    with httpx.stream("POST", f"{wired.gateway.base_url}/v1/messages", json=ASK,
                      headers={"x-api-key": key, "anthropic-version": "2023-06-01"}) as response:  # fmt: skip
        body = response.read()
    errors = [
        orjson.loads(block.split(b"data: ", 1)[1])
        for block in body.split(b"\n\n")
        if b"event: error" in block
    ]
    assert errors and all(UPSTREAM_KEY not in orjson.dumps(e).decode() for e in errors)
    assert "[redacted]" in errors[0]["error"]["message"]
