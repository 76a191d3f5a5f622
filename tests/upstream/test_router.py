"""Router behaviour (choice, retries, retry-after, cooldown, retry budget, weights) against
in-process scripted providers: no sockets, the router's clock, sleep and random source injected.

What needs a real provider on a socket (secrets scrubbed from upstream text, refused connections,
hanging and dropped upstreams) is in test_router_providers.py.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import pytest

from modelgate import errors
from modelgate.upstream.base import Deployment, Dialect, Provider, StreamBroken
from modelgate.upstream.config import RoutingConfig
from modelgate.upstream.router import Router
from tests.fakes.scripted import RecordedSleep, Respond, ScriptedProvider


class Clock:
    """The router's monotonic clock, moved by hand (cooldowns and the retry budget read it)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def build(deployment: Deployment, provider: Provider) -> tuple[Dialect, bytes]:
    body = {
        "model": deployment.upstream_model,
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
    }
    return "messages", orjson.dumps(body)


def make_router(
    providers: Sequence[ScriptedProvider],
    deployments: list[Deployment],
    *,
    seed: int = 7,
    clock: Clock | None = None,
    sleep: RecordedSleep | None = None,
    **cfg: Any,
) -> Router:
    return Router(
        {p.name: p for p in providers},
        {"m": deployments},
        RoutingConfig.model_validate(cfg),
        clock=clock or Clock(),
        rng=random.Random(seed),
        sleep=sleep or RecordedSleep(),
    )


async def call(router: Router, *, stream: bool = False) -> bytes:
    attempt = await router.open("m", build, stream=stream, client_headers={})
    try:
        return await attempt.reply.read()
    finally:
        await attempt.reply.close()


async def test_failover_keeps_99_9_percent_success_with_one_dead_deployment() -> None:
    bad = ScriptedProvider("bad", default=Respond.error(500))
    good = ScriptedProvider("good")
    router = make_router([bad, good], [Deployment("bad", "claude-a"), Deployment("good", "claude-b")])
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

    await asyncio.gather(*(worker() for _ in range(50)))
    assert ok >= 1998
    assert good.count == ok
    # Cooldown kicks in after 3 consecutive failures; only requests already racing hit it.
    assert bad.count <= 100
    assert {sent.json()["model"] for sent in good.sent} == {"claude-b"}


async def test_retry_after_is_honoured_on_the_same_deployment() -> None:
    limited = ScriptedProvider(
        "a",
        [
            Respond.error(429, headers={"retry-after": "0.3"}),
            Respond.error(529, headers={"retry-after-ms": "150"}),
        ],
    )
    sleep = RecordedSleep()
    router = make_router([limited], [Deployment("a", "x")], sleep=sleep)
    attempt = await router.open("m", build, stream=False, client_headers={})
    await attempt.reply.close()
    assert attempt.attempts == 3
    assert sleep.delays == [0.3, 0.15]  # each retry waited what the upstream asked, no more
    assert limited.count == 3


async def test_retry_after_beyond_cap_gives_up_or_fails_over() -> None:
    limited = ScriptedProvider("a", default=Respond.error(429, headers={"retry-after": "10"}))
    spare = ScriptedProvider("b")
    sleep = RecordedSleep()
    alone = make_router([limited], [Deployment("a", "x")], sleep=sleep)
    with pytest.raises(errors.RateLimited) as info:
        await call(alone)
    assert sleep.delays == []  # given up at once, not after waiting
    assert info.value.headers["retry-after"] == "10"
    assert limited.count == 1

    both = make_router([limited, spare], [Deployment("a", "x", weight=1000), Deployment("b", "y")])
    for _ in range(5):
        await call(both)
    # The first request failed over; the retry-after hold kept later ones off "a".
    assert limited.count == 2
    assert spare.count == 5


async def test_cooldown_then_single_probe_lets_the_deployment_back() -> None:
    clock = Clock()
    flaky = ScriptedProvider("a", [Respond.error(500)] * 3)
    steady = ScriptedProvider("b")
    router = make_router(
        [flaky, steady],
        [Deployment("a", "x", weight=1000), Deployment("b", "y")],
        clock=clock,
        cooldown=30,
        failures_to_cooldown=3,
    )
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
    assert router.health.consecutive_failures(Deployment("a", "x", 1000)) == 0


async def test_all_cooling_still_tries_the_earliest() -> None:
    down = ScriptedProvider("a", default=Respond.error(500))
    router = make_router([down], [Deployment("a", "x")], max_attempts=1)
    for _ in range(5):
        with pytest.raises(errors.UpstreamFailed):
            await call(router)
    assert down.count == 5


async def test_retry_budget_bounds_attempts_in_a_full_outage() -> None:
    a = ScriptedProvider("a", default=Respond.error(503))
    b = ScriptedProvider("b", default=Respond.error(503))
    router = make_router(
        [a, b],
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
            assert info.value.http_status() == 502

    await asyncio.gather(*(worker() for _ in range(20)))
    attempts = a.count + b.count
    assert 300 < attempts <= 300 * 1.2 + 1


async def test_no_retry_once_a_2xx_reply_is_returned() -> None:
    broken = Respond.events(
        b"event: ping\ndata: {}\n\n", b"event: ping\ndata: {}\n\n", fail=StreamBroken("reset")
    )
    upstream = ScriptedProvider("a", [broken])
    router = make_router([upstream], [Deployment("a", "x")])
    attempt = await router.open("m", build, stream=True, client_headers={})
    assert attempt.reply.status == 200
    with pytest.raises(StreamBroken):
        async for _ in attempt.reply.iter_chunks():
            pass
    await attempt.reply.close()
    assert upstream.count == 1


@pytest.mark.parametrize(
    ("step", "cls", "status"),
    [
        (Respond.error(422, "messages.0: unprocessable"), errors.InvalidRequest, 422),
        (Respond.error(400, "max_tokens: too big"), errors.InvalidRequest, None),
        (Respond.error(404, "model: claude-x not found"), errors.NotFound, None),
        (Respond.error(413, "Request exceeds the maximum allowed size"), errors.RequestTooLarge, None),
        (Respond.error(403, "This organization may not use that model"), errors.PermissionDenied, None),
    ],
)
async def test_client_errors_are_relayed_not_retried(
    step: Respond, cls: type[errors.GatewayError], status: int | None
) -> None:
    refusing = ScriptedProvider("a", default=step)
    spare = ScriptedProvider("b")
    router = make_router([refusing, spare], [Deployment("a", "x", 1000), Deployment("b", "y")])
    with pytest.raises(cls) as info:
        await call(router)
    assert type(info.value) is cls
    assert info.value.status == status
    assert info.value.message == orjson.loads(step.chunks[0])["error"]["message"]
    assert refusing.count == 1 and spare.count == 0


@pytest.mark.parametrize(
    "step",
    [
        Respond.error(401, "invalid x-api-key", error_type="authentication_error"),
        Respond.error(402, "credit balance too low", error_type="billing_error"),
        Respond.error(403, "invalid api key", error_type="permission_error"),
    ],
)
async def test_a_refused_upstream_credential_fails_over_and_cools_that_deployment(step: Respond) -> None:
    refusing = ScriptedProvider("a", default=step)
    spare = ScriptedProvider("b")
    router = make_router([refusing, spare], [Deployment("a", "x", 1000), Deployment("b", "y")])
    first = await call(router)  # "a" is chosen first (weight), refuses our key, "b" serves
    assert first.startswith(b'{"id":"msg_') and (refusing.count, spare.count) == (1, 1)
    for _ in range(5):  # the refused deployment cools down at once: it is not asked again
        await call(router)
    assert (refusing.count, spare.count) == (1, 6)


async def test_a_refused_credential_on_the_only_deployment_is_not_retried() -> None:
    refusing = ScriptedProvider("a", default=Respond.error(401, error_type="authentication_error"))
    router = make_router([refusing], [Deployment("a", "x")])
    with pytest.raises(errors.UpstreamFailed) as info:
        await call(router)
    assert refusing.count == 1
    assert "rejected the gateway's credentials for provider a" in info.value.message


async def test_foreign_secret_like_strings_are_scrubbed() -> None:
    leaked = "sk-proj-abcdefghijklmnopqrstuvwxyz0123"
    refusing = ScriptedProvider("a", default=Respond.error(400, f"bad token {leaked} here"))
    router = make_router([refusing], [Deployment("a", "x")])
    with pytest.raises(errors.InvalidRequest) as info:
        await call(router)
    assert info.value.message == "bad token [redacted] here"


OPENAI_OVERLOADED = Respond.json(
    {
        "error": {
            "message": "The server is overloaded, please try again later.",
            "type": "server_error",
            "param": None,
            "code": "overloaded",
        }
    },
    status=503,
)


@pytest.mark.parametrize(
    ("step", "cls", "status"),
    [
        (Respond.error(529, "Overloaded", error_type="overloaded_error"), errors.Overloaded, 529),
        (OPENAI_OVERLOADED, errors.Overloaded, 529),
        (Respond.error(500), errors.UpstreamFailed, 502),
        (Respond.error(502), errors.UpstreamFailed, 502),
        (Respond.error(504), errors.UpstreamTimeout, 504),
        (Respond.error(429, headers={"retry-after": "2"}), errors.RateLimited, 429),
    ],
)
async def test_give_up_errors_follow_the_last_failure(
    step: Respond, cls: type[errors.GatewayError], status: int
) -> None:
    failing = ScriptedProvider("a", default=step)
    router = make_router([failing], [Deployment("a", "x")], max_attempts=2)
    with pytest.raises(cls) as info:
        await call(router)
    assert info.value.http_status() == status
    assert failing.count == 2
    if status == 429:
        assert info.value.headers["retry-after"] == "2"


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_weights_split_traffic(seed: int) -> None:
    a, b = ScriptedProvider("a"), ScriptedProvider("b")
    router = make_router([a, b], [Deployment("a", "x", 3), Deployment("b", "y", 1)], seed=seed)
    queue = iter(range(400))

    async def worker() -> None:
        for _ in queue:
            await call(router)

    await asyncio.gather(*(worker() for _ in range(20)))
    assert 240 <= a.count <= 360 and a.count + b.count == 400


async def test_backoff_is_full_jitter_under_an_exponential_ceiling() -> None:
    """Between attempts on different deployments the router sleeps uniform(0, ceiling), the
    ceiling doubling per retry up to ``backoff_max``; the seeded source makes the draws exact."""
    down = [ScriptedProvider(name, default=Respond.error(503)) for name in ("a", "b", "c", "d")]
    sleep = RecordedSleep()
    config: dict[str, Any] = {"max_attempts": 4, "backoff_base": 0.1, "backoff_max": 0.25}
    router = make_router(down, [Deployment(p.name, "x") for p in down], sleep=sleep, seed=11, **config)
    with pytest.raises(errors.UpstreamFailed):
        await call(router)
    assert [p.count for p in down] == [1, 1, 1, 1]  # every retry went to an untried deployment
    ceilings = [0.1, 0.2, 0.25]
    assert len(sleep.delays) == 3
    assert all(0 <= d <= c for d, c in zip(sleep.delays, ceilings, strict=True))
    # The same seed draws the same choices and delays: the router's randomness is all injected.
    again = RecordedSleep()
    replay = [ScriptedProvider(p.name, default=Respond.error(503)) for p in down]
    rerun = make_router(replay, [Deployment(p.name, "x") for p in replay], sleep=again, seed=11, **config)
    with pytest.raises(errors.UpstreamFailed):
        await call(rerun)
    assert again.delays == sleep.delays
    assert [s.json()["model"] for p in replay for s in p.sent] == [
        s.json()["model"] for p in down for s in p.sent
    ]


async def test_a_stream_that_breaks_after_opening_cools_its_deployment_through_the_callback() -> None:
    """The relay reports a mid-stream failure with ``Attempt.report_failure``: a deployment that
    keeps breaking its streams must cool down."""
    breaking = ScriptedProvider("a", default=Respond.events(b"data: {}\n\n", fail=StreamBroken("reset")))
    spare = ScriptedProvider("b")
    router = make_router(
        [breaking, spare], [Deployment("a", "x", 1000), Deployment("b", "y")], failures_to_cooldown=1
    )
    attempt = await router.open("m", build, stream=True, client_headers={})
    assert attempt.deployment.provider == "a"
    with pytest.raises(StreamBroken):
        async for _ in attempt.reply.iter_chunks():
            pass
    attempt.report_failure()
    await attempt.reply.close()
    assert router.health.consecutive_failures(Deployment("a", "x", 1000)) == 1
    assert not router.health.available(Deployment("a", "x", 1000))
    following = await router.open("m", build, stream=True, client_headers={})
    await following.reply.close()
    assert following.deployment.provider == "b" and breaking.count == 1


async def test_streams_broken_after_their_2xx_add_up_to_a_cooldown_and_a_whole_stream_clears() -> None:
    """A stream's 2xx head is no verdict: with ``failures_to_cooldown = 2``, two streams that break
    after opening cool the deployment (a head-time success used to reset the count each time, so
    it never cooled); a stream that runs to its end clears the failures."""
    dep = Deployment("a", "x")
    breaking = ScriptedProvider("a", default=Respond.events(b"data: {}\n\n", fail=StreamBroken("reset")))
    router = make_router([breaking], [dep], failures_to_cooldown=2, cooldown=60.0)

    async def broken_stream() -> None:
        attempt = await router.open("m", build, stream=True, client_headers={})
        with pytest.raises(StreamBroken):
            async for _ in attempt.reply.iter_chunks():
                pass
        attempt.report_failure()
        await attempt.reply.close()

    await broken_stream()
    assert router.health.consecutive_failures(dep) == 1 and router.health.available(dep)
    await broken_stream()
    assert router.health.consecutive_failures(dep) == 2 and not router.health.available(dep)

    healthy = ScriptedProvider("a", default=Respond.events(b"data: {}\n\n"))
    router = make_router([healthy], [dep], failures_to_cooldown=2, cooldown=60.0)
    await broken_stream_on(router)
    assert router.health.consecutive_failures(dep) == 1
    attempt = await router.open("m", build, stream=True, client_headers={})
    assert router.health.consecutive_failures(dep) == 1  # the head alone changes nothing
    async for _ in attempt.reply.iter_chunks():
        pass
    attempt.report_success()
    await attempt.reply.close()
    assert router.health.consecutive_failures(dep) == 0
    # A whole (non-streamed) 2xx is its own verdict.
    router.health.failed(dep)
    whole = await router.open("m", build, stream=False, client_headers={})
    await whole.reply.close()
    assert router.health.consecutive_failures(dep) == 0


async def broken_stream_on(router: Router) -> None:
    """One stream on ``router`` reported broken after its head (as the relay does)."""
    attempt = await router.open("m", build, stream=True, client_headers={})
    attempt.report_failure()
    await attempt.reply.close()


async def test_router_rejects_unknown_provider() -> None:
    with pytest.raises(ValueError, match="ghost"):
        Router({}, {"m": [Deployment("ghost", "x")]}, RoutingConfig())


async def test_aclose_closes_every_provider() -> None:
    providers: Mapping[str, ScriptedProvider] = {"a": ScriptedProvider("a"), "b": ScriptedProvider("b")}
    router = make_router(list(providers.values()), [Deployment("a", "x"), Deployment("b", "y")])
    await router.aclose()
    assert all(p.closed for p in providers.values())
