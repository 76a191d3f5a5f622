"""The connection layer's edges (issue #28 item 6): the connection cap fitted to the open-file
limit, idle keep-alive longer than the head timeout and announced in ``Keep-Alive``, refusals of
broken HTTP in the path's wire format, the dashboard's 404s in JSON, and an access log without
credentials."""

from __future__ import annotations

import contextlib
import socket
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from modelgate.config import Settings
from tests.gateway_server import running_gateway
from tests.hardening.process import GatewayProcess, write_config
from tests.hardening.test_reload import count_logged, hangup
from tests.hardening.wire import connect, read_reply, request_head
from tests.polling import wait_until
from tests.secret_scan import SCANNER

CHAT = {"model": "nova-5.5", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}


def get(sock: socket.socket, path: str) -> int:
    sock.sendall(request_head("GET", path, {}))
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed instead of answering {path}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(
        int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")
    )
    while len(rest) < length:
        rest += sock.recv(65536)
    return int(head.split(b" ")[1])


def test_idle_keep_alive_outlives_the_head_timeout_and_then_closes_quietly(tmp_path: Path) -> None:
    server = {"header_timeout_seconds": 0.3, "keep_alive_seconds": 2}
    with running_gateway(tmp_path / "data", server=server) as gateway, connect(gateway.port) as sock:
        assert get(sock, "/healthz") == 200
        time.sleep(1.0)  # idle for longer than the head timeout, within the keep-alive
        assert get(sock, "/healthz") == 200
        sock.settimeout(30)
        assert sock.recv(65536) == b""  # then closed after the keep-alive, with no 408 written
        assert gateway.services.edge.head_timeouts == 0


def test_keep_alive_defaults_to_65_seconds_and_is_announced(tmp_path: Path) -> None:
    assert Settings().server.keep_alive_seconds >= 65
    with running_gateway(tmp_path / "data") as gateway:
        response = httpx.get(f"{gateway.base_url}/healthz")
        assert response.headers["keep-alive"] == "timeout=65"
    with running_gateway(tmp_path / "other", server={"keep_alive_seconds": 90}) as gateway:
        assert httpx.get(f"{gateway.base_url}/healthz").headers["keep-alive"] == "timeout=90"


@pytest.mark.parametrize(
    ("raw", "shape"),
    [
        (b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: nope\r\n\r\n", "messages"),
        (b"POST /v1/messages/count_tokens HTTP/1.1\r\nhost: x\r\nbad header: 1\r\n\r\n", "messages"),
        (b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", "messages"),
        (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: nope\r\n\r\n", "openai"),
        (b"GET /v1/models HTTP/1.1\r\nx-api-key: k\r\nx: \x01\r\n\r\n", "messages"),
    ],
)
def test_broken_http_is_refused_in_the_paths_wire_format(tmp_path: Path, raw: bytes, shape: str) -> None:
    with running_gateway(tmp_path / "data") as gateway, connect(gateway.port) as sock:
        sock.sendall(raw)
        reply = read_reply(sock)
        assert reply.status == 400 and reply.headers["content-type"] == "application/json"
        body = reply.json()
        assert (body.get("type") == "error") == (shape == "messages"), body
        assert body["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "path", ["/dashboard/%2e%2e%2f%2e%2e%2fetc%2fpasswd", "/dashboard/..%2fsecret", "/dashboard/nope.js"]
)
def test_dashboard_paths_that_are_no_file_are_a_json_404(tmp_path: Path, path: str) -> None:
    with running_gateway(tmp_path / "data") as gateway:
        response = httpx.get(gateway.base_url + path)
        assert response.status_code == 404 and response.headers["content-type"] == "application/json"
        assert response.json()["error"]["type"] == "not_found_error"
        assert response.headers["content-security-policy"]
        assert httpx.get(gateway.base_url + "/dashboard/").status_code == 200


def test_the_access_log_carries_no_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    metrics_token = "access-log-metrics-token-" + "m" * 20
    monkeypatch.setenv("MODELGATE_LOG_LEVEL", "info")
    gateway = GatewayProcess(tmp_path, server={"access_log": True}, metrics={"token": metrics_token})
    SCANNER.register(metrics_token)
    with gateway:
        seeded = gateway.seed()
        gateway.start()
        key = seeded.keys["Nova"]
        with httpx.Client(base_url=gateway.base_url, timeout=30) as client:
            client.get(f"/v1/models?key={key}&limit=5")
            client.get(f"/metrics?token={metrics_token}")
            client.get("/admin/api/accounts?q=Jane%20Doe&access_token=opaque-credential-1234")
            client.get(f"/v1/models/{key}")
            client.get("/v1/models?api_key=plainly-secret-value&token=another-secret-value")
            client.post("/v1/chat/completions", json=CHAT, headers={"authorization": f"Bearer {key}"})
        wait_until(lambda: gateway.log.read_text().count("uvicorn.access") >= 6, "the access log lines")
        log = gateway.log.read_text()
        for secret in (key, metrics_token, "Jane", "opaque-credential", "plainly-secret", "another-secret"):
            assert secret not in log, secret
        assert "/v1/models?key=[redacted]&limit=5" in log
        assert "/admin/api/accounts?q=[redacted]&access_token=[redacted]" in log
        assert "/v1/models/[redacted]" in log


class LimitedGateway(GatewayProcess):
    """``modelgate serve`` started with ``RLIMIT_NOFILE`` at ``limit`` (soft = hard)."""

    def __init__(self, root: Path, limit: int, **sections: dict[str, Any]) -> None:
        super().__init__(root, server=sections["server"])
        self.limit = limit

    def command(self) -> list[str]:
        launch = (
            "import os, resource, sys; "
            f"resource.setrlimit(resource.RLIMIT_NOFILE, ({self.limit}, {self.limit})); "
            "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
        )
        return [sys.executable, "-c", launch, *super().command()[1:]]


def test_the_connection_cap_fits_the_open_file_limit(tmp_path: Path) -> None:
    limit = 200
    gateway = LimitedGateway(
        tmp_path, limit, server={"header_timeout_seconds": 120, "keep_alive_seconds": 120}
    )
    with gateway:
        seeded = gateway.seed()
        operator = gateway.operator_headers()
        gateway.start()
        logged = gateway.log.read_text()
        assert f"open-file limit: {limit} (hard {limit}); connection cap " in logged
        cap = int(logged.split("connection cap ")[1].split(" ")[0])
        assert 16 <= cap < limit - 64
        with httpx.Client(base_url=gateway.base_url, timeout=30) as client, contextlib.ExitStack() as stack:
            headers = {"authorization": f"Bearer {seeded.keys['Nova']}"}
            assert client.post("/v1/chat/completions", json=CHAT, headers=headers).status_code == 200
            # Idle connections up to the cap and beyond, more than the descriptors the process has.
            idle = [stack.enter_context(connect(gateway.port, timeout=30)) for _ in range(limit)]
            refused = 0
            for sock in idle[cap - 1 :]:  # every one past the cap is answered (and closed), none left hanging
                reply = read_reply(sock)
                assert reply.status == 503 and reply.json()["error"]["code"] == "service_unavailable"
                refused += 1
            assert refused == limit - cap + 1  # the client's own connection counts too
            # The connection already open still serves, with the database and the log at hand.
            assert client.post("/v1/chat/completions", json=CHAT, headers=headers).status_code == 200
        assert httpx.get(f"{gateway.base_url}/healthz", timeout=30).status_code == 200
        health = httpx.get(f"{gateway.base_url}/health", headers=operator, timeout=30).json()
        assert health["edge"]["connection_cap"] == cap


def test_the_configured_cap_stays_when_it_fits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODELGATE_LOG_LEVEL", "info")
    gateway = LimitedGateway(tmp_path / "gw", 4096, server={"max_connections": 50})
    with gateway:
        gateway.start()
        assert "open-file limit: 4096 (hard 4096); connection cap 50" in gateway.log.read_text()


def test_the_connection_cap_refusal_takes_a_reloaded_retry_after(tmp_path: Path) -> None:
    cap = 20
    server = {"max_connections": cap, "overload_retry_after": 1, "header_timeout_seconds": 120}
    gateway = GatewayProcess(tmp_path, server={**server, "keep_alive_seconds": 120})
    with gateway:
        gateway.start()
        write_config(gateway.config, gateway.port, server={**server, "overload_retry_after": 7})
        hangup(gateway)
        wait_until(lambda: count_logged(gateway, "warning", "reloaded"), "the reload")
        with contextlib.ExitStack() as stack:
            idle = [stack.enter_context(connect(gateway.port, timeout=30)) for _ in range(cap + 2)]
            for sock in idle[cap:]:  # past the cap: refused with the running retry-after
                reply = read_reply(sock)
                assert (reply.status, reply.headers["retry-after"]) == (503, "7"), reply
