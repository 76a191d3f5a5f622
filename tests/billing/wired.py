"""A test gateway whose Anthropic-style and OpenAI-style providers are byte-exact fake upstreams on
loopback (the billing tests' usual set-up): each fake answers as the test scripts it, and the
deployments name which catalogue model reaches which fake."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from tests.fakes.upstream import FakeUpstream
from tests.gateway_server import GatewayServer, running_gateway
from tests.loop_thread import LoopThread

#: The providers' (fake) credential, through the environment as an operator would give it.
_KEY_ENV = {"FAKE_KEY": "sk-upstream-test"}


@contextmanager
def gateway_over_fakes(
    data: Path,
    deployments: Mapping[str, str],
    *,
    anthropic: FakeUpstream,
    openai: FakeUpstream | None = None,
) -> Iterator[GatewayServer]:
    """A running gateway with providers ``fake-anthropic`` and ``fake-openai`` (over ``anthropic``
    when no ``openai`` fake is given) beside the simulator; ``deployments`` maps a catalogue model
    to the provider serving it (as ``claude-x`` or ``gpt-x``). The fakes and the gateway end with it."""
    loop = LoopThread("fake-upstreams")
    try:
        anthropic_url = loop.start(anthropic).base_url
        openai_url = loop.start(openai).base_url if openai is not None else anthropic_url
        providers = [
            {"name": "simulator", "kind": "simulator"},
            {
                "name": "fake-anthropic",
                "kind": "anthropic",
                "base_url": anthropic_url,
                "api_key_env": "FAKE_KEY",
            },
            {"name": "fake-openai", "kind": "openai", "base_url": openai_url, "api_key_env": "FAKE_KEY"},
        ]
        upstream_model = {"fake-anthropic": "claude-x", "fake-openai": "gpt-x"}
        routes = {
            model: [{"provider": provider, "upstream_model": upstream_model[provider]}]
            for model, provider in deployments.items()
        }
        with running_gateway(data, env=_KEY_ENV, providers=providers, deployments=routes) as server:
            yield server
    finally:
        loop.close()
