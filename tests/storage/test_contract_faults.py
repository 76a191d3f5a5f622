"""The ledger contract under database faults, on both engines: the connection is killed (or the
write fails) at each step of a reserve and of a settle.

Whatever step fails, the caller gets ``StorageError`` (never a driver's own exception), nothing is
half-written (the ledger invariants hold, a failed reserve leaves no hold, a failed settle leaves
the hold pending), the next call works, and a settle repeated until it lands charges exactly once.

- PostgreSQL: the server ends the session with ``pg_terminate_backend`` (what a restart or an
  administrator does): while the store's kept connection is idle between steps, and while a
  reserve or a settle is at the server (held there by an advisory lock the test owns, on the very
  key the ledger function locks first).
- SQLite: the write fails inside SQLite at each step of the transaction (a progress handler on the
  store's connection interrupts the statement running at the n-th step, as an I/O error or a full
  disk would), from the ``BEGIN`` to the ``COMMIT``.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import Awaitable, Callable
from typing import TypeVar
from urllib.parse import urlsplit

import asyncpg
import pytest

from modelgate.storage.base import Refusal, Reservation, Settlement, StorageError, Store, UsageRecord
from modelgate.storage.postgres_ledger import ACCOUNT, RESERVATION, _lock_key
from tests.storage.engines import database_url
from tests.storage.test_contract import MONTH, assert_ledger_invariants, hold, setup_key, usage_of
from tests.whole_store import PostgresStore, SqliteStore

T = TypeVar("T")


async def until_it_lands(operation: Callable[[], Awaitable[T]], tries: int = 20) -> T:
    """What a caller that keeps a failed write does: try again, on ``StorageError`` only."""
    for _ in range(tries - 1):
        try:
            return await operation()
        except StorageError:
            await asyncio.sleep(0.05)
    return await operation()


async def settled_once(store: Store, usage: UsageRecord, charged: int) -> None:
    records = [r for r in await store.usage_records(MONTH) if r.request_id == usage.request_id]
    assert [(r.status, r.charged_uc) for r in records] == [("ok", charged)]


# --- PostgreSQL: the server ends the session ---------------------------------------------------


async def _terminate(url: str, *, waiting_on_lock: bool = False) -> int:
    """End the store's sessions on ``url``'s database (only those waiting on a lock, if asked),
    as a restart would; how many were ended."""
    name = urlsplit(url).path.lstrip("/")
    admin = await asyncpg.connect(database_url())
    try:
        condition = " AND wait_event_type = 'Lock'" if waiting_on_lock else ""
        return int(
            await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                f"WHERE datname = $1 AND pid <> pg_backend_pid(){condition}",
                name,
            )
        )
    finally:
        await admin.close()


async def _at_the_server_when_killed(url: str, lock: tuple[int, int], step: Awaitable[T]) -> T:
    """Run ``step`` while another session holds the advisory ``lock`` it takes first, end the
    session it waits on, then free the lock; ``step``'s outcome (or its exception)."""
    holder = await asyncpg.connect(url)
    try:
        await holder.execute("SELECT pg_advisory_lock($1, $2)", *lock)
        task = asyncio.ensure_future(step)
        for _ in range(500):
            if await _terminate(url, waiting_on_lock=True):
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the step never waited at the server")
        await holder.execute("SELECT pg_advisory_unlock($1, $2)", *lock)
        return await task
    finally:
        await holder.close()


@pytest.fixture
async def postgres(engine: Callable[[], Awaitable[Store]]) -> PostgresStore:
    store = await engine()
    if not isinstance(store, PostgresStore):
        pytest.skip("the PostgreSQL faults")
    return store


@pytest.mark.parametrize("engine", ["postgresql"], indirect=True)
async def test_postgres_session_ended_while_idle_before_reserve_and_before_settle(
    postgres: PostgresStore,
) -> None:
    store = postgres
    account, key = await setup_key(store, balance=10_000)
    await store.reserve(hold(key, 1))  # the ledger's kept connection is open
    await until_it_lands(lambda: store.settle(usage_of(hold(key, 1), 0)))
    for _ in range(3):
        assert await _terminate(store.url) >= 1
        await asyncio.sleep(0.05)  # the server's FATAL notice reaches the idle connections
        request = hold(key, 1_000)
        # The first call after the restart goes out on a fresh connection: it lands.
        granted = await store.reserve(request)
        assert isinstance(granted, Reservation) and granted.granted_uc == 1_000
        assert await _terminate(store.url) >= 1
        await asyncio.sleep(0.05)
        usage = usage_of(request, 400)
        settlement = await store.settle(usage)
        assert settlement.applied and settlement.charged_uc == 400
        await settled_once(store, usage, 400)
    await assert_ledger_invariants(store, account.id)
    assert (await store.get_account(account.id)).balance_uc == 10_000 - 3 * 400  # type: ignore[union-attr]


@pytest.mark.parametrize("engine", ["postgresql"], indirect=True)
async def test_postgres_sessions_ended_under_load_fail_as_storage_errors_and_settle_once(
    postgres: PostgresStore,
) -> None:
    """50 requests reading, reserving and settling in a loop while the server ends every session
    three times: the failures are ``StorageError`` only (the kept connection and the pool's idle
    ones are replaced, never reused half-failed), and every settle kept until it lands charges
    exactly once."""
    store = postgres
    account, key = await setup_key(store, balance=10**12)
    failures: list[BaseException] = []
    settled: list[str] = []
    running = True

    async def requester() -> None:
        while running:
            try:  # a read on a connection of the pool (not the ledger's kept one)
                await store.get_account(account.id)
            except Exception as exc:  # what was raised is checked below
                failures.append(exc)
            request = hold(key, 100)
            try:
                if not isinstance(await store.reserve(request), Reservation):
                    raise AssertionError("refused")
            except StorageError as exc:
                failures.append(exc)
                await asyncio.sleep(0.01)
                continue
            try:
                await store.settle(usage_of(request, 60))
            except Exception as exc:  # what was raised is checked below
                failures.append(exc)
                await until_it_lands(functools.partial(store.settle, usage_of(request, 60)), tries=200)
            settled.append(request.request_id)

    tasks = [asyncio.ensure_future(requester()) for _ in range(50)]
    try:
        for _ in range(3):
            await asyncio.sleep(0.3)
            assert await _terminate(store.url) >= 1
        await asyncio.sleep(0.3)
    finally:
        running = False
        await asyncio.gather(*tasks)
    assert [f for f in failures if not isinstance(f, StorageError)] == []
    assert len(settled) > 0 and len(set(settled)) == len(settled)
    assert await store.pending_reservations() == 0
    await assert_ledger_invariants(store, account.id)
    summary = await store.usage_summary(MONTH, account_id=account.id)
    # One usage record per settled request, each charged once.
    assert (summary.requests, summary.charged_uc) == (len(settled), 60 * len(settled))


@pytest.mark.parametrize("engine", ["postgresql"], indirect=True)
async def test_postgres_session_ended_while_a_reserve_is_at_the_server(postgres: PostgresStore) -> None:
    store = postgres
    account, key = await setup_key(store, balance=10_000)
    request = hold(key, 1_000)
    with pytest.raises(StorageError):
        await _at_the_server_when_killed(store.url, (ACCOUNT, account.id), store.reserve(request))
    # Nothing of the reserve was written: no hold, the money free, the same request id reusable.
    assert await store.pending_reservations() == 0
    assert (await store.get_account(account.id)).reserved_uc == 0  # type: ignore[union-attr]
    granted = await until_it_lands(lambda: store.reserve(request))
    assert isinstance(granted, Reservation)
    assert (await store.settle(usage_of(request, 10))).applied
    await assert_ledger_invariants(store, account.id)


@pytest.mark.parametrize("engine", ["postgresql"], indirect=True)
async def test_postgres_session_ended_while_a_settle_is_at_the_server(postgres: PostgresStore) -> None:
    store = postgres
    account, key = await setup_key(store, balance=10_000)
    request = hold(key, 1_000)
    assert isinstance(await store.reserve(request), Reservation)
    usage = usage_of(request, 700)
    lock = (RESERVATION, _lock_key(request.request_id))
    with pytest.raises(StorageError):
        await _at_the_server_when_killed(store.url, lock, store.settle(usage))
    assert await store.pending_reservations() == 1  # rolled back: still held, nothing charged
    assert (await store.get_account(account.id)).balance_uc == 10_000  # type: ignore[union-attr]
    settlement = await until_it_lands(lambda: store.settle(usage_of(request, 700)))
    assert settlement.applied and settlement.charged_uc == 700
    # The same settle once more (its reply was lost, say): nothing changes.
    again = await store.settle(usage_of(request, 700))
    assert not again.applied and again.charged_uc == 0
    await settled_once(store, usage, 700)
    await assert_ledger_invariants(store, account.id)
    assert (await store.get_account(account.id)).balance_uc == 10_000 - 700  # type: ignore[union-attr]


# --- SQLite: the write fails at each step inside SQLite ----------------------------------------


class _FailAtStep:
    """A progress handler that interrupts the statement running at the ``step``-th call (every
    ``EVERY`` virtual-machine instructions) of the store's connection, once."""

    EVERY = 8

    def __init__(self, step: int) -> None:
        self.step = step
        self.calls = 0
        self.fired = False

    def __call__(self) -> int:
        self.calls += 1
        if self.calls == self.step:
            self.fired = True
            return 1
        return 0


async def _with_failure_at(store: SqliteStore, step: int, operation: Awaitable[T]) -> tuple[T | None, bool]:
    """``operation``'s outcome (None when it failed) and whether the failure fired."""
    connection: sqlite3.Connection = store.database.db()  # the loop thread's: the ledger writes on it
    fault = _FailAtStep(step)
    connection.set_progress_handler(fault, _FailAtStep.EVERY)
    try:
        return await operation, fault.fired
    except StorageError:
        assert fault.fired
        return None, True
    finally:
        connection.set_progress_handler(None, 0)


@pytest.fixture
async def sqlite(engine: Callable[[], Awaitable[Store]]) -> SqliteStore:
    store = await engine()
    if not isinstance(store, SqliteStore):
        pytest.skip("the SQLite faults")
    return store


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
async def test_sqlite_write_failing_at_each_step_of_a_reserve(sqlite: SqliteStore) -> None:
    store = sqlite
    account, key = await setup_key(store, balance=1_000_000)
    step, failed = 1, 0
    while True:
        request = hold(key, 1_000)
        outcome, fired = await _with_failure_at(store, step, store.reserve(request))
        if not fired:
            assert isinstance(outcome, Reservation)  # past the last step: it simply worked
            break
        if outcome is None:
            failed += 1
            assert await store.pending_reservations() == 0, f"step {step}: a failed reserve left a hold"
            assert (await store.get_account(account.id)).reserved_uc == 0  # type: ignore[union-attr]
        else:
            assert isinstance(outcome, Reservation | Refusal)
            await store.release(usage_of(request, 0))
        # The store works at once after the fault.
        after = hold(key, 10)
        assert isinstance(await store.reserve(after), Reservation)
        assert (await store.settle(usage_of(after, 10))).applied
        await assert_ledger_invariants(store, account.id)
        step += 1
    assert failed >= 3, "the fault fired at too few steps to mean anything"


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
async def test_sqlite_write_failing_at_each_step_of_a_settle(sqlite: SqliteStore) -> None:
    store = sqlite
    account, key = await setup_key(store, balance=10_000_000)
    step, failed, charged = 1, 0, 0
    while True:
        request = hold(key, 1_000)
        assert isinstance(await store.reserve(request), Reservation)
        outcome, fired = await _with_failure_at(store, step, store.settle(usage_of(request, 600)))
        if outcome is None and await store.pending_reservations() == 0:
            # Interrupted inside COMMIT after the commit was made: reported as failed though it
            # landed, as a lost acknowledgement would be. The retry the ledger makes then changes
            # nothing, and the request was charged once.
            failed += 1
            assert not (await store.settle(usage_of(request, 600))).applied, f"step {step}"
        elif outcome is None:
            failed += 1
            outcome = await until_it_lands(functools.partial(store.settle, usage_of(request, 600)))
        if outcome is not None:
            assert isinstance(outcome, Settlement) and outcome.applied and outcome.charged_uc == 600
        charged += 600
        assert not (await store.settle(usage_of(request, 600))).applied
        await settled_once(store, usage_of(request, 600), 600)
        await assert_ledger_invariants(store, account.id)
        assert (await store.get_account(account.id)).balance_uc == 10_000_000 - charged  # type: ignore[union-attr]
        if not fired:
            break
        step += 1
    assert failed >= 3, "the fault fired at too few steps to mean anything"
