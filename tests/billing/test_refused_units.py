"""Refused requests consume no rate-limit units: not when the limiter refuses (429), and not when
the ledger refuses after the limiter admitted (402), on either limiter."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import httpx

from modelgate.limits.key_limits import KeyLimits
from modelgate.limits.redis_tickets import RedisTickets
from modelgate.limits.tickets import LocalTickets, Ticket, TicketLimiter
from tests.gateway_server import running_gateway
from tests.storage.engines import redis_url

BODY = {"model": "aria-haiku-4.5", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}


def test_a_402_gives_its_rate_limit_unit_back(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "d") as gateway:
        account = gateway.account("poor", credits=0.000001)  # 1 µc: nothing is affordable
        key = gateway.key(account, "Basic", rpm=3).secret
        headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
        with httpx.Client(base_url=gateway.base_url, headers=headers) as client:
            for _ in range(6):  # twice the limit, all refused for money
                refused = client.post("/v1/messages", json=BODY)
                assert refused.status_code == 402
                assert refused.headers["ratelimit"].startswith("rpm;r=3;")
            gateway.call(gateway.management.add_credits(account, 10_000_000))
            statuses = [client.post("/v1/messages", json=BODY).status_code for _ in range(4)]
        # The six 402s used no units: the full limit of three is still there, then 429.
        assert statuses == [200, 200, 200, 429]


async def _refund_round_trip(limiter: TicketLimiter, key: str) -> None:
    now = time.time()
    claims = KeyLimits(rpm=2).claims(key, 0, 0)
    first = await limiter.take(claims, now, uuid.uuid4().hex)
    second = await limiter.take(claims, now, uuid.uuid4().hex)
    assert isinstance(first, Ticket) and isinstance(second, Ticket)
    assert not isinstance(await limiter.take(claims, now + 1, uuid.uuid4().hex), Ticket)
    limiter.settle(first, 0)  # a request that ran keeps its unit
    limiter.refund(second)
    limiter.refund(second)  # once: a second refund changes nothing
    if isinstance(limiter, RedisTickets):
        await limiter.ended()  # a shared backend sends ends in the background
    again = await limiter.take(claims, now + 2, uuid.uuid4().hex)
    assert isinstance(again, Ticket) and again.standing[0].remaining == 0
    assert not isinstance(await limiter.take(claims, now + 3, uuid.uuid4().hex), Ticket)


async def test_refund_in_process() -> None:
    await _refund_round_trip(LocalTickets(), "k:key_local")


async def test_refund_on_redis() -> None:
    limiter = RedisTickets(redis_url())
    await limiter.start()
    try:
        await _refund_round_trip(limiter, f"k:key_{uuid.uuid4().hex}")
        assert limiter.fallback_decisions == 0  # the shared path was used, not the fallback
    finally:
        await limiter.aclose()
