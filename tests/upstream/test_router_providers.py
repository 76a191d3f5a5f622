"""Router behaviour with real providers against fake upstreams on loopback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import orjson
import pytest

from modelgate import errors
from modelgate.upstream.base import Deployment, Dialect, Provider, StreamBroken
from modelgate.upstream.config import ProviderConfig, RoutingConfig, TimeoutConfig
from modelgate.upstream.providers import build_provider
from modelgate.upstream.router import Router
from tests.fakes import FakeUpstream, Fault, Reply, refused_base_url

KEY = "sk-ant-api03-UPSTREAMSECRETVALUE0123456789abcdef"
FAST = TimeoutConfig(connect=0.5, first_byte=0.2, idle=0.2, total=5.0)
#: For load tests whose assertions count attempts: a slow moment on a busy machine is no failure.
PATIENT = TimeoutConfig(connect=5.0, first_byte=5.0, idle=5.0, total=20.0)
QUICK_BACKOFF: dict[str, Any] = {"backoff_base": 0.001, "backoff_max": 0.005}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def provider(name: str, base_url: str, kind: str = "anthropic", timeouts: TimeoutConfig = FAST) -> Provider:
    cfg = ProviderConfig.model_validate(
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


async def build_stream(deployment: Deployment, provider: Provider) -> tuple[Dialect, bytes]:
    body = {"model": deployment.upstream_model, "max_tokens": 5, "stream": True, "messages": []}
    return "messages", orjson.dumps(body)


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
    return Router(providers, {"m": deployments}, config)


async def call(router: Router, *, stream: bool = False) -> bytes:
    attempt = await router.open("m", build, stream=stream, client_headers={})
    try:
        return await attempt.reply.read()
    finally:
        await attempt.reply.close()


async def test_failover_keeps_99_9_percent_success_with_one_dead_deployment() -> None:
    async with FakeUpstream(default=Fault.status(500)) as bad, FakeUpstream() as good:
        router = make_router(
            {"bad": bad.base_url, "good": good.base_url},
            [Deployment("bad", "claude-a"), Deployment("good", "claude-b")],
            timeouts=PATIENT,
        )
        ok = 0
        queue = iter(range(2000))

        async def worker() -> None:
            nonlocal ok
            for _ in queue:
                try:
                    body = await call(router)
                except errors.GatewayError:
                    continue
                ok += body.startswith(b'{"id":"msg_')

        try:
            await asyncio.gather(*(worker() for _ in range(50)))
        finally:
            await router.aclose()
    assert ok >= 1998
    assert good.count == ok
    # Cooldown kicks in after 3 consecutive failures; only requests already racing hit it.
    assert bad.count <= 100
    assert {r.json()["model"] for r in good.requests} == {"claude-b"}


async def test_retry_after_is_honoured_on_the_same_deployment() -> None:
    script = [Fault.status(429, retry_after=0.3), Fault.status(529, retry_after_ms=150), Reply()]
    async with FakeUpstream(script=script) as fake:
        router = make_router({"a": fake.base_url}, [Deployment("a", "x")])
        start = time.monotonic()
        try:
            attempt = await router.open("m", build, stream=False, client_headers={})
            await attempt.reply.close()
        finally:
            await router.aclose()
        assert attempt.attempts == 3
        assert time.monotonic() - start >= 0.45
        assert fake.count == 3


async def test_retry_after_beyond_cap_gives_up_or_fails_over() -> None:
    async with FakeUpstream(default=Fault.status(429, retry_after=10)) as limited, FakeUpstream() as spare:
        alone = make_router({"a": limited.base_url}, [Deployment("a", "x")])
        start = time.monotonic()
        try:
            with pytest.raises(errors.RateLimited) as info:
                await call(alone)
        finally:
            await alone.aclose()
        assert time.monotonic() - start < 1.0
        assert info.value.headers["retry-after"] == "10"
        assert limited.count == 1

        both = make_router(
            {"a": limited.base_url, "b": spare.base_url},
            [Deployment("a", "x", weight=1000), Deployment("b", "y")],
        )
        try:
            for _ in range(5):
                await call(both)
        finally:
            await both.aclose()
        # The first request failed over; the retry-after hold kept later ones off "a".
        assert limited.count == 2
        assert spare.count == 5


async def test_cooldown_then_single_probe_lets_the_deployment_back() -> None:
    clock = Clock()
    script = [Fault.status(500)] * 3
    async with FakeUpstream(script=script) as flaky, FakeUpstream() as steady:
        providers = {"a": provider("a", flaky.base_url), "b": provider("b", steady.base_url)}
        router = Router(
            providers,
            {"m": [Deployment("a", "x", weight=1000), Deployment("b", "y")]},
            RoutingConfig(cooldown=30, failures_to_cooldown=3, **QUICK_BACKOFF),
            clock=clock,
        )
        try:
            for _ in range(3):
                await call(router)  # "a" fails, "b" serves
            assert flaky.count == 3
            assert not router.health.available(Deployment("a", "x", 1000))
            for _ in range(5):
                await call(router)
            assert flaky.count == 3  # skipped while cooling
            clock.now += 31
            await call(router)  # the probe: "a" now answers
            assert flaky.count == 4
            for _ in range(5):
                await call(router)
            assert flaky.count == 9  # back in rotation at its weight
        finally:
            await router.aclose()
        assert router.health.consecutive_failures(Deployment("a", "x", 1000)) == 0


async def test_all_cooling_still_tries_the_earliest() -> None:
    async with FakeUpstream(default=Fault.status(500)) as fake:
        router = make_router({"a": fake.base_url}, [Deployment("a", "x")], max_attempts=1)
        try:
            for _ in range(5):
                with pytest.raises(errors.UpstreamFailed):
                    await call(router)
        finally:
            await router.aclose()
    assert fake.count == 5


async def test_retry_budget_bounds_attempts_in_a_full_outage() -> None:
    async with FakeUpstream(default=Fault.status(503)) as a, FakeUpstream(default=Fault.status(503)) as b:
        router = make_router(
            {"a": a.base_url, "b": b.base_url},
            [Deployment("a", "x"), Deployment("b", "y")],
            max_attempts=3,
            retry_budget_ratio=0.2,
            retry_budget_min_per_second=0,
        )
        queue = iter(range(300))

        async def worker() -> None:
            for _ in queue:
                with pytest.raises(errors.UpstreamFailed) as info:
                    await call(router)
                assert info.value.status_for("messages") == 502

        try:
            await asyncio.gather(*(worker() for _ in range(20)))
        finally:
            await router.aclose()
    attempts = a.count + b.count
    assert 300 < attempts <= 300 * 1.2 + 1


async def test_no_retry_once_a_2xx_reply_is_returned() -> None:
    async with FakeUpstream(script=[Fault.reset_after(2)]) as fake:
        router = make_router({"a": fake.base_url}, [Deployment("a", "x")])
        try:
            attempt = await router.open("m", build_stream, stream=True, client_headers={})
            assert attempt.reply.status == 200
            with pytest.raises(StreamBroken):
                async for _ in attempt.reply.iter_chunks():
                    pass
            await attempt.reply.close()
        finally:
            await router.aclose()
    assert fake.count == 1


@pytest.mark.parametrize(
    ("fault", "cls", "status"),
    [
        (Fault.status(422, message="messages.0: unprocessable"), errors.InvalidRequest, 422),
        (Fault.status(400, message="max_tokens: too big"), errors.InvalidRequest, None),
        (Fault.status(404, message="model: claude-x not found"), errors.NotFound, None),
        (Fault.status(413), errors.RequestTooLarge, None),
        (
            Fault.status(403, message="This organization may not use that model"),
            errors.PermissionDenied,
            None,
        ),
    ],
)
async def test_client_errors_are_relayed_not_retried(
    fault: Fault, cls: type[errors.GatewayError], status: int | None
) -> None:
    async with FakeUpstream(default=fault) as a, FakeUpstream() as b:
        router = make_router(
            {"a": a.base_url, "b": b.base_url}, [Deployment("a", "x", 1000), Deployment("b", "y")]
        )
        try:
            with pytest.raises(cls) as info:
                await call(router)
        finally:
            await router.aclose()
    assert type(info.value) is cls
    assert info.value.status == status
    assert fault.message is None or info.value.message == fault.message
    assert a.count == 1 and b.count == 0


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
    "fault", [Fault.status(401), Fault.status(402), Fault.status(403, message="invalid api key")]
)
async def test_a_refused_upstream_credential_fails_over_and_cools_that_deployment(fault: Fault) -> None:
    async with FakeUpstream(default=fault) as a, FakeUpstream() as b:
        router = make_router(
            {"a": a.base_url, "b": b.base_url}, [Deployment("a", "x", 1000), Deployment("b", "y")]
        )
        try:
            first = await call(router)  # "a" is chosen first (weight), refuses our key, "b" serves
            assert first.startswith(b'{"id":"msg_') and (a.count, b.count) == (1, 1)
            for _ in range(5):  # the refused deployment cools down at once: it is not asked again
                await call(router)
        finally:
            await router.aclose()
    assert (a.count, b.count) == (1, 6)


async def test_a_refused_credential_on_the_only_deployment_is_not_retried() -> None:
    async with FakeUpstream(default=Fault.status(401)) as a:
        router = make_router({"a": a.base_url}, [Deployment("a", "x")])
        try:
            with pytest.raises(errors.UpstreamFailed) as info:
                await call(router)
        finally:
            await router.aclose()
    assert a.count == 1
    assert "rejected the gateway's credentials for provider a" in info.value.message


async def test_foreign_secret_like_strings_are_scrubbed() -> None:
    leaked = "sk-proj-abcdefghijklmnopqrstuvwxyz0123"
    async with FakeUpstream(default=Fault.status(400, message=f"bad token {leaked} here")) as fake:
        router = make_router({"a": fake.base_url}, [Deployment("a", "x")])
        try:
            with pytest.raises(errors.InvalidRequest) as info:
                await call(router)
        finally:
            await router.aclose()
    assert info.value.message == "bad token [redacted] here"


@pytest.mark.parametrize(
    ("fault", "kind", "cls", "status"),
    [
        (Fault.overloaded(), "anthropic", errors.Overloaded, 529),
        (Fault.overloaded(), "openai", errors.Overloaded, 529),
        (Fault.status(500), "anthropic", errors.UpstreamFailed, 502),
        (Fault.status(502), "openai", errors.UpstreamFailed, 502),
        (Fault.status(504), "anthropic", errors.UpstreamTimeout, 504),
        (Fault.status(429, retry_after=2), "openai", errors.RateLimited, 429),
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
    assert info.value.status_for("messages") == status
    assert fake.count == 2
    if status == 429:
        assert info.value.headers["retry-after"] == "2"


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


async def test_weights_split_traffic() -> None:
    async with FakeUpstream() as a, FakeUpstream() as b:
        router = make_router(
            {"a": a.base_url, "b": b.base_url}, [Deployment("a", "x", 3), Deployment("b", "y", 1)]
        )
        try:
            queue = iter(range(400))

            async def worker() -> None:
                for _ in queue:
                    await call(router)

            await asyncio.gather(*(worker() for _ in range(20)))
        finally:
            await router.aclose()
    assert 240 <= a.count <= 360 and a.count + b.count == 400


async def test_router_rejects_unknown_provider() -> None:
    with pytest.raises(ValueError, match="ghost"):
        Router({}, {"m": [Deployment("ghost", "x")]}, RoutingConfig())
