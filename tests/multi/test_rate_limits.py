"""The shared (Redis) rolling window: same decisions as the in-process one, exact across instances."""

from __future__ import annotations

import asyncio
import math
import random
import secrets
from typing import Any

import httpx

from modelgate.limits.redis_rpm import RedisRateLimiter
from modelgate.limits.rpm import RollingWindowLimiter
from tests.multi.conftest import NOW, post_chat, run
from tests.storage.engines import redis_url


async def test_redis_window_decides_exactly_like_the_in_process_window() -> None:
    """Same random traffic (bursts, ties, gaps, a lowered limit) to both: identical decisions."""
    shared = RedisRateLimiter(redis_url())
    local = RollingWindowLimiter()
    rng = random.Random(11)
    keys = [f"key_{secrets.token_hex(6)}" for _ in range(3)]
    now = NOW + 0.123456  # sub-millisecond parts must survive the trip through Redis
    try:
        for _ in range(1_500):
            now += rng.choice([0.0, 0.0, 0.001, 0.25, 1.7, 13.0, 59.999, 60.0])
            key = rng.choice(keys)
            limit = 5 if key == keys[0] and now > NOW + 900 else rng.choice([5, 5, 5, 8])
            expected = local.admit_now(key, limit, now)
            got = await shared.admit(key, limit, now)
            assert (got.admitted, got.limit, got.remaining) == (
                expected.admitted,
                expected.limit,
                expected.remaining,
            )
            assert math.isclose(got.reset_after, expected.reset_after, abs_tol=1e-6)
            assert got.retry_after == expected.retry_after and got.headers() == expected.headers()
        assert shared.fallback_decisions == 0 and not shared.degraded
    finally:
        await shared.aclose()


async def test_limiters_of_several_instances_admit_exactly_the_limit_together() -> None:
    limiters = [RedisRateLimiter(redis_url()) for _ in range(3)]
    key = f"key_{secrets.token_hex(6)}"
    try:
        for limiter in limiters:  # as Services.start does
            await limiter.start()
        decisions = await asyncio.gather(*(limiters[i % 3].admit(key, 120, NOW) for i in range(240)))
        assert sum(d.admitted for d in decisions) == 120
        refused = [d for d in decisions if not d.admitted]
        assert all(d.retry_after == 60 and d.remaining == 0 for d in refused)
        # The window rolls: 60 s later exactly 120 more.
        later = await asyncio.gather(*(limiters[i % 3].admit(key, 120, NOW + 60) for i in range(300)))
        assert sum(d.admitted for d in later) == 120
        assert all(limiter.fallback_decisions == 0 for limiter in limiters)  # Redis decided all
    finally:
        for limiter in limiters:
            await limiter.aclose()


def test_120_per_minute_offered_1200_per_minute_across_three_instances(make_cluster: Any) -> None:
    """Two simulated minutes at 10x the limit, spread round robin: no rolling 60 s window ever
    holds more than 120 admissions cluster-wide, and every 429's retry-after is exact."""
    limit, tick, per_tick, ticks = 120, 0.5, 10, 240  # 20 requests/s = 1,200/min for 120 s
    with make_cluster() as cluster:
        account = cluster.account("busy", 1_000_000_000)
        _, secret = cluster.key(account, "Basic", rpm=limit)
        admitted: list[float] = []
        refused: list[tuple[float, int]] = []
        statuses: set[int] = set()

        async def drive() -> None:
            async with httpx.AsyncClient() as client:
                for k in range(ticks):
                    now = NOW + k * tick
                    cluster.clock.set(now)
                    batch = await asyncio.gather(
                        *(
                            post_chat(client, cluster[(k * per_tick + j) % 3], secret, 16)
                            for j in range(per_tick)
                        )
                    )
                    for response in batch:
                        statuses.add(response.status_code)
                        if response.status_code == 200:
                            admitted.append(now)
                        elif response.status_code == 429:
                            refused.append((now, int(response.headers["retry-after"])))

        run(drive())
        assert statuses <= {200, 429}, statuses
        assert len(admitted) + len(refused) == ticks * per_tick
        # The window is full from the first minute's first 6 s, and again from t=60 s: 2 x 120.
        assert len(admitted) == 2 * limit
        admitted.sort()
        for t in admitted:
            assert sum(1 for a in admitted if t - 60 < a <= t) <= limit
        for t, retry_after in refused:
            window = [a for a in admitted if t - 60 < a <= t]
            assert len(window) == limit
            assert retry_after == max(1, math.ceil(min(window) + 60 - t))
