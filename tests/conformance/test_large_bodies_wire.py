"""Large bodies (above ``server.offload_body_bytes``) on the wire: passthrough delivers the
client's bytes with only the model spliced in (from the spans the body worker found, escapes and
spacing kept), and translation delivers the whole conversation in the upstream's dialect."""

from __future__ import annotations

import httpx
import orjson

from tests.conformance.conftest import Wired, issue_key

MIB = 1 << 20
# Escaped control characters, quotes, backslashes and brackets inside strings, and a nested
# "model" key: none of them may move the top-level splice.
LINE = 'line {"model": [1]} \u001b[0m \\ "q" \u00e9\n'


def _raw(model: str, text: str) -> bytes:
    tools = b'[{"name":"Task","input_schema":{"type":"object","properties":{"model":{"type":"string"}}}}]'
    messages = orjson.dumps([{"role": "user", "content": text}])
    return (
        b'{ "tools" : ' + tools + b', "messages":' + messages
        + b',\n "\\u006dodel" : "' + model.encode() + b'", "max_tokens": 64 }'
    )  # fmt: skip


def test_large_passthrough_body_reaches_the_upstream_byte_exact(wired: Wired) -> None:
    secret, _ = issue_key(wired.gateway, "Pro")
    raw = _raw("aria-haiku-4.5", LINE * (2 * MIB // len(LINE)))
    jobs = wired.gateway.services.offload.jobs
    response = httpx.post(
        f"{wired.gateway.base_url}/v1/messages",
        content=raw,
        headers={"x-api-key": secret, "anthropic-version": "2023-06-01", "content-type": "application/json"},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    assert wired.gateway.services.offload.jobs > jobs
    sent = wired.fake.requests[-1]
    assert sent.body == raw.replace(b'"aria-haiku-4.5"', b'"claude-haiku-4-5"')


def test_large_body_translated_to_chat_carries_the_whole_conversation(wired: Wired) -> None:
    secret, _ = issue_key(wired.gateway, "Pro")
    text = LINE * (2 * MIB // len(LINE))
    response = httpx.post(
        f"{wired.gateway.base_url}/v1/messages",
        content=_raw("aria-sonnet-4.6", text),
        headers={"x-api-key": secret, "anthropic-version": "2023-06-01", "content-type": "application/json"},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    sent = wired.fake.requests[-1]
    assert sent.path == "/v1/chat/completions"
    body = sent.json()
    assert body["model"] == "llama-3.3-70b"
    assert body["messages"][-1] == {"role": "user", "content": text}
