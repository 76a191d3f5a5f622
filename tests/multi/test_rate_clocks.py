"""Processes whose clocks disagree share one rate window (Redis across instances, the parent's
window across workers) without locking a key: an admission stamped by a process whose clock is
ahead counts as made now, so no key waits longer than one window (``limits.rpm``)."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable

import pytest

from modelgate.limits.key_limits import KeyLimits
from modelgate.limits.redis_tickets import RedisTickets
from modelgate.limits.rpm import WINDOW_SECONDS
from modelgate.limits.tickets import LocalTickets, Refused, Ticket, TicketLimiter
from tests.multi.conftest import NOW
from tests.storage.engines import redis_url

AHEAD = 7200.0  # the other process's clock is two hours ahead


async def _window_with_a_clock_ahead(
    admit_ahead: Callable[[], Awaitable[Ticket | Refused]],
    admit_now: Callable[[float], Awaitable[Ticket | Refused]],
) -> None:
    for _ in range(5):
        assert isinstance(await admit_ahead(), Ticket)
    refused = await admit_now(NOW)
    assert isinstance(refused, Refused) and refused.retry_after <= WINDOW_SECONDS
    assert isinstance(await admit_now(NOW + WINDOW_SECONDS + 1), Ticket)


def _taker(limiter: TicketLimiter, key: str) -> Callable[[float], Awaitable[Ticket | Refused]]:
    claims = KeyLimits(rpm=5).claims(key, 0, 0)

    async def take(at: float) -> Ticket | Refused:
        return await limiter.take(claims, at, secrets.token_hex(8))

    return take


async def test_in_process_window_with_an_admission_stamped_two_hours_ahead() -> None:
    take = _taker(LocalTickets(), "k:key")
    await _window_with_a_clock_ahead(lambda: take(NOW + AHEAD), take)


@pytest.mark.parametrize("behind", [False, True])
async def test_redis_window_shared_with_an_instance_two_hours_ahead(behind: bool) -> None:
    first, second = RedisTickets(redis_url()), RedisTickets(redis_url())
    key = f"k:key_{secrets.token_hex(6)}"
    try:
        await first.start()
        await second.start()
        ahead = _taker(first, key)
        await _window_with_a_clock_ahead(lambda: ahead(NOW + AHEAD), _taker(first if behind else second, key))
        assert first.fallback_decisions == second.fallback_decisions == 0
    finally:
        await first.aclose()
        await second.aclose()
