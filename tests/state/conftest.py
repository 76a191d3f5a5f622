"""One gateway for the stored-state suite, with fake upstreams at the network boundary.

Routes (``MODELS``): a Nova model translated to an Anthropic-dialect upstream, one passed through
to an ``openai`` upstream that keeps Responses state itself, one to an ``openai`` upstream
configured ``responses_state = "gateway"`` (the gateway keeps it), one translated to a Chat-only
upstream, and one served by the built-in simulator. The fake answers every dialect with a tool
loop: a request offering tools gets text followed by a ``get_weather`` call, a request whose last
turn is that tool's result gets the final answer.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from tests.fakes.upstream import FakeUpstream, RecordedRequest, Reply, Step
from tests.gateway_server import GatewayServer, ManualClock, running_gateway
from tests.loop_thread import LoopThread

from modelgate.clock import month_of
from modelgate.storage.base import UsageRecord

UPSTREAM_KEY = "sk-upstream-state-0123456789"
FINAL = "It is sunny in Paris."
BEFORE_CALL = "Let me check the weather."

#: Model -> (provider, upstream model id).
MODELS: dict[str, tuple[str, str]] = {
    "nova-5.5": ("fake-anthropic", "claude-fake"),  # Responses -> Messages (translated)
    "nova-5.6-sol": ("fake-openai", "gpt-fake"),  # Responses passthrough, upstream keeps state
    "nova-5.6-terra": ("fake-openai-zdr", "gpt-zdr"),  # passthrough, the gateway keeps state
    "nova-6-sol": ("fake-compat", "qwen-fake"),  # Responses -> Chat (translated)
}
TRANSLATED = "nova-5.5"
KEEPER = "nova-5.6-sol"
ZDR = "nova-5.6-terra"
CHAT_ONLY = "nova-6-sol"
SIMULATED = "nova-6-astra"  # the default provider: the simulator


def answered_tool(body: Any) -> bool:
    """Whether the request's last turn is a tool result, in any dialect."""
    if not isinstance(body, dict):
        return False
    turns = body.get("messages") if "messages" in body else body.get("input")
    if not isinstance(turns, list) or not turns:
        return False
    last = turns[-1]
    if not isinstance(last, dict):
        return False
    if last.get("role") == "tool" or last.get("type") == "function_call_output":
        return True
    content = last.get("content")
    return isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") == "tool_result" for p in content
    )


def tool_loop(request: RecordedRequest) -> Step:
    body = request.json() if request.body else {}
    if answered_tool(body):
        return Reply(text=FINAL, input_tokens=40, output_tokens=6)
    if isinstance(body, dict) and body.get("tools"):
        return Reply.tool_call("get_weather", {"city": "Paris"}, text=BEFORE_CALL, input_tokens=30)
    return Reply(input_tokens=12)


@dataclass
class Stateful:
    gateway: GatewayServer
    fake: FakeUpstream
    clock: ManualClock

    def key(self, group: str = "Nova", credits: float = 100) -> tuple[str, str]:
        account = self.gateway.account(f"state-{time.monotonic_ns()}", credits)
        issued = self.gateway.key(account, group, rpm=10_000)
        return issued.secret, issued.record.id

    def account_id(self, key_id: str) -> int:
        record = self.gateway.call(self.gateway.services.key_records.get_key(key_id))
        assert record is not None
        return record.account_id

    def sent(self, model: str) -> list[RecordedRequest]:
        """What the fake upstream got for one gateway model."""
        upstream = MODELS[model][1]
        return [r for r in self.fake.requests if r.body and r.json().get("model") == upstream]

    def usage(self, key_id: str, count: int = 1, timeout: float = 3.0) -> list[UsageRecord]:
        deadline = time.monotonic() + timeout
        while True:
            records = self.gateway.call(
                self.gateway.services.usage.usage_records(month_of(self.clock.time()), key_id=key_id)
            )
            if len(records) >= count or time.monotonic() > deadline:
                return sorted(records, key=lambda r: r.created_at)
            time.sleep(0.02)


@pytest.fixture(scope="session")
def stateful(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stateful]:
    loop = LoopThread("state-fakes")
    fake = loop.start(FakeUpstream(script=tool_loop))
    clock = ManualClock(time.time())
    providers = [
        {"name": "simulator", "kind": "simulator"},
        {"name": "fake-anthropic", "kind": "anthropic", "base_url": fake.base_url, "api_key_env": "FAKE_KEY"},
        {"name": "fake-openai", "kind": "openai", "base_url": fake.base_url, "api_key_env": "FAKE_KEY"},
        {
            "name": "fake-openai-zdr",
            "kind": "openai",
            "base_url": fake.base_url,
            "api_key_env": "FAKE_KEY",
            "responses_state": "gateway",
        },
        {"name": "fake-compat", "kind": "openai-compatible", "base_url": fake.base_url},
    ]
    deployments = {
        model: [{"provider": provider, "upstream_model": upstream}]
        for model, (provider, upstream) in MODELS.items()
    }
    try:
        with running_gateway(
            tmp_path_factory.mktemp("state") / "data",
            clock=clock,
            env={"FAKE_KEY": UPSTREAM_KEY},
            providers=providers,
            deployments=deployments,
            routing={"max_attempts": 1},
        ) as gateway:
            yield Stateful(gateway, fake, clock)
    finally:
        loop.close()
