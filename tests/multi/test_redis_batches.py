"""Rate-limit admissions made together travel to Redis together (limits.redis_batch): one
connection for all of them, exact decisions, and a script Redis lost is loaded again."""

from __future__ import annotations

import asyncio
import secrets

import redis.asyncio as aioredis

from modelgate.limits.key_limits import KeyLimits
from modelgate.limits.redis_tickets import RedisTickets
from modelgate.limits.tickets import Ticket
from tests.multi.conftest import NOW
from tests.storage.engines import redis_url


async def test_admissions_of_one_turn_share_one_connection_and_decide_exactly() -> None:
    admin = aioredis.Redis.from_url(redis_url())
    before = {c["id"] for c in await admin.client_list()}
    limiter = RedisTickets(redis_url())
    claims = KeyLimits(rpm=50).claims(f"k:key_{secrets.token_hex(6)}", 0, 0)
    try:
        await limiter.start()
        taken = await asyncio.gather(*(limiter.take(claims, NOW, f"t{i}") for i in range(200)))
        assert sum(isinstance(t, Ticket) for t in taken) == 50 and limiter.fallback_decisions == 0
        opened = [c for c in await admin.client_list() if c["id"] not in before]
        # The pool's one connection (it loaded the scripts at start) and the admissions' one.
        assert len(opened) == 2, opened
    finally:
        await limiter.aclose()
        await admin.aclose()


async def test_a_script_redis_lost_is_loaded_again() -> None:
    limiter = RedisTickets(redis_url())
    admin = aioredis.Redis.from_url(redis_url())
    claims = KeyLimits(rpm=3).claims(f"k:key_{secrets.token_hex(6)}", 0, 0)
    try:
        await limiter.start()
        assert isinstance(await limiter.take(claims, NOW, "first"), Ticket)
        await admin.script_flush()  # what a restarted Redis looks like to the script
        taken = await asyncio.gather(*(limiter.take(claims, NOW + 1, f"t{i}") for i in range(4)))
        assert [isinstance(t, Ticket) for t in taken].count(True) == 2
        assert limiter.fallback_decisions == 0 and not limiter.degraded
    finally:
        await limiter.aclose()
        await admin.aclose()
