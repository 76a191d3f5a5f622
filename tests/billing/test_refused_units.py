"""Refused requests consume no rate-limit units: not when the limiter refuses (429), and not when
the ledger refuses after the limiter admitted (402), on either limiter."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import httpx

from modelgate.limits.redis_rpm import RedisRateLimiter
from modelgate.limits.rpm import RollingWindowLimiter
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
                assert refused.headers["ratelimit"].startswith("limit=3, remaining=3")
            gateway.call(gateway.management.add_credits(account, 10_000_000))
            statuses = [client.post("/v1/messages", json=BODY).status_code for _ in range(4)]
        # The six 402s used no units: the full limit of three is still there, then 429.
        assert statuses == [200, 200, 200, 429]


async def _refund_round_trip(limiter: RollingWindowLimiter | RedisRateLimiter, key: str) -> None:
    now = time.time()
    first = await limiter.admit(key, 2, now)
    second = await limiter.admit(key, 2, now)
    assert first.admitted and second.admitted
    assert not (await limiter.admit(key, 2, now + 1)).admitted
    await limiter.refund(key, second)
    again = await limiter.admit(key, 2, now + 2)
    assert again.admitted and again.remaining == 0
    assert not (await limiter.admit(key, 2, now + 3)).admitted


async def test_refund_in_process() -> None:
    await _refund_round_trip(RollingWindowLimiter(), "key_local")


async def test_refund_on_redis() -> None:
    limiter = RedisRateLimiter(redis_url())
    await limiter.start()
    try:
        await _refund_round_trip(limiter, f"key_{uuid.uuid4().hex}")
        assert limiter.fallback_decisions == 0  # the shared path was used, not the fallback
    finally:
        await limiter.aclose()
