"""The HTTP edge as an attacker meets it (issue #11): the key is checked before the body is read,
slow or silent connections are cut with a JSON 408, a connection past the cap gets a JSON 503,
and every refusal the HTTP layer makes (framing, unknown paths, wrong methods, websocket
upgrades) is JSON in the wire format of the path."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.gateway_server import GatewayServer, running_gateway
from tests.hardening.wire import connect, read_reply, request_head

EDGE = {"header_timeout_seconds": 0.3, "body_timeout_seconds": 0.6, "keep_alive_seconds": 1}


@pytest.fixture
def edge(tmp_path: Path) -> Iterator[GatewayServer]:
    with running_gateway(tmp_path / "data", server=EDGE) as server:
        yield server


def messages_headers(key: str, length: int) -> dict[str, str]:
    return {
        "x-api-key": key,
        "anthropic-version": "2023-06-01",
        "content-type": "application/json",
        "content-length": str(length),
    }


def test_a_refused_key_is_answered_before_the_body_is_read(edge: GatewayServer) -> None:
    declared = 31 * 1024 * 1024
    with connect(edge.port) as sock:
        sock.sendall(request_head("POST", "/v1/messages", messages_headers("sk-cs4-wrong", declared)))
        sock.sendall(b"x" * 65536)  # 64 KiB of 31 MiB: the answer must not wait for the rest
        reply = read_reply(sock)
        assert reply.status == 401 and reply.json()["error"]["type"] == "authentication_error"
        assert reply.headers["connection"] == "close" and reply.closed


def test_group_and_version_are_checked_on_the_head(edge: GatewayServer) -> None:
    account = edge.account("acme")
    nova = edge.key(account, "Nova").secret
    basic = edge.key(account, "Basic").secret
    cases = [
        (messages_headers(nova, 10_000_000), 403, "permission_error"),
        (
            {**messages_headers(basic, 10_000_000), "anthropic-version": "1999-01-01"},
            400,
            "invalid_request_error",
        ),
    ]
    for headers, status, kind in cases:
        with connect(edge.port) as sock:
            sock.sendall(request_head("POST", "/v1/messages", headers) + b"{")
            reply = read_reply(sock)
            assert (reply.status, reply.json()["error"]["type"]) == (status, kind)
            assert reply.closed
    assert edge.call(edge.services.ledger_store.pending_reservations()) == 0


def test_a_trickled_head_ends_with_a_json_408(edge: GatewayServer) -> None:
    with connect(edge.port) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n")  # never finished
        reply = read_reply(sock)
        assert reply.status == 408 and reply.closed
        assert reply.json()["error"]["code"] == "request_timeout"
        assert edge.services.edge.head_timeouts >= 1


def test_a_connection_that_says_nothing_is_closed(edge: GatewayServer) -> None:
    with connect(edge.port) as sock:
        reply = read_reply(sock)
        assert reply.status == 408 and reply.closed


def test_a_trickled_body_ends_with_a_json_408_in_the_paths_format(edge: GatewayServer) -> None:
    key = edge.key(edge.account("acme"), "Basic").secret
    with connect(edge.port) as sock:
        sock.sendall(request_head("POST", "/v1/messages", messages_headers(key, 1000)) + b'{"model":')
        reply = read_reply(sock)
        assert reply.status == 408 and reply.closed
        body = reply.json()
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        assert edge.services.edge.body_timeouts == 1
        assert edge.call(edge.services.ledger_store.pending_reservations()) == 0


def test_a_trickled_body_on_an_admin_path_ends_with_a_408_in_the_admin_shape(edge: GatewayServer) -> None:
    # The HTTP layer asks the route table how a refusal on the path reads: the admin shape here.
    token = edge.call(edge.management.create_admin_token(None))
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    with connect(edge.port) as sock:
        sock.sendall(request_head("POST", "/admin/api/accounts", {**headers, "content-length": "100"}) + b"{")
        reply = read_reply(sock)
        assert reply.status == 408 and reply.closed
        assert reply.headers["cache-control"] == "no-store" and reply.headers["x-request-id"]
        error = reply.json()["error"]
        assert set(error) == {"type", "message"} and "did not arrive in time" in error["message"]
        assert edge.services.edge.body_timeouts == 1


def test_the_connection_cap_refuses_in_json_and_recovers(tmp_path: Path) -> None:
    with running_gateway(
        tmp_path / "data",
        server={"max_connections": 4, "header_timeout_seconds": 30, "keep_alive_seconds": 30},
    ) as gw:
        with ExitStack() as connections:
            held = [connections.enter_context(connect(gw.port)) for _ in range(4)]
            for sock in held:  # the server has accepted each of them before the next one is tried
                sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
                assert read_reply_keep_alive(sock) == 200
            extra = connections.enter_context(connect(gw.port))
            reply = read_reply(extra)
            assert reply.status == 503 and reply.closed and reply.headers["retry-after"] == "1"
            assert reply.json()["error"]["code"] == "service_unavailable"
            assert gw.services.edge.connections_refused == 1
        assert httpx.get(f"{gw.base_url}/healthz").status_code == 200


@pytest.mark.parametrize(
    ("raw", "fmt"),
    [
        (b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: nope\r\n\r\n", "openai"),
        (b"GARBAGE\r\n\r\n", "openai"),
        (
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            "openai",
        ),
    ],
)
def test_broken_framing_is_a_json_400(edge: GatewayServer, raw: bytes, fmt: str) -> None:
    with connect(edge.port) as sock:
        sock.sendall(raw)
        reply = read_reply(sock)
        assert reply.status == 400 and reply.closed
        assert reply.headers["content-type"] == "application/json"
        assert reply.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("method", "path", "status", "shape"),
    [
        ("OPTIONS", "/v1/messages", 405, "messages"),
        ("GET", "/v1/messages", 405, "messages"),
        ("DELETE", "/v1/messages/count_tokens", 405, "messages"),
        ("GET", "/v1/chat/completions", 405, "openai"),
        ("PUT", "/v1/responses", 405, "openai"),
        ("GET", "/v1/nope", 404, "openai"),
        ("GET", "/nope", 404, "openai"),
        ("POST", "/healthz", 405, "openai"),
        ("GET", "/admin/apix", 404, "openai"),
    ],
)
def test_unknown_paths_and_methods_answer_json(
    edge: GatewayServer, method: str, path: str, status: int, shape: str
) -> None:
    response = httpx.request(method, edge.base_url + path)
    assert response.status_code == status and response.headers["content-type"] == "application/json"
    body = response.json()
    if shape == "messages":
        assert body["type"] == "error" and "type" in body["error"]
    else:
        assert set(body["error"]) >= {"message", "type", "code"}
    if status == 405:
        assert response.headers["allow"]


def test_a_websocket_upgrade_off_its_path_is_a_json_404(edge: GatewayServer) -> None:
    with connect(edge.port) as sock:
        headers = {
            "connection": "Upgrade",
            "upgrade": "websocket",
            "sec-websocket-version": "13",
            "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
        }
        sock.sendall(request_head("GET", "/v1/chat/completions", headers))
        reply = read_reply(sock)
        assert reply.status == 404 and "WebSocket" in reply.json()["error"]["message"]


def test_readyz_is_ready_while_serving(edge: GatewayServer) -> None:
    ready = httpx.get(f"{edge.base_url}/readyz")
    assert ready.status_code == 200 and ready.json() == {"status": "ready"}


def test_keep_alive_connections_serve_several_requests(edge: GatewayServer) -> None:
    with connect(edge.port) as sock:
        for _ in range(3):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            reply = read_reply_keep_alive(sock)
            assert reply == 200


def read_reply_keep_alive(sock: socket.socket) -> int:
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    length = int(
        next(h.split(b":")[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length"))
    )
    while len(rest) < length:
        rest += sock.recv(65536)
    return int(head.split(b" ")[1])


def test_trickling_and_idle_connections_do_not_starve_normal_requests(tmp_path: Path) -> None:
    """A scaled-down slow-client attack (``make bench-edge`` runs 2,000 + 2,000 for 60 s): every
    normal request is served while hundreds of connections trickle or idle and are cut."""
    server = {"header_timeout_seconds": 0.5, "keep_alive_seconds": 1}
    with running_gateway(tmp_path / "data", server=server) as gw, ExitStack() as sockets:
        key = gw.key(gw.account("acme"), "Nova", rpm=100_000).secret
        trickling = [sockets.enter_context(connect(gw.port)) for _ in range(150)]
        for _ in range(150):  # idle: connected, never a byte sent
            sockets.enter_context(connect(gw.port))
        for sock in trickling:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-slow: ")
        served = sent = 0
        with httpx.Client(base_url=gw.base_url, timeout=10) as client:
            # Normal requests keep coming until the gateway has cut every slow connection, and at
            # least 20 of them (on a slow machine the cuts can all land before the first request).
            deadline = time.monotonic() + 60
            while (sent < 20 or gw.services.edge.head_timeouts < 300) and time.monotonic() < deadline:
                for sock in trickling[sent % 10 :: 10]:
                    with contextlib.suppress(OSError):
                        sock.sendall(b"x")
                response = client.post(
                    "/v1/chat/completions",
                    json={
                        "model": "nova-5.5",
                        "max_tokens": 5,
                        "messages": [{"role": "user", "content": "hi"}],
                    },
                    headers={"authorization": f"Bearer {key}"},
                )
                sent += 1
                served += response.status_code == 200
        assert gw.services.edge.head_timeouts >= 300  # the slow connections were cut, not left open
        assert sent >= 20 and served == sent
