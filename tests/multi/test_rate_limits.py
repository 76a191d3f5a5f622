"""The shared (Redis) buckets: same decisions as the in-process ones, exact across instances."""

from __future__ import annotations

import asyncio
import math
import random
import secrets
from typing import Any

import httpx

from modelgate.limits.key_limits import Claim, KeyLimits
from modelgate.limits.redis_tickets import RedisTickets
from modelgate.limits.tickets import BucketStore, Refused, Ticket
from tests.multi.conftest import NOW, post_chat, run
from tests.storage.engines import redis_url


def requests(key: str, limit: int) -> tuple[Claim, ...]:
    return KeyLimits(rpm=limit).claims(f"k:{key}", 0, 0)


async def test_redis_window_decides_exactly_like_the_in_process_window() -> None:
    """Same random traffic (bursts, ties, gaps, a lowered limit) to both: identical decisions."""
    shared = RedisTickets(redis_url())
    local = BucketStore()
    rng = random.Random(11)
    keys = [f"key_{secrets.token_hex(6)}" for _ in range(3)]
    now = NOW + 0.123456  # sub-millisecond parts must survive the trip through Redis
    try:
        for step in range(1_500):
            now += rng.choice([0.0, 0.0, 0.001, 0.25, 1.7, 13.0, 59.999, 60.0])
            key = rng.choice(keys)
            limit = 5 if key == keys[0] and now > NOW + 900 else rng.choice([5, 5, 5, 8])
            expected = local.admit(requests(key, limit), now, f"e{step}")
            got = await shared.take(requests(key, limit), now, f"g{step}")
            if isinstance(expected, Refused):
                assert isinstance(got, Refused)
                assert math.isclose(got.wait, expected.wait, abs_tol=1e-6)
                assert got.retry_after == expected.retry_after
                continue
            assert isinstance(got, Ticket)
            (mine,), (theirs,) = got.standing, expected.standing
            assert (mine.limit, mine.remaining) == (theirs.limit, theirs.remaining)
            assert math.isclose(mine.reset, theirs.reset, abs_tol=1e-6)
        assert shared.fallback_decisions == 0 and not shared.degraded
    finally:
        await shared.aclose()


async def test_redis_tokens_and_slots_decide_exactly_like_the_in_process_buckets() -> None:
    """Every resource at once, key and account, with settles and refunds: identical decisions
    and grants, and every slot back at the end."""
    shared = RedisTickets(redis_url())
    local = BucketStore()
    rng = random.Random(12)
    key, account = f"k:key_{secrets.token_hex(6)}", f"a:{rng.randrange(1 << 40)}"
    live: list[tuple[Ticket, Ticket]] = []
    now = NOW + 0.5
    try:
        for step in range(800):
            now += rng.choice([0.0, 0.01, 0.3, 2.0, 11.0])
            if live and rng.random() < 0.45:
                theirs, mine = live.pop(rng.randrange(len(live)))
                if rng.random() < 0.2:
                    local.refund(theirs)
                    shared.refund(mine)
                else:
                    used = rng.randrange(0, theirs.tokens + 50)
                    local.settle(theirs, used)
                    shared.settle(mine, used)
                await shared.ended()  # the end travels in the background
                continue
            asked = rng.randrange(1, 700)
            claims = (
                *KeyLimits(tpm=3000, max_concurrency=6, rpm=40).claims(key, asked, min(asked, 50)),
                *KeyLimits(tpm=4000, max_concurrency=5, rpm=60).claims(account, asked, min(asked, 50)),
            )
            expected = local.admit(claims, now, f"t{step}")
            got = await shared.take(claims, now, f"t{step}")
            if isinstance(expected, Refused):
                assert isinstance(got, Refused)
                assert (got.resource, got.subject) == (expected.resource, expected.subject)
                assert got.retry_after == expected.retry_after
                continue
            assert isinstance(got, Ticket) and got.tokens == expected.tokens
            assert [s.remaining for s in got.standing] == [s.remaining for s in expected.standing]
            live.append((expected, got))
        for theirs, mine in live:
            local.settle(theirs, 0)
            shared.settle(mine, 0)
        await shared.ended()
        slots = await asyncio.gather(
            *(shared._redis.zcard(f"modelgate:concurrency:{s}") for s in (key, account))
        )
        assert slots == [0, 0] and shared.fallback_decisions == 0
    finally:
        await shared.aclose()


async def test_limiters_of_several_instances_admit_exactly_the_limit_together() -> None:
    limiters = [RedisTickets(redis_url()) for _ in range(3)]
    key = f"key_{secrets.token_hex(6)}"
    try:
        for limiter in limiters:  # as Services.start does
            await limiter.start()
        taken = await asyncio.gather(
            *(limiters[i % 3].take(requests(key, 120), NOW, f"t{i}") for i in range(240))
        )
        assert sum(isinstance(t, Ticket) for t in taken) == 120
        refused = [t for t in taken if isinstance(t, Refused)]
        assert all(t.retry_after == 60 for t in refused)
        # The window rolls: 60 s later exactly 120 more.
        later = await asyncio.gather(
            *(limiters[i % 3].take(requests(key, 120), NOW + 60, f"u{i}") for i in range(300))
        )
        assert sum(isinstance(t, Ticket) for t in later) == 120
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
