"""Processes whose clocks disagree share one rate window (Redis across instances, the parent's
window across workers) without locking a key: an admission stamped by a process whose clock is
ahead counts as made now, so no key waits longer than one window (``limits.rpm``)."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable

import pytest

from modelgate.limits.redis_rpm import RedisRateLimiter
from modelgate.limits.rpm import WINDOW_SECONDS, Decision, RollingWindowLimiter
from tests.multi.conftest import NOW
from tests.storage.engines import redis_url

AHEAD = 7200.0  # the other process's clock is two hours ahead


async def _window_with_a_clock_ahead(
    admit_ahead: Callable[[], Awaitable[Decision]], admit_now: Callable[[float], Awaitable[Decision]]
) -> None:
    for _ in range(5):
        assert (await admit_ahead()).admitted
    refused = await admit_now(NOW)
    assert not refused.admitted and refused.retry_after <= WINDOW_SECONDS
    assert (await admit_now(NOW + WINDOW_SECONDS + 1)).admitted


async def test_in_process_window_with_an_admission_stamped_two_hours_ahead() -> None:
    limiter = RollingWindowLimiter()

    async def ahead() -> Decision:
        return await limiter.admit("key", 5, NOW + AHEAD)

    async def now(at: float) -> Decision:
        return await limiter.admit("key", 5, at)

    await _window_with_a_clock_ahead(ahead, now)


@pytest.mark.parametrize("behind", [False, True])
async def test_redis_window_shared_with_an_instance_two_hours_ahead(behind: bool) -> None:
    first, second = RedisRateLimiter(redis_url()), RedisRateLimiter(redis_url())
    key = f"key_{secrets.token_hex(6)}"
    try:
        await first.start()
        await second.start()

        async def ahead() -> Decision:
            return await first.admit(key, 5, NOW + AHEAD)

        async def now(at: float) -> Decision:
            return await (first if behind else second).admit(key, 5, at)

        await _window_with_a_clock_ahead(ahead, now)
        assert first.fallback_decisions == second.fallback_decisions == 0
    finally:
        await first.aclose()
        await second.aclose()
