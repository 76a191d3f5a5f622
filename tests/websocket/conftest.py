"""A gateway for the WebSocket suite: the simulator for most models, a Responses passthrough to a
fake ``openai`` upstream and a route translated to a fake Anthropic-dialect upstream, all on
loopback. Sockets are opened with the ``websockets`` client, as Codex opens them (Bearer key,
``openai-beta: responses_websockets=2026-02-06``, permessage-deflate)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from websockets.sync.client import ClientConnection, connect
from websockets.sync.connection import Connection

from modelgate.clock import month_of
from modelgate.storage.base import UsageRecord
from tests.fakes.upstream import FakeUpstream, RecordedRequest, Reply
from tests.gateway_server import GatewayServer, running_gateway
from tests.loop_thread import LoopThread

UPSTREAM_KEY = "sk-upstream-websocket-0123456789"
PASSTHROUGH = "nova-5.6-sol"  # Responses -> fake openai (same dialect)
TRANSLATED = "nova-5.5"  # Responses -> fake anthropic (Messages dialect)
CHAT_ONLY = "nova-6-sol"  # Responses -> fake openai-compatible (Chat dialect)
SIMULATED = "nova-6-astra"  # the simulator
TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")
#: What Codex 0.171.0 sends on the upgrade besides its key (wire-formats.md §7).
CODEX_HEADERS = {
    "openai-beta": "responses_websockets=2026-02-06",
    "session-id": "0199-session",
    "x-codex-window-id": "window-1",
    "x-codex-turn-metadata": '{"request_kind":"prewarm"}',
}


def url(gateway: GatewayServer) -> str:
    return f"ws://127.0.0.1:{gateway.port}/v1/responses"


def open_socket(gateway: GatewayServer, secret: str | None, **headers: str) -> ClientConnection:
    sent = dict(CODEX_HEADERS, **headers)
    if secret is not None:
        sent["Authorization"] = f"Bearer {secret}"
    return connect(url(gateway), additional_headers=sent, open_timeout=10, max_size=None)


def send(socket: Connection, **fields: Any) -> None:
    socket.send(json.dumps({"type": "response.create", **fields}))


def events(socket: Connection, timeout: float = 20) -> list[dict[str, Any]]:
    """Messages up to the response's end (its terminal event or an ``error`` message)."""
    out: list[dict[str, Any]] = []
    while True:
        message = socket.recv(timeout=timeout)
        assert isinstance(message, str), "every server message is text"
        event = json.loads(message)
        out.append(event)
        if event["type"] in TERMINAL and not (event["type"] == "error" and "status" not in event):
            return out


def completed(socket: Connection, **fields: Any) -> dict[str, Any]:
    send(socket, **fields)
    got = events(socket)
    assert got[-1]["type"] == "response.completed", got[-1]
    response: dict[str, Any] = got[-1]["response"]
    return response


def refused(socket: Connection, **fields: Any) -> dict[str, Any]:
    send(socket, **fields)
    (error,) = events(socket)
    assert error["type"] == "error" and isinstance(error["status"], int), error
    return error


@dataclass
class Suite:
    gateway: GatewayServer
    fake: FakeUpstream

    def key(self, group: str = "Nova", credits: float = 100, **controls: Any) -> tuple[str, str, int]:
        account = self.gateway.account(f"ws-{time.monotonic_ns()}", credits)
        controls.setdefault("rpm", 10_000)
        issued = self.gateway.key(account, group, **controls)
        return issued.secret, issued.record.id, account.id

    def usage(self, key_id: str, count: int = 1, timeout: float = 5.0) -> list[UsageRecord]:
        """The key's usage records, once ``count`` exist (a stream settles after its last event)."""
        deadline = time.monotonic() + timeout
        while True:
            month = month_of(self.gateway.services.clock.time())
            records = self.gateway.call(self.gateway.services.usage.usage_records(month, key_id=key_id))
            if len(records) >= count or time.monotonic() > deadline:
                return sorted(records, key=lambda r: r.created_at)
            time.sleep(0.02)

    def available(self, account_id: int) -> int:
        account = self.gateway.call(self.gateway.services.accounts.get_account(account_id))
        assert account is not None
        return account.available_uc

    def sent(self, upstream_model: str) -> list[RecordedRequest]:
        return [r for r in self.fake.requests if r.body and r.json().get("model") == upstream_model]


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    loop = LoopThread("websocket-fakes")
    fake = loop.start(
        FakeUpstream(default=Reply(text="Hello over the socket.", input_tokens=20, output_tokens=5))
    )
    providers = [
        {"name": "simulator", "kind": "simulator"},
        {"name": "fake-openai", "kind": "openai", "base_url": fake.base_url, "api_key_env": "FAKE_KEY"},
        {"name": "fake-anthropic", "kind": "anthropic", "base_url": fake.base_url, "api_key_env": "FAKE_KEY"},
        {"name": "fake-compat", "kind": "openai-compatible", "base_url": fake.base_url},
    ]
    deployments = {
        PASSTHROUGH: [{"provider": "fake-openai", "upstream_model": "gpt-fake"}],
        TRANSLATED: [{"provider": "fake-anthropic", "upstream_model": "claude-fake"}],
        CHAT_ONLY: [{"provider": "fake-compat", "upstream_model": "chat-fake"}],
    }
    try:
        with running_gateway(
            tmp_path_factory.mktemp("websocket") / "data",
            env={"FAKE_KEY": UPSTREAM_KEY},
            providers=providers,
            deployments=deployments,
            routing={"max_attempts": 1},
        ) as gateway:
            yield Suite(gateway, fake)
    finally:
        loop.close()
