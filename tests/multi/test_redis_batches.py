"""Rate-limit admissions made together travel to Redis together (limits.redis_batch): one
connection for all of them, exact decisions, and a script Redis lost is loaded again."""

from __future__ import annotations

import asyncio
import secrets

import redis.asyncio as aioredis

from modelgate.limits.redis_rpm import RedisRateLimiter
from tests.multi.conftest import NOW
from tests.storage.engines import redis_url


async def test_admissions_of_one_turn_share_one_connection_and_decide_exactly() -> None:
    admin = aioredis.Redis.from_url(redis_url())
    before = {c["id"] for c in await admin.client_list()}
    limiter = RedisRateLimiter(redis_url())
    key = f"key_{secrets.token_hex(6)}"
    try:
        await limiter.start()
        decisions = await asyncio.gather(*(limiter.admit(key, 50, NOW) for _ in range(200)))
        assert sum(d.admitted for d in decisions) == 50 and limiter.fallback_decisions == 0
        opened = [c for c in await admin.client_list() if c["id"] not in before]
        # The pool's one connection (it loaded the script at start) and the admissions' one.
        assert len(opened) == 2, opened
    finally:
        await limiter.aclose()
        await admin.aclose()


async def test_a_script_redis_lost_is_loaded_again() -> None:
    limiter = RedisRateLimiter(redis_url())
    admin = aioredis.Redis.from_url(redis_url())
    key = f"key_{secrets.token_hex(6)}"
    try:
        await limiter.start()
        assert (await limiter.admit(key, 3, NOW)).admitted
        await admin.script_flush()  # what a restarted Redis looks like to the script
        decisions = await asyncio.gather(*(limiter.admit(key, 3, NOW + 1) for _ in range(4)))
        assert [d.admitted for d in decisions].count(True) == 2
        assert limiter.fallback_decisions == 0 and not limiter.degraded
    finally:
        await limiter.aclose()
        await admin.aclose()
