"""A served request leaves no reference cycle behind: what it held (its exchange, hold, records,
the server's request cycle and scope) is freed by reference counting as it ends, not left for the
garbage collector, whose collections of such leftovers paused the serving loop for milliseconds."""

from __future__ import annotations

import asyncio
import gc
import socket
from pathlib import Path

import orjson
import pytest

from tests.gateway_server import GatewayServer, running_gateway

#: Objects that exist once per request: none may be found in a cycle after requests ended.
PER_REQUEST = {
    "Exchange",
    "Admitted",
    "Hold",
    "RequestRecord",
    "DisconnectWatch",
    "StreamResponse",
    "RequestResponseCycle",
    "Request",
}
REQUESTS = {
    "chat": (
        "/v1/chat/completions",
        "Nova",
        {"model": "nova-5.5", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "messages": (
        "/v1/messages",
        "Pro",
        {"model": "aria-haiku-4.5", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "responses": ("/v1/responses", "Nova", {"model": "nova-5.5", "max_output_tokens": 16, "input": "hi"}),
}


def _send(port: int, path: str, secret: str, body: dict[str, object]) -> bytes:
    """One request on its own connection (closed by the server after the answer), read to the
    end; a plain socket makes no cycles of its own."""
    payload = orjson.dumps(body)
    head = (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {secret}\r\n"
        f"x-api-key: {secret}\r\nanthropic-version: 2023-06-01\r\ncontent-type: application/json\r\n"
        f"content-length: {len(payload)}\r\nconnection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode() + payload)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


def _leftovers(gateway: GatewayServer, path: str, secret: str, body: dict[str, object]) -> list[str]:
    for _ in range(2):  # warm: first-use caches are not the request's
        assert _send(gateway.port, path, secret, body).startswith(b"HTTP/1.1 200")
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(10):
            assert _send(gateway.port, path, secret, body).startswith(b"HTTP/1.1 200")
        gateway.call(asyncio.sleep(0.05))  # the requests' last steps after their answers
        gc.collect()
        return sorted(type(o).__qualname__ for o in gc.garbage if type(o).__qualname__ in PER_REQUEST)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("fmt", sorted(REQUESTS))
def test_a_served_request_leaves_no_cycle_behind(tmp_path: Path, fmt: str, stream: bool) -> None:
    path, group, body = REQUESTS[fmt]
    with running_gateway(tmp_path / "data") as gateway:
        secret = gateway.key(gateway.account("a", credits=100), group, rpm=100_000).secret
        assert _leftovers(gateway, path, secret, {**body, "stream": stream}) == []
