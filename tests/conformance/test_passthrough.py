"""Same-dialect passthrough fidelity: the client's bytes reach the upstream unchanged apart from
the model id (and usage options), and the upstream's bytes come back unchanged apart from it.

Requests are compared with what the fake upstream recorded, byte for byte. Responses come from
``ReplayUpstream``, which plays a recorded body verbatim, so the client's bytes can be compared
with exactly what the upstream sent.
"""

from __future__ import annotations

import httpx
import orjson

from tests.conformance.conftest import UPSTREAM_KEY, Wired, issue_key, usage_records
from tests.conformance.upstreams import Recorded

# Odd spacing, key order, unicode escapes, unknown fields, betas, thinking with signature,
# redacted thinking, cache_control everywhere, metadata: none of it may be touched.
MESSAGES_REQUEST = (
    b'{ "model" : "aria-haiku-4.5",\n  "max_tokens": 4000, "x_unknown_top": {"nested": [1, 2.50, null]},\n'
    b'  "system": [{"type": "text", "text": "Sys \\u00e9t\\u00e9", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],\n'
    b'  "messages": [\n'
    b'    {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]},\n'
    b'    {"role": "assistant", "content": [\n'
    b'      {"type": "thinking", "thinking": "Let me think\\n", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds=="},\n'
    b'      {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},\n'
    b'      {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {"command": "ls"}, "caller": {"type": "direct"}}]},\n'
    b'    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "a.txt", "is_error": false, "cache_control": {"type": "ephemeral"}}]},\n'
    b'    {"role": "system", "content": "mid-conversation note"}\n'
    b"  ],\n"
    b'  "thinking": {"type": "adaptive", "display": "summarized"}, "output_config": {"effort": "xhigh"},\n'
    b'  "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},\n'
    b'  "metadata": {"user_id": "{\\"device_id\\":\\"d1\\",\\"session_id\\":\\"s1\\"}"},\n'
    b'  "cache_control": {"type": "ephemeral"}, "speed": "fast"\n'
    b"}"
)
BETAS = "interleaved-thinking-2025-05-14,context-management-2025-06-27,some-future-beta-2027-01-01"


def test_messages_request_reaches_the_upstream_byte_for_byte(wired: Wired) -> None:
    secret, _ = issue_key(wired.gateway, "Pro")
    response = httpx.post(
        f"{wired.gateway.base_url}/v1/messages?beta=true",
        content=MESSAGES_REQUEST,
        headers={
            "x-api-key": secret,
            "anthropic-version": "2026-10-21",
            "anthropic-beta": BETAS,
            "content-type": "application/json",
        },
    )
    assert response.status_code == 200, response.text
    sent = wired.fake.requests[-1]
    assert sent.body == MESSAGES_REQUEST.replace(b'"aria-haiku-4.5"', b'"claude-haiku-4-5"', 1)
    assert sent.query == ""  # the client's query string is not the upstream's business
    assert sent.headers["anthropic-beta"] == BETAS and sent.headers["anthropic-version"] == "2026-10-21"
    assert sent.headers["x-api-key"] == UPSTREAM_KEY and secret not in str(sent.headers)
    assert response.json()["model"] == "aria-haiku-4.5"


# A recorded Anthropic reply with thinking, a signature, cache usage and fields we do not know.
MESSAGES_REPLY = (
    b'{"id":"msg_01RecordedReply","type":"message","role":"assistant","model":"claude-opus-4-8",'
    b'"content":[{"type":"thinking","thinking":"Because.","signature":"EqQBsig=="},'
    b'{"type":"redacted_thinking","data":"EmwKAhgB"},{"type":"text","text":"Caf\\u00e9 \\ud83d\\ude00","citations":null}],'
    b'"stop_reason":"end_turn","stop_sequence":null,"stop_details":null,"container":null,'
    b'"usage":{"input_tokens":21,"cache_creation_input_tokens":100,"cache_read_input_tokens":400,'
    b'"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":100},'
    b'"output_tokens":33,"service_tier":"standard","inference_geo":"us","x_future":{"a":1}}}'
)


def test_messages_reply_comes_back_unchanged_apart_from_model(wired: Wired) -> None:
    secret, key_id = issue_key(wired.gateway, "Pro")
    wired.replay.answers.append(Recorded(MESSAGES_REPLY, "application/json"))
    response = httpx.post(
        f"{wired.gateway.base_url}/v1/messages",
        json={"model": "aria-opus-4.8", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-api-key": secret, "anthropic-version": "2023-06-01"},
    )
    assert response.content == MESSAGES_REPLY.replace(b'"claude-opus-4-8"', b'"aria-opus-4.8"')
    record = usage_records(wired.gateway, key_id)[0]
    assert (record.input_tokens, record.output_tokens) == (21, 33)
    assert (record.cache_creation_tokens, record.cache_read_tokens) == (100, 400)


MESSAGES_STREAM = b"".join(
    b"event: " + name + b"\ndata: " + data + b"\n\n"
    for name, data in [
        (
            b"message_start",
            b'{"type":"message_start","message":{"id":"msg_01Rec","type":"message","role":"assistant",'
            b'"model":"claude-opus-4-8","content":[],"stop_reason":null,"stop_sequence":null,'
            b'"usage":{"input_tokens":50,"cache_creation_input_tokens":0,"cache_read_input_tokens":7,"output_tokens":1}}}',
        ),
        (
            b"content_block_start",
            b'{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}',
        ),
        (b"ping", b'{"type":"ping"}'),
        (
            b"content_block_delta",
            b'{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Hmm."}}',
        ),
        (
            b"content_block_delta",
            b'{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBsig=="}}',
        ),
        (b"content_block_stop", b'{"type":"content_block_stop","index":0}'),
        (b"future_event", b'{"type":"future_event","x":1}'),
        (
            b"content_block_start",
            b'{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}',
        ),
        (
            b"content_block_delta",
            b'{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi \\u00e9"}}',
        ),
        (b"content_block_stop", b'{"type":"content_block_stop","index":1}'),
        (
            b"message_delta",
            b'{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},'
            b'"usage":{"output_tokens":12,"input_tokens":50,"cache_read_input_tokens":7}}',
        ),
        (b"message_stop", b'{"type":"message_stop"}'),
    ]
)


def test_messages_stream_comes_back_unchanged_apart_from_model(wired: Wired) -> None:
    secret, key_id = issue_key(wired.gateway, "Pro")
    wired.replay.answers.append(Recorded(MESSAGES_STREAM))
    response = httpx.post(
        f"{wired.gateway.base_url}/v1/messages",
        json={
            "model": "aria-opus-4.8",
            "max_tokens": 100,
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
        },
        headers={"x-api-key": secret, "anthropic-version": "2023-06-01"},
    )
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.content == MESSAGES_STREAM.replace(b'"claude-opus-4-8"', b'"aria-opus-4.8"')
    record = usage_records(wired.gateway, key_id)[0]
    assert (record.input_tokens, record.cache_read_tokens, record.output_tokens, record.status) == (
        50,
        7,
        12,
        "ok",
    )


def test_chat_passthrough_keeps_unknown_fields_and_strips_the_forced_usage_chunk(wired: Wired) -> None:
    secret, key_id = issue_key(wired.gateway, "Nova")
    body = (
        b'{"model":"nova-5.5","messages":[{"role":"user","content":"hi","name":"bob"}],'
        b'"stream":true,"logit_bias":{"50256":-100},"x_vendor":{"k":[true]},"max_completion_tokens":64}'
    )
    response = httpx.post(
        f"{wired.gateway.base_url}/v1/chat/completions",
        content=body,
        headers={"authorization": f"Bearer {secret}", "content-type": "application/json"},
    )
    sent = wired.fake.requests[-1]
    # Only the model and the gateway's own usage option change; the rest is the client's bytes.
    assert (
        sent.body
        == body.replace(b'"nova-5.5"', b'"gpt-5.5-2026"')[:-1] + b',"stream_options":{"include_usage":true}}'
    )
    assert sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    chunks = [orjson.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    assert response.text.endswith("data: [DONE]\n\n")
    assert all(c["choices"] and c.get("usage") is None for c in chunks)
    assert {c["model"] for c in chunks} == {"nova-5.5"}
    record = usage_records(wired.gateway, key_id)[0]
    assert (record.input_tokens, record.output_tokens) == (12, 7)  # learned from the stripped chunk


def test_responses_passthrough_forwards_stateful_and_hosted_fields(wired: Wired) -> None:
    """An ``openai`` upstream keeps Responses state itself: a request that refers only to state
    it holds (a response it answered, an item of it) reaches it byte for byte."""
    secret, _ = issue_key(wired.gateway, "Nova")
    headers = {"authorization": f"Bearer {secret}", "content-type": "application/json"}
    first = httpx.post(
        f"{wired.gateway.base_url}/v1/responses", json={"model": "nova-5.5", "input": "hi"}, headers=headers
    ).json()
    previous, item = first["id"], first["output"][0]["id"]
    body = (
        b'{"model": "nova-5.5", "input": [{"type": "item_reference", "id": "%s"}],'
        b' "previous_response_id": "%s", "store": true, "tools": [{"type": "web_search"},'
        b' {"type": "mcp", "server_label": "x", "server_url": "https://mcp.example"}],'
        b' "include": ["reasoning.encrypted_content"], "max_output_tokens": 100}'
    ) % (item.encode(), previous.encode())
    response = httpx.post(f"{wired.gateway.base_url}/v1/responses", content=body, headers=headers)
    assert response.status_code == 200 and response.json()["model"] == "nova-5.5"
    assert wired.fake.requests[-1].body == body.replace(b'"nova-5.5"', b'"gpt-5.5-2026"')
