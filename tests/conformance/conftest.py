"""Shared fixtures of the conformance suite.

Two gateways run for the whole session on loopback (real uvicorn, real SQLite):

* ``sim`` serves every model from the built-in simulator (all paths are passthrough, since the
  simulator speaks all three dialects).
* ``wired`` serves chosen models from fakes at the network boundary, so each client format meets
  each upstream dialect (see ``DEPLOYMENTS``): one ``FakeUpstream`` (scripted replies and faults,
  byte-exact request records) behind three provider kinds, and one ``ReplayUpstream`` that plays
  recorded upstream streams back verbatim.

Tests issue their own account and key, so records and balances never mix between tests.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from modelgate.clock import month_of
from modelgate.storage.base import UsageRecord
from tests.conformance.upstreams import ReplayUpstream, Scripted, start_fake
from tests.fakes.upstream import FakeUpstream, Reply
from tests.gateway_server import GatewayServer, running_gateway
from tests.loop_thread import LoopThread
from tests.polling import POLL_TIMEOUT

UPSTREAM_KEY = "sk-upstream-test-0123456789"

#: Gateway model -> (provider, upstream model id). The upstream ids differ from the gateway ids
#: so every test also sees the model rewritten both ways.
DEPLOYMENTS: dict[str, tuple[str, str]] = {
    # Messages dialect (anthropic kind): Messages passthrough, Chat -> Messages translation.
    "aria-haiku-4.5": ("fake-anthropic", "claude-haiku-4-5"),
    # Chat only (openai-compatible): Messages -> Chat and Chat passthrough for aria models.
    "aria-sonnet-4.6": ("fake-compat", "llama-3.3-70b"),
    # Chat + Responses (openai kind): passthrough for both OpenAI formats.
    "nova-5.5": ("fake-openai", "gpt-5.5-2026"),
    # Chat only: Responses -> Chat translation.
    "nova-5.6-sol": ("fake-compat", "qwen3-235b"),
    # Recorded upstream streams, played back verbatim.
    "aria-opus-4.8": ("replay-anthropic", "claude-opus-4-8"),
    "aria-opus-4.7": ("replay-compat", "llama-replay"),
    "nova-6-astra": ("replay-compat", "qwen-replay"),
    # Hosted tools across dialects: Responses -> Messages (web search carried), recorded Messages
    # and Responses answers with searches, a Messages client with a web search on an OpenAI
    # upstream (goes to Responses), and a Chat-only upstream that refuses hosted tools.
    "nova-5.6-terra": ("fake-anthropic", "claude-sonnet-4-6"),
    "nova-6-sol": ("replay-anthropic", "claude-replay"),
    "aria-fable-5-1": ("fake-openai", "gpt-5.5-2026"),
    "aria-opus-4.6": ("replay-openai", "gpt-replay"),
    "aria-sonnet-5": ("fake-compat-refusing", "llama-strict"),
}


@dataclass
class Wired:
    gateway: GatewayServer
    fake: FakeUpstream
    script: Scripted
    replay: ReplayUpstream


@pytest.fixture(scope="session")
def loop_thread() -> Iterator[LoopThread]:
    with LoopThread("fake-upstreams") as loop:
        yield loop


@pytest.fixture(scope="session")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    with running_gateway(tmp_path_factory.mktemp("sim") / "data") as server:
        yield server


@pytest.fixture(scope="session")
def _wired_session(tmp_path_factory: pytest.TempPathFactory, loop_thread: LoopThread) -> Iterator[Wired]:
    script = Scripted(default=Reply())
    fake = start_fake(loop_thread, script)
    replay = loop_thread.start(ReplayUpstream())
    providers = [
        {"name": "simulator", "kind": "simulator"},
        {"name": "fake-anthropic", "kind": "anthropic", "base_url": fake.base_url, "api_key_env": "FAKE_KEY"},
        {"name": "fake-openai", "kind": "openai", "base_url": fake.base_url, "api_key_env": "FAKE_KEY"},
        {"name": "fake-compat", "kind": "openai-compatible", "base_url": fake.base_url},
        {
            "name": "replay-anthropic",
            "kind": "anthropic",
            "base_url": replay.base_url,
            "api_key_env": "FAKE_KEY",
        },
        {"name": "replay-compat", "kind": "openai-compatible", "base_url": replay.base_url},
        {"name": "replay-openai", "kind": "openai", "base_url": replay.base_url, "api_key_env": "FAKE_KEY"},
        {
            "name": "fake-compat-refusing",
            "kind": "openai-compatible",
            "base_url": fake.base_url,
            "hosted_tools": "refuse",
        },
    ]
    deployments = {
        model: [{"provider": provider, "upstream_model": upstream}]
        for model, (provider, upstream) in DEPLOYMENTS.items()
    }
    # One attempt per request: a scripted fault must reach the client, not be retried away.
    with running_gateway(
        tmp_path_factory.mktemp("wired") / "data",
        env={"FAKE_KEY": UPSTREAM_KEY},
        providers=providers,
        deployments=deployments,
        routing={"max_attempts": 1},
    ) as server:
        yield Wired(server, fake, script, replay)


@pytest.fixture
def wired(_wired_session: Wired) -> Wired:
    """The wired gateway with a clean script and an empty request log for this test."""
    _wired_session.script.reset()
    _wired_session.fake.requests.clear()
    _wired_session.replay.answers.clear()
    _wired_session.replay.bodies.clear()
    return _wired_session


def issue_key(gateway: GatewayServer, group: str, credits: float = 100) -> tuple[str, str]:
    """A fresh account and key; returns ``(secret, key_id)``."""
    account = gateway.account(f"acct-{time.monotonic_ns()}", credits)
    issued = gateway.key(account, group, rpm=10_000)
    return issued.secret, issued.record.id


def usage_records(
    gateway: GatewayServer, key_id: str, count: int = 1, timeout: float = POLL_TIMEOUT
) -> list[UsageRecord]:
    """The key's usage records, oldest first, once ``count`` exist (streams settle after the
    last byte, so a client can finish reading before the record is written)."""
    deadline = time.monotonic() + timeout
    while True:
        records = gateway.call(gateway.services.usage.usage_records(month_of(time.time()), key_id=key_id))
        if len(records) >= count or time.monotonic() > deadline:
            return sorted(records, key=lambda r: r.created_at)
        time.sleep(0.02)
