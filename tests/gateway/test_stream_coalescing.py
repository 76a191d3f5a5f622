"""Events an upstream delivers together leave the gateway together: a stream whose 50 events
arrive in one write is relayed in one or two writes (HTTP chunks), not fifty."""

from __future__ import annotations

import socket
from pathlib import Path

import orjson

from tests.fakes.raw_upstream import raw_upstream
from tests.gateway_server import running_gateway
from tests.resilience.harness import ENV, openai_provider

EVENTS = 50


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


def _stream() -> bytes:
    """A Chat Completions stream, one HTTP chunk per event, as one byte string."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-up"}
    events = [
        {**base, "choices": [{"index": 0, "delta": {"content": f"w{i:04d} "}, "finish_reason": None}]}
        for i in range(EVENTS)
    ]
    events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    events.append(
        {
            **base,
            "choices": [],
            "usage": {"prompt_tokens": 5, "completion_tokens": EVENTS, "total_tokens": 55},
        }
    )
    body = b"".join(_chunk(b"data: " + orjson.dumps(e) + b"\n\n") for e in events)
    body += _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    return head + body


def _read_chunks(sock: socket.socket) -> list[bytes]:
    """The HTTP chunks of a chunked response, in order (the head is skipped)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    data = data.partition(b"\r\n\r\n")[2]
    chunks: list[bytes] = []
    while True:
        while b"\r\n" not in data:
            data += sock.recv(65536)
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line, 16)
        while len(data) < size + 2:
            data += sock.recv(65536)
        if size == 0:
            return chunks
        chunks.append(data[:size])
        data = data[size + 2 :]


def test_events_that_arrive_together_leave_in_one_write(tmp_path: Path) -> None:
    with (
        raw_upstream(lambda _: _stream()) as upstream,  # the whole stream in one write
        running_gateway(
            tmp_path / "data",
            env=ENV,
            providers=[openai_provider("oai", upstream)],
            deployments={"nova-5.5": [{"provider": "oai", "upstream_model": "gpt-up"}]},
            default_provider="",
            unrouted="hide",
        ) as gateway,
    ):
        secret = gateway.key(gateway.account("acme"), "Nova", rpm=1000).secret
        body = orjson.dumps(
            {
                "model": "nova-5.5",
                "max_tokens": 100,
                "stream": True,
                "messages": [{"role": "user", "content": "hi"}],
            }
        )
        request = (
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            + f"authorization: Bearer {secret}\r\ncontent-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as sock:
            sock.sendall(request)
            chunks = _read_chunks(sock)
    relayed = b"".join(chunks)
    assert relayed.count(b'"content":"w') == EVENTS and relayed.endswith(b"data: [DONE]\n\n")
    assert b'"model":"nova-5.5"' in relayed and b"gpt-up" not in relayed
    # 53 events, one upstream write: the gateway wrote them in at most two (the first event may
    # leave alone, to mark the time to first token).
    assert len(chunks) <= 2, [len(c) for c in chunks]
    print(f"{len(chunks)} write(s) for {EVENTS + 3} events")
