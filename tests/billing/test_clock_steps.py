"""Time that cannot jump: the wall clock of a running gateway stepped two hours back or forward
(NTP correcting a drifted clock, an operator, a restored VM) locks no key and releases no live hold.

The step goes through the gateway's clock seam (``modelgate.clock``; ``ManualClock.step`` moves
its wall clock only, as a real step moves ``CLOCK_REALTIME`` but not ``CLOCK_MONOTONIC``), in the
real gateway serving real requests; ``ManualClock.advance`` lets time pass on both clocks.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import httpx

from modelgate.billing.ledger import UsageStatus
from modelgate.clock import month_of
from tests.billing.helpers import body_for, headers_for, send
from tests.gateway_server import GatewayServer, ManualClock, running_gateway
from tests.polling import wait_until
from tests.whole_store import whole_store

START = datetime(2026, 7, 14, 9, tzinfo=UTC).timestamp()
TWO_HOURS = 7200.0
#: Slow answers (about four seconds each): the steps land while they are in flight.
SIMULATOR = {"tokens_per_second": 20, "reply_words": 80}
BILLING = {"reservation_ttl_seconds": 60, "sweep_interval_seconds": 0.02}


def test_wall_clock_stepped_back_after_a_key_filled_its_window_does_not_lock_it(tmp_path: Path) -> None:
    clock = ManualClock(START)
    with running_gateway(tmp_path / "data", clock=clock) as gateway:
        issued = gateway.key(gateway.account("acme"), "Basic", rpm=5)

        async def run() -> None:
            async with httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as client:

                async def one() -> httpx.Headers:
                    seen = await send(client, "messages", issued.secret, "aria-haiku-4.5", max_tokens=5)
                    if seen.status == 429:
                        # Never more than one window: the key is never locked.
                        assert int(seen.headers["retry-after"]) <= 60, seen.headers
                    return seen.headers if seen.status == 200 else httpx.Headers()

                assert all([await one() for _ in range(5)])
                assert not await one()  # the window is full
                clock.step(-TWO_HOURS)
                assert not await one()  # still full: no step frees it either
                clock.advance(61)
                assert await one(), "the key was locked by the step back"
                clock.step(+2 * TWO_HOURS)  # and forward again, past the first step
                for _ in range(4):
                    assert await one()
                assert not await one()  # the window is the same 5 a minute
                clock.advance(61)
                assert await one()

        asyncio.run(run())


def _in_flight(client: httpx.AsyncClient, secret: str, count: int) -> list[asyncio.Future[str]]:
    """Start ``count`` streams; their futures give the request id of each, once answered whole."""

    async def one(n: int) -> str:
        body = body_for("messages", "aria-haiku-4.5", f"a long story {n}", 64, stream=True)
        async with client.stream(
            "POST", "/v1/messages", json=body, headers=headers_for("messages", secret)
        ) as r:
            assert r.status_code == 200
            raw = b"".join([chunk async for chunk in r.aiter_bytes()])
        assert b"message_stop" in raw
        return r.headers["request-id"]

    return [asyncio.ensure_future(one(n)) for n in range(count)]


def _ends_of(gateway: GatewayServer, ids: list[str]) -> dict[str, tuple[str, int]]:
    store = whole_store(gateway.services)
    months = {month_of(START), month_of(START + TWO_HOURS), month_of(START - TWO_HOURS)}
    records = [r for m in months for r in gateway.call(store.usage_records(m, limit=1000))]
    return {r.request_id: (r.status, r.charged_uc) for r in records if r.request_id in ids}


def test_wall_clock_stepped_forward_releases_no_live_hold(tmp_path: Path) -> None:
    clock = ManualClock(START)
    with running_gateway(tmp_path / "data", clock=clock, billing=BILLING, simulator=SIMULATOR) as gateway:
        issued = gateway.key(gateway.account("acme"), "Pro", rpm=10_000)
        store = whole_store(gateway.services)

        async def run() -> list[str]:
            async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
                streams = _in_flight(client, issued.secret, 12)
                while gateway.call(store.pending_reservations()) < 12:
                    await asyncio.sleep(0.01)
                clock.step(+TWO_HOURS)  # every hold's stored expiry is now two hours past
                await asyncio.sleep(0.2)  # many sweeps
                assert gateway.call(store.pending_reservations()) == 12
                # Even a whole TTL passing while they are in flight releases none: they are live.
                clock.advance(BILLING["reservation_ttl_seconds"] + 1)
                await asyncio.sleep(0.2)
                assert gateway.call(store.pending_reservations()) == 12
                return list(await asyncio.gather(*streams))

        ids = asyncio.run(run())
        wait_until(lambda: len(_ends_of(gateway, ids)) == 12, "every stream settling")
        ends = _ends_of(gateway, ids)
        assert {status for status, _ in ends.values()} == {UsageStatus.OK.value}
        assert all(charged > 0 for _, charged in ends.values())
        assert gateway.services.sweeper is not None and gateway.services.sweeper.released == 0


def test_another_instance_stepped_forward_releases_no_live_hold(tmp_path: Path) -> None:
    """Two instances on one database: the one whose wall clock jumps two hours ahead sweeps the
    holds of the other's live requests, and releases none of them."""
    serving, sweeping = ManualClock(START), ManualClock(START)
    database = f"sqlite:///{tmp_path / 'shared.db'}"
    with (
        running_gateway(
            tmp_path / "a", clock=serving, billing=BILLING, simulator=SIMULATOR, database_url=database
        ) as gateway,
        running_gateway(tmp_path / "b", clock=sweeping, billing=BILLING, database_url=database) as other,
    ):
        issued = gateway.key(gateway.account("acme"), "Pro", rpm=10_000)
        store = whole_store(gateway.services)

        async def run() -> list[str]:
            async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
                streams = _in_flight(client, issued.secret, 12)
                while gateway.call(store.pending_reservations()) < 12:
                    await asyncio.sleep(0.01)
                sweeping.step(+TWO_HOURS)
                await asyncio.sleep(0.3)  # many sweeps of the stepped instance
                assert gateway.call(store.pending_reservations()) == 12
                return list(await asyncio.gather(*streams))

        ids = asyncio.run(run())
        wait_until(lambda: len(_ends_of(gateway, ids)) == 12, "every stream settling")
        assert {status for status, _ in _ends_of(gateway, ids).values()} == {UsageStatus.OK.value}
        assert other.services.sweeper is not None and other.services.sweeper.released == 0
