"""Hostile upstream replies through a real gateway: whatever bytes an upstream answers with instead
of a usable answer, the client gets a 502 in its endpoint's wire format (a stream whose upstream
head said 200: an in-band error event), no output is charged (a 502 nothing at all), and the
gateway goes on serving."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson

from modelgate.clock import month_of
from tests.fakes.raw_upstream import raw_upstream
from tests.gateway_server import running_gateway
from tests.resilience.harness import ENV, QUICK_ROUTING, openai_provider

GOOD = (
    b'{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-up","choices":[{"index":0,'
    b'"message":{"role":"assistant","content":"fine"},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}'
)

#: Each answered to one connection, which is then closed.
HOSTILE: dict[str, bytes] = {
    "not http": b"SSH-2.0-OpenSSH_9.6\r\n",
    "bad status line": b"HTTP/1.1 two hundred OK\r\n\r\n",
    "unknown version": b"HTTP/7.0 200 OK\r\ncontent-length: 2\r\n\r\n{}",
    "nul in a header": b"HTTP/1.1 200 OK\r\nx-a: b\x00c\r\ncontent-length: 2\r\n\r\n{}",
    "space before a colon": b"HTTP/1.1 200 OK\r\ncontent-length : 2\r\n\r\n{}",
    "two lengths": b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 9\r\n\r\n{}",
    "negative length": b"HTTP/1.1 200 OK\r\ncontent-length: -5\r\n\r\n{}",
    "length and chunked": b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    "bad chunk size": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    "truncated head": b"HTTP/1.1 200 OK\r\ncontent-le",
    "truncated body": b'HTTP/1.1 200 OK\r\ncontent-length: 500\r\n\r\n{"id":',
    "endless head": b"HTTP/1.1 200 OK\r\nx-pad: " + b"a" * 200_000,
    "upgrade": b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n",
    "1xx forever": b"HTTP/1.1 100 Continue\r\n\r\n" * 5000,
    "not json": b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 5\r\n\r\n<html",
    "empty": b"",
}


GOOD_REPLY = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    + b"content-length: %d\r\nconnection: close\r\n\r\n" % len(GOOD)
    + GOOD
)


def answer_for(body: bytes) -> bytes:
    """The bytes of the HOSTILE case a request's prompt names (``case <name>``), else a good answer."""
    return next((a for name, a in HOSTILE.items() if f'case {name}"'.encode() in body), GOOD_REPLY)


def test_hostile_upstream_replies_are_a_502_in_format_and_charge_no_output(tmp_path: Path) -> None:
    names = list(HOSTILE)
    routing = {**QUICK_ROUTING, "failures_to_cooldown": 1_000_000}
    with (
        raw_upstream(answer_for) as upstream,
        running_gateway(
            tmp_path / "data",
            env=ENV,
            providers=[openai_provider("hostile", upstream)],
            deployments={"nova-5.5": [{"provider": "hostile", "upstream_model": "gpt-up"}]},
            default_provider="",
            unrouted="hide",
            routing=routing,
        ) as gateway,
    ):
        account = gateway.account("acme")
        secret = gateway.key(account, "Nova", rpm=100_000).secret
        headers = {"authorization": f"Bearer {secret}"}

        def asking(content: str) -> dict[str, Any]:
            return {"model": "nova-5.5", "max_tokens": 16, "messages": [{"role": "user", "content": content}]}

        in_band: set[str] = set()  # request ids of streams ended by an in-band error
        with httpx.Client(base_url=gateway.base_url, headers=headers, timeout=30) as client:
            for name in names:
                for stream in (False, True):
                    answer = client.post(
                        "/v1/chat/completions", json=asking(f"case {name}") | {"stream": stream}
                    )
                    if stream and answer.status_code == 200:
                        # The head said 200 and the body broke before any event: the stream ends
                        # at once with an in-band error event (upstreams.md), no content.
                        events = [line for line in answer.text.split("\n") if line.startswith("data: ")]
                        assert len(events) == 1, (name, answer.text)
                        error = orjson.loads(events[0].removeprefix("data: "))["error"]
                        in_band.add(answer.headers["request-id"])
                    else:
                        assert answer.status_code == 502, (name, stream, answer.status_code, answer.text)
                        error = answer.json()["error"]
                    assert (error["type"], error["code"]) == ("server_error", "upstream_error"), name
                    assert "127.0.0.1" not in error["message"], error
            # Still serving: the next connection answers well.
            good = client.post("/v1/chat/completions", json=asking("hi"))
            assert good.status_code == 200 and good.json()["choices"][0]["message"]["content"] == "fine"
        month = month_of(gateway.services.clock.time())
        records = gateway.call(gateway.services.usage.usage_records(month, limit=10_000))
    assert len(records) == 2 * len(names) + 1
    hostile = [r for r in records if r.request_id != good.headers["request-id"]]
    # A 502 is never charged. A stream the upstream accepted (200) and then broke is charged its
    # input alone, estimated from the prompt, as any stream failed mid-way (upstreams.md).
    assert all(r.charged_uc == 0 for r in hostile if r.request_id not in in_band)
    assert all(
        r.status == "upstream_failed_mid_stream" and r.output_tokens == 0 and r.input_tokens <= 8
        for r in hostile
        if r.request_id in in_band
    )
