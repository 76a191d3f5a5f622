"""One gateway for the client suite, each route's upstream a fake on loopback speaking that route's
dialect, so a real CLI meets both a passthrough and a translated route:

========================  ======================  ===========================================
gateway model             provider (kind)         route for the client
========================  ======================  ===========================================
aria-opus-4.8 (opus)      up-anthropic            Claude Code: Messages passthrough
aria-sonnet-4.6 (sonnet)  up-chat (compatible)    Claude Code: Messages -> Chat
aria-haiku-4.5 (haiku)    up-openai               Claude Code: Messages -> OpenAI kind
nova-5.5                  up-openai               Codex: Responses passthrough
nova-5.6-sol              up-anthropic            Codex: Responses -> Messages
nova-5.6-terra            up-chat (compatible)    Codex: Responses -> Chat
========================  ======================  ===========================================
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from modelgate.storage.base import UsageRecord
from tests.clients.harness import Binaries, binaries
from tests.conformance.conftest import usage_records
from tests.fakes.upstream import FakeUpstream, RecordedRequest, Reply, Step
from tests.gateway_server import GatewayServer, running_gateway
from tests.loop_thread import LoopThread

UPSTREAM_KEY = "sk-upstream-clients-0123456789"

ROUTES: dict[str, tuple[str, str]] = {
    "aria-opus-4.8": ("up-anthropic", "claude-opus-up"),
    "aria-sonnet-4.6": ("up-chat", "chat-up"),
    "aria-haiku-4.5": ("up-openai", "gpt-up"),
    "nova-5.5": ("up-openai", "gpt-up"),
    "nova-5.6-sol": ("up-anthropic", "claude-sonnet-up"),
    "nova-5.6-terra": ("up-chat", "chat-up"),
}


class Switch:
    """The fake's script for the session; each test sets its own ``turn``."""

    def __init__(self) -> None:
        self.turn: Callable[[RecordedRequest], Step] = lambda request: Reply(text="ok")

    def __call__(self, request: RecordedRequest) -> Step:
        return self.turn(request)


@dataclass
class Clients:
    gateway: GatewayServer
    fake: FakeUpstream
    script: Switch
    bins: Binaries

    def key(self, group: str) -> tuple[str, str]:
        """A fresh account and key: ``(secret, key_id)``."""
        account = self.gateway.account(f"cli-{time.monotonic_ns()}", 100)
        issued = self.gateway.key(account, group, rpm=10_000)
        return issued.secret, issued.record.id

    def records(self, key_id: str, count: int = 1) -> list[UsageRecord]:
        return usage_records(self.gateway, key_id, count)


@pytest.fixture(scope="session")
def _clients_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clients]:
    bins = binaries()
    script = Switch()
    with LoopThread("clients-fakes") as loop:
        fake = loop.start(FakeUpstream(script=script))
        providers = [
            {"name": "simulator", "kind": "simulator"},
            {"name": "up-anthropic", "kind": "anthropic", "base_url": fake.base_url, "api_key_env": "UP_KEY"},
            {"name": "up-chat", "kind": "openai-compatible", "base_url": fake.base_url},
            {"name": "up-openai", "kind": "openai", "base_url": fake.base_url, "api_key_env": "UP_KEY"},
        ]
        deployments = {
            model: [{"provider": provider, "upstream_model": upstream}]
            for model, (provider, upstream) in ROUTES.items()
        }
        with running_gateway(
            tmp_path_factory.mktemp("clients") / "data",
            env={"UP_KEY": UPSTREAM_KEY},
            providers=providers,
            deployments=deployments,
            routing={"max_attempts": 1},
        ) as server:
            yield Clients(server, fake, script, bins)


@pytest.fixture
def clients(_clients_session: Clients) -> Clients:
    _clients_session.script.turn = lambda request: Reply(text="ok")
    _clients_session.fake.requests.clear()
    return _clients_session
