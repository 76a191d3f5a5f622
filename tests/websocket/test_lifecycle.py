"""The socket's edges: which upgrades are refused (and how), the idle and lifetime limits, a
drain, and the setting that turns WebSocket mode off. Every refusal of an upgrade is an HTTP
answer with a JSON body in the OpenAI error shape; every close carries a code."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.connection import Connection

from modelgate.clock import month_of
from tests.fakes.upstream import FakeUpstream, Reply
from tests.gateway_server import GatewayServer, make_settings, running_gateway
from tests.hardening.wire import connect, read_reply, request_head
from tests.loop_thread import LoopThread
from tests.websocket.conftest import SIMULATED, completed, events, open_socket, send


def refusal(gateway: GatewayServer, secret: str | None) -> tuple[int, dict[str, object]]:
    with pytest.raises(InvalidStatus) as refused:
        open_socket(gateway, secret)
    response = refused.value.response
    return response.status_code, json.loads(bytes(response.body or b""))


def close_code(socket: Connection, timeout: float = 10) -> int:
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            socket.recv(timeout=timeout)
    assert closed.value.rcvd is not None, "the server sent a close frame"
    return closed.value.rcvd.code


def test_upgrade_refusals_are_json(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "data") as gateway:
        account = gateway.account("refusals")
        status, body = refusal(gateway, None)
        assert status == 401 and body["error"]["code"] == "invalid_api_key"  # type: ignore[index]
        status, body = refusal(gateway, "sk-cs4-" + "x" * 38)
        assert status == 401
        basic = gateway.key(account, "Basic").secret
        status, body = refusal(gateway, basic)
        error = body["error"]
        assert status == 426 and error["code"] == "websocket_not_supported"  # type: ignore[index]
        assert "/v1/messages" in error["message"]  # type: ignore[index]
        # Over HTTP the same key gets the 403 that names where it may go.
        http = httpx.post(
            f"{gateway.base_url}/v1/responses",
            headers={"authorization": f"Bearer {basic}"},
            json={"model": "aria-sonnet-4.6", "input": "x"},
        )
        assert http.status_code == 403


def test_a_malformed_upgrade_and_other_paths_are_answered_as_http(tmp_path: Path) -> None:
    upgrade = {"connection": "Upgrade", "upgrade": "websocket", "sec-websocket-version": "13"}
    with running_gateway(tmp_path / "data") as gateway:
        for path, headers, status in (
            ("/v1/responses", upgrade, 400),  # no Sec-WebSocket-Key
            ("/v1/responses", {**upgrade, "sec-websocket-key": "short"}, 400),
            ("/v1/chat/completions", {**upgrade, "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ=="}, 404),
        ):
            with connect(gateway.port) as sock:
                sock.sendall(request_head("GET", path, headers))
                reply = read_reply(sock)
                assert reply.status == status, (path, reply.status)
                error = reply.json()["error"]
                assert isinstance(error["message"], str) and "code" in error


def test_websocket_off_answers_the_upgrade_with_426(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "data", responses={"websocket": False}) as gateway:
        secret = gateway.key(gateway.account("off"), "Nova").secret
        status, body = refusal(gateway, secret)
        assert status == 426 and body["error"]["code"] == "websocket_not_supported"  # type: ignore[index]
        exposition = gateway.call(gateway.services.telemetry.exposition()).decode()
        assert 'modelgate_websocket_upgrades_refused_total{status="426"} 1.0' in exposition
        client = httpx.post(
            f"{gateway.base_url}/v1/responses",
            headers={"authorization": f"Bearer {secret}"},
            json={"model": SIMULATED, "input": "over http then"},
        )
        assert client.status_code == 200


def test_an_idle_socket_is_closed_with_1000(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "data", responses={"websocket_idle_timeout_seconds": 0.3}) as gateway:
        secret = gateway.key(gateway.account("idle"), "Nova").secret
        with open_socket(gateway, secret) as socket:
            completed(socket, model=SIMULATED, input="then nothing", store=False)
            assert close_code(socket) == 1000
        exposition = gateway.call(gateway.services.telemetry.exposition()).decode()
        assert 'modelgate_websocket_connections_closed_total{reason="idle_timeout"} 1.0' in exposition
        assert "modelgate_websocket_connections_open 0.0" in exposition
        assert "modelgate_websocket_connections_accepted_total 1.0" in exposition


@contextmanager
def slow_upstream_gateway(tmp_path: Path, reply: Reply, **overrides: Any) -> Iterator[GatewayServer]:
    """A gateway whose ``nova-5.6-sol`` is a fake openai upstream answering ``reply`` (slowly)."""
    loop = LoopThread("slow-fake")
    fake = loop.start(FakeUpstream(default=reply))
    providers = [
        {"name": "simulator", "kind": "simulator"},
        {"name": "fake", "kind": "openai", "base_url": fake.base_url, "api_key_env": "FAKE_KEY"},
    ]
    try:
        with running_gateway(
            tmp_path / "data",
            env={"FAKE_KEY": "sk-fake-upstream-0123456789"},
            providers=providers,
            deployments={"nova-5.6-sol": [{"provider": "fake", "upstream_model": "gpt-fake"}]},
            **overrides,
        ) as gateway:
            yield gateway
    finally:
        loop.close()


def test_a_socket_past_its_lifetime_closes_after_its_response(tmp_path: Path) -> None:
    slow = Reply(text="slow answer", chunks=6, event_delay=0.15)
    limit = {"websocket_max_connection_seconds": 0.5}
    with slow_upstream_gateway(tmp_path, slow, responses=limit) as gateway:
        secret = gateway.key(gateway.account("life"), "Nova").secret
        with open_socket(gateway, secret) as socket:
            time.sleep(0.3)
            send(socket, model="nova-5.6-sol", input="take your time", store=False)
            assert events(socket)[-1]["type"] == "response.completed"  # runs past the limit
            assert close_code(socket) == 1000


def test_a_drain_closes_the_socket_with_1001_after_the_response_in_flight(tmp_path: Path) -> None:
    slow = Reply(text="draining answer", chunks=8, event_delay=0.1)
    with slow_upstream_gateway(tmp_path, slow, server={"shutdown_grace_seconds": 10}) as gateway:
        key = gateway.key(gateway.account("drain"), "Nova")
        idle = open_socket(gateway, key.secret)
        busy = open_socket(gateway, key.secret)
        send(busy, model="nova-5.6-sol", input="finish me", store=False)
        assert json.loads(busy.recv(timeout=10))["type"] == "response.created"

        async def begin() -> None:
            gateway.services.drain.begin(10)

        gateway.call(begin())
        assert close_code(idle) == 1001
        got = events(busy)
        assert got[-1]["type"] == "response.completed"
        text = "".join(e["delta"] for e in got if e["type"] == "response.output_text.delta")
        assert text == "draining answer"
        assert close_code(busy) == 1001
        month = month_of(gateway.services.clock.time())
        (record,) = gateway.call(gateway.services.usage.usage_records(month, key_id=key.record.id))
        assert record.status == "ok" and record.output_tokens > 0


def test_stopping_the_server_closes_an_open_socket_with_1001(tmp_path: Path) -> None:
    """The server's own shutdown (what SIGTERM runs): the socket gets 1001 from the drain, not
    uvicorn's immediate 1012."""
    gateway = GatewayServer(make_settings(tmp_path / "data")).start()
    stopping = threading.Thread(target=gateway.stop)
    try:
        secret = gateway.key(gateway.account("stop"), "Nova").secret
        socket = open_socket(gateway, secret)
        completed(socket, model=SIMULATED, input="before the stop", store=False)
        stopping.start()
        assert close_code(socket) == 1001
        socket.close()
    finally:
        if stopping.is_alive() or stopping.ident is not None:
            stopping.join(timeout=30)
        else:
            gateway.stop()
