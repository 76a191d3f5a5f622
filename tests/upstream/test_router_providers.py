"""Router behaviour that needs real providers against fake upstreams on loopback: upstream text
scrubbed of the provider's key and address, refused connections, hanging and dropped upstreams.
The rest of the router's behaviour is tested against scripted providers in test_router.py."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import orjson
import pytest

from modelgate import errors
from modelgate.upstream.base import Deployment, Dialect, Provider
from modelgate.upstream.config import RoutingConfig, TimeoutConfig, parse_provider
from modelgate.upstream.providers import build_provider
from modelgate.upstream.router import Router
from tests.fakes import FakeUpstream, Fault, refused_base_url

KEY = "sk-ant-api03-UPSTREAMSECRETVALUE0123456789abcdef"
FAST = TimeoutConfig(connect=0.5, first_byte=0.2, idle=0.2, total=5.0)
QUICK_BACKOFF: dict[str, Any] = {"backoff_base": 0.001, "backoff_max": 0.005}


def provider(name: str, base_url: str, kind: str = "anthropic", timeouts: TimeoutConfig = FAST) -> Provider:
    cfg = parse_provider(
        {"name": name, "kind": kind, "base_url": base_url, "api_key_env": "KEY", "timeouts": timeouts}
    )
    return build_provider(cfg, {"KEY": KEY})


async def build(deployment: Deployment, provider: Provider) -> tuple[Dialect, bytes]:
    dialect: Dialect = "messages" if "messages" in provider.dialects else "chat"
    body = {
        "model": deployment.upstream_model,
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
    }
    return dialect, orjson.dumps(body)


def make_router(
    urls: Mapping[str, str],
    deployments: list[Deployment],
    *,
    kind: str = "anthropic",
    timeouts: TimeoutConfig = FAST,
    **cfg: Any,
) -> Router:
    providers = {name: provider(name, url, kind, timeouts) for name, url in urls.items()}
    config = RoutingConfig.model_validate({**QUICK_BACKOFF, **cfg})
    return Router(providers, {"m": deployments}, config, rng=random.Random(7))


async def call(router: Router, *, stream: bool = False) -> bytes:
    attempt = await router.open("m", build, stream=stream, client_headers={})
    try:
        return await attempt.reply.read()
    finally:
        await attempt.reply.close()


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
@pytest.mark.parametrize("status", [400, 401, 403])
async def test_upstream_messages_are_scrubbed_of_credentials_and_address(kind: str, status: int) -> None:
    async with FakeUpstream(default=Fault.echo_key(status)) as fake:
        router = make_router({"a": fake.base_url}, [Deployment("a", "x")], kind=kind)
        try:
            with pytest.raises(errors.GatewayError) as info:
                await call(router)
        finally:
            await router.aclose()
    message = info.value.message
    assert KEY in fake.requests[0].body.decode() + str(fake.requests[0].headers)
    host = fake.base_url.removeprefix("http://")
    assert KEY not in message and host not in message and "sk-ant" not in message
    assert "[redacted]" in message
    if status == 400:
        assert isinstance(info.value, errors.InvalidRequest)
    else:
        assert isinstance(info.value, errors.UpstreamFailed)
        assert "credentials for provider a" in message


@pytest.mark.parametrize(
    ("fault", "kind", "cls", "status"),
    [
        (Fault.hang(), "anthropic", errors.UpstreamTimeout, 504),
        (Fault.drop(), "anthropic", errors.UpstreamFailed, 502),
    ],
)
async def test_give_up_errors_follow_the_last_failure(
    fault: Fault, kind: str, cls: type[errors.GatewayError], status: int
) -> None:
    async with FakeUpstream(default=fault) as fake:
        router = make_router({"a": fake.base_url}, [Deployment("a", "x")], kind=kind, max_attempts=2)
        try:
            with pytest.raises(cls) as info:
                await call(router)
        finally:
            await router.aclose()
    assert info.value.http_status() == status
    assert fake.count == 2


async def test_unreachable_and_unconfigured_are_unavailable() -> None:
    router = make_router({"a": refused_base_url()}, [Deployment("a", "x")])
    try:
        with pytest.raises(errors.Unavailable) as info:
            await call(router)
        assert "127.0.0.1" not in info.value.message
        with pytest.raises(errors.Unavailable):
            await router.open("nope", build, stream=False, client_headers={})
    finally:
        await router.aclose()
