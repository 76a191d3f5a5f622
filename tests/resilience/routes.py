"""The resilience tests' gateway: four routes against one scripted fake upstream (module scope).

Messages, Chat Completions and Responses clients each reach a same-dialect upstream
(passthrough), and a Messages client reaches an ``openai-compatible`` upstream (translated).
``dead_model`` routes lead to a provider where nothing listens. Models without a deployment are
hidden (``unrouted = "hide"``), as an operator with only real upstreams would configure it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.fakes import FakeUpstream, refused_base_url
from tests.gateway_server import GatewayServer, running_gateway
from tests.loop_thread import LoopThread
from tests.resilience.clients import Format, Outcome, call
from tests.resilience.harness import ENV, QUICK_ROUTING, anthropic_provider, openai_provider


@dataclass(frozen=True)
class Route:
    fmt: Format
    group: str
    model: str
    #: Model served by a provider where nothing listens.
    dead_model: str


ROUTES = {
    "messages": Route("messages", "Pro", "aria-sonnet-4.6", "aria-opus-4.8"),
    "chat": Route("chat", "Nova", "nova-5.5", "nova-6-sol"),
    "responses": Route("responses", "Nova", "nova-5.5", "nova-6-sol"),
    "messages-via-chat": Route("messages", "Pro", "aria-haiku-4.5", "aria-opus-4.8"),
}


@dataclass
class Env:
    gateway: GatewayServer
    fake: FakeUpstream
    keys: dict[str, str]

    def call(self, route: str, *, stream: bool) -> Outcome:
        r = ROUTES[route]
        return call(self.gateway.base_url, self.keys[r.group], r.fmt, r.model, stream=stream)


@contextmanager
def routed_gateway(data: Path) -> Iterator[Env]:
    with LoopThread("fake-upstreams") as fakes:
        fake = fakes.start(FakeUpstream())
        dead = refused_base_url()
        providers = [
            anthropic_provider("ant", fake.base_url),
            openai_provider("oai", fake.base_url),
            openai_provider("local", fake.base_url, kind="openai-compatible"),
            anthropic_provider("dead-ant", dead),
            openai_provider("dead-oai", dead),
        ]
        deployments = {
            "aria-sonnet-4.6": [{"provider": "ant", "upstream_model": "claude-up"}],
            "nova-5.5": [{"provider": "oai", "upstream_model": "gpt-up"}],
            "aria-haiku-4.5": [{"provider": "local", "upstream_model": "llama-up"}],
            "aria-opus-4.8": [{"provider": "dead-ant", "upstream_model": "claude-up"}],
            "nova-6-sol": [{"provider": "dead-oai", "upstream_model": "gpt-up"}],
        }
        with running_gateway(
            data,
            env=ENV,
            providers=providers,
            deployments=deployments,
            default_provider="",
            unrouted="hide",
            routing=QUICK_ROUTING,
        ) as gateway:
            account = gateway.account("acme", credits=1000)
            keys = {g: gateway.key(account, g, rpm=10_000).secret for g in ("Pro", "Nova")}
            yield Env(gateway, fake, keys)
