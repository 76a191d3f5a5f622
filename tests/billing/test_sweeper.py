"""The reservation sweeper: holds left by crashed requests are released (charge 0, usage record
"abandoned") once past their TTL, by the running gateway, and safely by several sweepers at once."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from modelgate.billing.sweeper import ABANDONED, Sweeper
from modelgate.clock import month_of
from modelgate.storage.base import NewKey, Reservation, ReserveRequest, Settlement, StorageError, UsageRecord
from tests.billing.helpers import body_for, headers_for
from tests.gateway_server import ManualClock, running_gateway
from tests.polling import wait_until
from tests.whole_store import SqliteStore, whole_store

START = datetime(2026, 6, 15, 8, tzinfo=UTC).timestamp()


def test_gateway_releases_a_crashed_requests_hold_after_its_ttl(tmp_path: Path) -> None:
    clock = ManualClock(START)
    billing = {"reservation_ttl_seconds": 600, "sweep_interval_seconds": 0.05}
    with running_gateway(tmp_path / "data", clock=clock, billing=billing) as gateway:
        account = gateway.account("acme", credits=1)
        issued = gateway.key(account, "Basic", rpm=1000, monthly_cap_uc=600_000)
        store, month = whole_store(gateway.services), month_of(START)
        # A request reserved 0.5 credit, then its process died before settling.
        crashed = ReserveRequest(
            "req_crashed",
            issued.record.id,
            account.id,
            month,
            500_000,
            1,
            START,
            START + 600,
            endpoint="messages",
            model="aria-haiku-4.5",
        )
        assert isinstance(gateway.call(store.reserve(crashed)), Reservation)
        url, body = f"{gateway.base_url}/v1/messages", body_for("messages", "haiku", "hi", 5)
        headers = headers_for("messages", issued.secret)
        time.sleep(0.2)  # several sweeps: not expired yet, so still held
        assert gateway.call(store.month_spend(issued.record.id, month)) == (0, 500_000)
        squeezed = httpx.post(url, json=body, headers=headers)  # only 0.1 credit of cap left
        assert int(squeezed.headers["x-modelgate-cap-remaining"]) < 100_000

        clock.advance(601)
        wait_until(
            lambda: gateway.call(store.pending_reservations()) == 0, "the sweeper releasing the expired hold"
        )
        records = gateway.call(store.usage_records(month, key_id=issued.record.id))
        abandoned = [r for r in records if r.request_id == "req_crashed"]
        assert len(abandoned) == 1 and abandoned[0].status == ABANDONED and abandoned[0].charged_uc == 0
        # The record says what the hold was for and when it was made, not when it was swept.
        assert (abandoned[0].endpoint, abandoned[0].model) == ("messages", "aria-haiku-4.5")
        assert abandoned[0].created_at == START
        spent, held = gateway.call(store.month_spend(issued.record.id, month))
        assert held == 0 and spent == int(squeezed.headers["x-modelgate-credits-charged"])
        freed = httpx.post(url, json=body, headers=headers)
        assert int(freed.headers["x-modelgate-cap-remaining"]) > 500_000  # the hold is gone
        account_after = gateway.call(store.get_account(account.id))
        assert account_after is not None and account_after.reserved_uc == 0


def test_sweepers_of_several_processes_release_each_hold_exactly_once(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"

    async def run() -> tuple[list[int], int, int, int]:
        # Separate stores on one database file: separate connections, as separate processes have.
        stores = [SqliteStore(path) for _ in range(4)]
        await stores[0].migrate()
        account = await stores[0].create_account("acme", 10_000_000, START)
        await stores[0].create_key(
            NewKey("key_a", account.id, "", "Basic", 60, None, None, b"d" * 32, "sk-cs4-ab", "abcd"), START
        )
        month = month_of(START)
        for n in range(120):
            request = ReserveRequest(
                f"req_{n}", "key_a", account.id, month, 1000, 1, START, START + 60 + n % 2
            )
            assert isinstance(await stores[0].reserve(request), Reservation)

        class Later:
            passed = 0.0

            def time(self) -> float:
                return START + 120

            def steady(self) -> float:
                return START + self.passed

        clock = Later()
        sweepers = [Sweeper(s, clock, 1.0, 60) for s in stores]
        # The first sweep sees the holds pending; a whole TTL later they are released.
        assert await asyncio.gather(*(sweeper.sweep() for sweeper in sweepers)) == [0, 0, 0, 0]
        clock.passed = 60
        released = await asyncio.gather(*(sweeper.sweep() for sweeper in sweepers))
        records = await stores[0].usage_records(month, key_id="key_a", limit=1000)
        after = await stores[0].get_account(account.id)
        assert after is not None
        pending = await stores[0].pending_reservations()
        for store in stores:
            await store.close()
        return released, len(records), after.reserved_uc, pending

    released, records, reserved, pending = asyncio.run(run())
    assert sum(released) == 120 == records
    assert reserved == 0 and pending == 0


class _Later:
    """A clock at START + 120 by the wall, ``passed`` seconds on by the steady clock."""

    passed = 0.0

    def time(self) -> float:
        return START + 120

    def steady(self) -> float:
        return START + self.passed


class _FailingOnce(SqliteStore):
    """The real store; its next release fails once when ``fail`` is set (a database error)."""

    fail = False

    async def release(self, record: UsageRecord) -> Settlement:
        if self.fail:
            self.fail = False
            raise StorageError("connection reset")
        return await super().release(record)


async def _abandoned(path: Path, count: int) -> _FailingOnce:
    store = _FailingOnce(path)
    await store.migrate()
    account = await store.create_account("acme", 10_000_000, START)
    await store.create_key(
        NewKey("key_a", account.id, "", "Basic", 60, None, None, b"d" * 32, "sk-cs4-ab", "abcd"), START
    )
    for n in range(count):
        request = ReserveRequest(
            f"req_{n:03}", "key_a", account.id, month_of(START), 1000, 1, START, START + 60
        )
        assert isinstance(await store.reserve(request), Reservation)
    return store


def test_holds_past_the_first_batch_are_released_one_ttl_after_they_were_first_seen(tmp_path: Path) -> None:
    async def run() -> tuple[int, int, int]:
        store = await _abandoned(tmp_path / "ledger.db", 25)
        clock = _Later()
        sweeper = Sweeper(store, clock, 1.0, 60, batch=10)  # 25 holds: three pages
        first = await sweeper.sweep()
        clock.passed = 60
        released = await sweeper.sweep()
        left = await store.pending_reservations()
        await store.close()
        return first, released, left

    assert asyncio.run(run()) == (0, 25, 0)


def test_a_failed_release_does_not_restart_the_ages_of_the_other_holds(tmp_path: Path) -> None:
    async def run() -> tuple[int, int]:
        store = await _abandoned(tmp_path / "ledger.db", 5)
        clock = _Later()
        sweeper = Sweeper(store, clock, 1.0, 60)
        assert await sweeper.sweep() == 0
        clock.passed = 60
        store.fail = True
        with pytest.raises(StorageError):
            await sweeper.sweep()
        released = await sweeper.sweep()  # the same steady instant: every age still counts
        left = await store.pending_reservations()
        await store.close()
        return released, left

    assert asyncio.run(run()) == (5, 0)
