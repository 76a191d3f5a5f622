"""A whole response written below ASGI (``server.whole_reply``) is byte for byte what uvicorn's
own ``send`` writes for it, ends the same way (keep-alive, ``connection: close``, pipelined
requests answered in order), and leaves what it cannot write to ASGI (HEAD, a stream).

A real uvicorn server (httptools, as the gateway runs it) serves one response two ways: ``/fast``
through ``send_response``, ``/asgi`` through starlette's ``Response.__call__``; the raw bytes of
both answers are compared with the ``date`` header (a clock) blanked."""

from __future__ import annotations

import asyncio
import re
import socket
import time
from collections.abc import Iterator

import pytest
import uvicorn
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from modelgate.server.whole_reply import written_whole
from tests.hardening.wire import connect
from tests.loop_thread import LoopThread
from tests.ports import free_port

_DATE = re.compile(rb"\r\ndate: [^\r]*")


def _answer(path: str) -> Response:
    if path.endswith("/closing"):
        return Response(b'{"bye":true}', media_type="application/json", headers={"connection": "close"})
    if path.endswith("/refused"):
        return Response(b'{"error":"slow down"}', status_code=429, headers={"retry-after": "3"})
    if path.endswith("/stream"):
        return StreamingResponse(iter([b"data: 1\n\n", b"data: 2\n\n"]), media_type="text/event-stream")
    if path.endswith("/empty"):
        return Response(status_code=204)
    return Response(
        b'{"ok":true}',
        media_type="application/json",
        headers={"request-id": "req_1", "ratelimit": "rpm;r=9;t=60"},
    )


#: Paths whose answer was written below ASGI, in the order served.
WRITTEN: list[str] = []


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    response = _answer(scope["path"])
    if scope["path"].startswith("/fast") and written_whole(response, send):
        WRITTEN.append(scope["path"])
        return
    await response(scope, receive, send)


class _Server:
    def __init__(self, port: int) -> None:
        config = uvicorn.Config(
            _app,
            host="127.0.0.1",
            port=port,
            http="httptools",
            lifespan="off",
            log_level="warning",
            access_log=False,  # as the gateway runs (its own request log instead)
        )
        self.server = uvicorn.Server(config)

    async def start(self) -> None:
        self.task = asyncio.ensure_future(self.server.serve())
        while not self.server.started:
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self.server.should_exit = True
        await self.task


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    chosen = free_port()
    with LoopThread("whole-reply") as thread:
        thread.start(_Server(chosen))
        yield chosen


def _exchange(port: int, request: bytes) -> tuple[bytes, bool]:
    """Everything the server writes for ``request`` until it closes or falls silent, and whether
    it closed."""
    sock = connect(port)
    try:
        sock.sendall(request)
        data, closed = b"", False
        sock.settimeout(0.5)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                closed = True
                break
            data += chunk
        return _DATE.sub(b"\r\ndate: -", data), closed
    finally:
        sock.close()


def _get(path: str, *, method: str = "GET", extra: str = "") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nhost: test\r\n{extra}\r\n".encode()


@pytest.mark.parametrize("path", ["/ok", "/refused", "/closing"])
@pytest.mark.parametrize("extra", ["", "connection: close\r\n"])
def test_the_same_bytes_and_end_as_uvicorns_send(port: int, path: str, extra: str) -> None:
    WRITTEN.clear()
    fast = _exchange(port, _get("/fast" + path, extra=extra))
    asgi = _exchange(port, _get("/asgi" + path, extra=extra))
    assert ["/fast" + path] == WRITTEN  # below ASGI, and the same as through it
    assert fast[0].startswith(b"HTTP/1.1 ")
    assert fast == asgi
    assert fast[1] is (bool(extra) or path == "/closing")


@pytest.mark.parametrize("path", ["/stream", "/empty"])
def test_what_it_does_not_write_goes_through_asgi_unchanged(port: int, path: str) -> None:
    WRITTEN.clear()
    assert _exchange(port, _get("/fast" + path)) == _exchange(port, _get("/asgi" + path))
    assert WRITTEN == []


def test_a_head_request_is_answered_by_uvicorn_without_a_body(port: int) -> None:
    WRITTEN.clear()
    fast, _ = _exchange(port, _get("/fast/ok", method="HEAD"))
    asgi, _ = _exchange(port, _get("/asgi/ok", method="HEAD"))
    assert WRITTEN == []
    assert fast == asgi
    assert fast.endswith(b"\r\n\r\n")  # the head alone


def test_pipelined_requests_are_answered_in_order_on_one_connection(port: int) -> None:
    WRITTEN.clear()
    requests = _get("/fast/ok") + _get("/fast/refused") + _get("/fast/ok")
    data, closed = _exchange(port, requests)
    assert WRITTEN == ["/fast/ok", "/fast/refused", "/fast/ok"]
    assert not closed
    statuses = re.findall(rb"HTTP/1\.1 (\d+)", data)
    assert statuses == [b"200", b"429", b"200"]
    assert data.count(b'{"ok":true}') == 2


def test_a_kept_alive_connection_serves_the_next_request(port: int) -> None:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        for _ in range(3):
            sock.sendall(_get("/fast/ok"))
            data = b""
            while not data.endswith(b'{"ok":true}'):
                chunk = sock.recv(65536)
                assert chunk, "closed while kept alive"
                data += chunk
            assert data.startswith(b"HTTP/1.1 200 OK\r\n")
    finally:
        sock.close()
