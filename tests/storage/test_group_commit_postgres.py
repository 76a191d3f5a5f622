"""PostgreSQL ledger writes that an instance has ready together share one transaction
(storage.postgres_ledger), and sharing never changes an outcome: each operation still succeeds or
fails alone, a replay applies once, and batches of several instances racing for the same rows
never deadlock."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator

import asyncpg
import pytest

from modelgate.config import ConfigError, load_settings
from modelgate.storage.base import (
    Conflict,
    ConnectionUse,
    NewKey,
    Refusal,
    Reservation,
    ReserveRequest,
    StorageError,
    UsageRecord,
)
from tests.storage.engines import fresh_database
from tests.whole_store import PostgresStore, open_store

MONTH = "2026-11"


@pytest.fixture
async def url() -> AsyncIterator[str]:
    async with fresh_database("mggroup") as database:
        yield database


async def _store(url: str, accounts: int = 1, *, wait: float = 0.001) -> tuple[PostgresStore, list[int]]:
    store = PostgresStore(url, batch_wait=wait)
    await store.migrate()
    ids = []
    for a in range(accounts):
        account = await store.create_account(f"a{a}", 1_000_000, time.time())
        ids.append(account.id)
        key = NewKey(
            f"key_{a}", account.id, "", "Basic", 60, None, None, bytes([a]) * 32, "sk-cs4-abcd", "wxyz"
        )
        await store.create_key(key, time.time())
    return store, ids


def _hold(account_id: int, request_id: str, amount: int = 1_000, key: str | None = None) -> ReserveRequest:
    now = time.time()
    key_id = key or f"key_{account_id - 1}"
    return ReserveRequest(request_id, key_id, account_id, MONTH, amount, 1, now, now + 60)


def _usage(account_id: int, request_id: str, charged: int) -> UsageRecord:
    now = time.time()
    return UsageRecord(
        request_id,
        f"key_{account_id - 1}",
        account_id,
        "chat",
        "m",
        MONTH,
        "ok",
        now,
        now,
        1,
        1,
        0,
        0,
        charged,
    )


async def _next_xid(url: str) -> int:
    """The next transaction id PostgreSQL will hand out (reading it assigns none)."""
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval("SELECT pg_snapshot_xmax(pg_current_snapshot())::text"))
    finally:
        await conn.close()


async def test_concurrent_writes_commit_once(url: str) -> None:
    store, (account_id,) = await _store(url)
    await store.reserve(_hold(account_id, "req_first"))
    before = await _next_xid(url)
    outcomes = await asyncio.gather(
        *(store.reserve(_hold(account_id, f"req_{i}")) for i in range(20)),
        store.settle(_usage(account_id, "req_first", 300)),
    )
    assert await _next_xid(url) - before == 1  # 21 writes, one transaction
    assert all(isinstance(o, Reservation) and o.granted_uc == 1_000 for o in outcomes[:20])
    assert outcomes[20].applied and outcomes[20].charged_uc == 300  # type: ignore[union-attr]
    account = await store.get_account(account_id)
    assert account is not None and account.reserved_uc == 20_000 and account.balance_uc == 1_000_000 - 300
    await store.close()


async def test_a_failing_write_fails_alone(url: str) -> None:
    store, (account_id,) = await _store(url)
    await store.reserve(_hold(account_id, "req_first"))
    outcomes = await asyncio.gather(
        *(store.reserve(_hold(account_id, f"req_{i}")) for i in range(20)),
        store.reserve(_hold(account_id, "req_first")),  # a duplicate request id
        store.settle(_usage(account_id, "req_first", 300)),
        return_exceptions=True,
    )
    assert all(isinstance(o, Reservation) and o.granted_uc == 1_000 for o in outcomes[:20])
    assert isinstance(outcomes[20], Conflict)
    assert outcomes[21].applied and outcomes[21].charged_uc == 300  # type: ignore[union-attr]
    # The duplicate left nothing: 20 holds pending, one settled for 300.
    account = await store.get_account(account_id)
    assert account is not None and account.reserved_uc == 20_000 and account.balance_uc == 1_000_000 - 300
    assert await store.pending_reservations() == 20
    assert await store.month_spend(f"key_{account_id - 1}", MONTH) == (300, 20_000)
    await store.close()


async def test_operations_of_one_batch_see_the_ones_before_them(url: str) -> None:
    store, (account_id,) = await _store(url)
    # 1,000,000 µc free: the first three holds fit whole, the fourth gets the rest, the fifth nothing.
    outcomes = await asyncio.gather(
        *(store.reserve(_hold(account_id, f"req_{i}", 300_000)) for i in range(5))
    )
    assert [o.granted_uc for o in outcomes[:4]] == [300_000, 300_000, 300_000, 100_000]  # type: ignore[union-attr]
    assert outcomes[4] == Refusal("balance", 0)
    await store.close()


async def test_a_replayed_settle_in_the_same_batch_applies_once(url: str) -> None:
    store, (account_id,) = await _store(url)
    await store.reserve(_hold(account_id, "req_1"))
    first, replay, release = await asyncio.gather(
        store.settle(_usage(account_id, "req_1", 400)),
        store.settle(_usage(account_id, "req_1", 400)),
        store.release(_usage(account_id, "req_1", 0)),
    )
    assert (first.applied, replay.applied, release.applied) == (True, False, False)
    account = await store.get_account(account_id)
    assert account is not None and account.balance_uc == 1_000_000 - 400 and account.reserved_uc == 0
    summary = await store.usage_summary(MONTH, account_id=account_id)
    assert summary.requests == 1 and summary.charged_uc == 400
    await store.close()


async def test_a_write_cancelled_before_its_batch_leaves_is_never_applied(url: str) -> None:
    store, (account_id,) = await _store(url)
    kept = asyncio.ensure_future(store.reserve(_hold(account_id, "req_kept")))
    dropped = asyncio.ensure_future(store.reserve(_hold(account_id, "req_dropped")))
    await asyncio.sleep(0)  # both are queued for the next turn's batch
    dropped.cancel()
    with pytest.raises(asyncio.CancelledError):
        await dropped
    assert isinstance(await kept, Reservation)
    assert await store.pending_reservations() == 1
    await store.close()


async def test_batches_of_several_instances_crossing_accounts_never_deadlock(url: str) -> None:
    """Three instances, each sending batches that touch five accounts in shuffled orders, with
    settles and releases mixed in: every operation completes, and the money adds up."""
    first, ids = await _store(url, accounts=5)
    stores = [first, PostgresStore(url), PostgresStore(url)]
    rng = random.Random(3)

    async def instance(s: int) -> None:
        store = stores[s]
        for round_ in range(15):
            order = ids[:]
            rng.shuffle(order)
            held = [f"req_{s}_{round_}_{a}" for a in order]
            await asyncio.gather(*(store.reserve(_hold(a, r, 500)) for a, r in zip(order, held, strict=True)))
            await asyncio.gather(
                *(
                    store.settle(_usage(a, r, 200)) if i % 2 else store.release(_usage(a, r, 0))
                    for i, (a, r) in enumerate(zip(order, held, strict=True))
                )
            )

    await asyncio.wait_for(asyncio.gather(*(instance(s) for s in range(3))), timeout=60)
    for account_id in ids:
        account = await first.get_account(account_id)
        summary = await first.usage_summary(MONTH, account_id=account_id)
        assert account is not None and account.reserved_uc == 0
        assert summary.requests == 45 and account.balance_uc == 1_000_000 - summary.charged_uc
    for store in stores:
        await store.close()


async def test_settles_beyond_their_holds_in_one_batch_share_what_is_free(url: str) -> None:
    """Each settle of a batch charges beyond its hold only what the ones before it left free (the
    batch's running totals), and the account and key-month rows end with the sums."""
    store, (account_id,) = await _store(url)
    for i in range(3):
        await store.reserve(_hold(account_id, f"req_{i}", 300_000))  # 100,000 µc left free
    settled = await asyncio.gather(*(store.settle(_usage(account_id, f"req_{i}", 360_000)) for i in range(3)))
    # Free beyond the holds: 100,000; the first two take 60,000 and 40,000, the third nothing more.
    assert [s.charged_uc for s in settled] == [360_000, 340_000, 300_000]
    # What is free after each: the other holds stay reserved until their own settle.
    assert [s.balance_uc for s in settled] == [40_000, 0, 0]
    account = await store.get_account(account_id)
    assert account is not None and account.balance_uc == 0 and account.reserved_uc == 0
    assert await store.month_spend("key_0", MONTH) == (1_000_000, 0)
    summary = await store.usage_summary(MONTH, account_id=account_id)
    assert summary.requests == 3 and summary.charged_uc == 1_000_000
    await store.close()


async def test_top_ups_racing_ledger_batches_are_never_lost(url: str) -> None:
    """The batch writes its sums as deltas: top-ups committed by another connection while batches
    run all stay in the balance."""
    store, (account_id,) = await _store(url)
    other = PostgresStore(url)

    async def ledger() -> int:
        charged = 0
        for round_ in range(30):
            held = [f"req_{round_}_{i}" for i in range(8)]
            await asyncio.gather(*(store.reserve(_hold(account_id, r, 5_000)) for r in held))
            done = await asyncio.gather(
                *(store.settle(_usage(account_id, r, 1_000 + i)) for i, r in enumerate(held))
            )
            charged += sum(d.charged_uc for d in done)
        return charged

    async def top_ups() -> int:
        for _ in range(60):
            await other.top_up(account_id, 7, "race", time.time())
            await asyncio.sleep(0)
        return 60 * 7

    charged, added = await asyncio.gather(ledger(), top_ups())
    account = await store.get_account(account_id)
    assert account is not None and account.reserved_uc == 0
    assert account.balance_uc == 1_000_000 + added - charged
    assert charged == 30 * sum(1_000 + i for i in range(8))
    await store.close()
    await other.close()


async def _waiting_backend(conn: asyncpg.Connection) -> int:
    """The pid of the database's one session waiting for a lock (polled until there is one)."""
    for _ in range(500):
        pid = await conn.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        if pid is not None:
            return int(pid)
        await asyncio.sleep(0.01)
    raise AssertionError("no session waits for a lock")


async def test_a_batch_whose_connection_the_server_ends_fails_and_the_next_gets_a_new_one(url: str) -> None:
    """The ledger keeps one connection for its batches (storage.postgres_batches). When the server
    ends it under a batch, that batch's callers get StorageError and nothing of it is applied; the
    next batch goes out on a fresh connection."""
    store, (account_id,) = await _store(url)
    assert isinstance(await store.reserve(_hold(account_id, "req_before")), Reservation)
    blocker = await asyncpg.connect(url)
    try:
        await blocker.execute("SELECT pg_advisory_lock(2, $1)", account_id)  # the account's ledger lock
        stuck = asyncio.ensure_future(store.reserve(_hold(account_id, "req_stuck")))
        batch_backend = await _waiting_backend(blocker)
        assert await blocker.fetchval("SELECT pg_terminate_backend($1)", batch_backend)
        with pytest.raises(StorageError):
            await stuck
        await blocker.execute("SELECT pg_advisory_unlock(2, $1)", account_id)
    finally:
        await blocker.close()
    assert isinstance(await store.reserve(_hold(account_id, "req_after")), Reservation)
    account = await store.get_account(account_id)
    assert account is not None and account.reserved_uc == 2 * 1_000  # req_before and req_after
    assert await store.pending_reservations() == 2
    await store.close()


async def test_closing_lets_the_batch_in_flight_finish(url: str) -> None:
    store, (account_id,) = await _store(url)
    blocker = await asyncpg.connect(url)
    try:
        await blocker.execute("SELECT pg_advisory_lock(2, $1)", account_id)
        in_flight = asyncio.ensure_future(store.reserve(_hold(account_id, "req_in_flight")))
        await _waiting_backend(blocker)
        closing = asyncio.ensure_future(store.close())
        await asyncio.sleep(0.05)
        assert not closing.done() and not in_flight.done()  # close waits for the batch
        await blocker.execute("SELECT pg_advisory_unlock(2, $1)", account_id)
        assert isinstance(await in_flight, Reservation)
        await closing
        assert await blocker.fetchval("SELECT count(*) FROM reservations") == 1
        others = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        assert await blocker.fetchval(others) == 0  # the store's connections are all closed
    finally:
        await blocker.close()


async def test_the_pool_opens_at_most_database_pool_size_and_reports_its_use(url: str) -> None:
    """``database_pool_size`` bounds the connections a store opens, the kept ledger connection
    included, and ``connections()`` (the ``modelgate_database_connections`` gauges) agrees with
    the server's own count of sessions."""
    store = PostgresStore(url, pool_max_size=3)
    assert store.connections() == ConnectionUse(in_use=0, idle=0, limit=3)
    await store.migrate()
    account = await store.create_account("pool", 1_000_000, time.time())
    key = NewKey("key_0", account.id, "", "Basic", 60, None, None, bytes(32), "sk-cs4-abcd", "wxyz")
    await store.create_key(key, time.time())
    assert isinstance(await store.reserve(_hold(account.id, "req_pool")), Reservation)
    await asyncio.gather(*(store.ping() for _ in range(20)))  # 20 at once: more than the pool holds
    observer = await asyncpg.connect(url)
    try:
        sessions = await observer.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    finally:
        await observer.close()
    use = store.connections()
    assert sessions == use.in_use + use.idle <= 3
    assert use.in_use >= 1  # the ledger keeps its connection between batches
    assert use.limit == 3
    await store.close()


def test_database_pool_size_setting_reaches_the_store() -> None:
    environ = {"MODELGATE_DATABASE_POOL_SIZE": "9"}
    settings = load_settings(None, environ=environ, database_url="postgresql://db.invalid/modelgate")
    store = open_store(settings.resolved_database_url, pool_size=settings.database_pool_size)
    assert store.connections() == ConnectionUse(in_use=0, idle=0, limit=9)  # nothing opened yet
    assert load_settings(None, environ={}).database_pool_size == 20
    for bad in ("2", "0", "1001", "many"):
        with pytest.raises(ConfigError, match="database_pool_size"):
            load_settings(None, environ={"MODELGATE_DATABASE_POOL_SIZE": bad})


class Batches:
    """A ledger observer that keeps each batch's size and how long it waited for company."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.waits: list[float] = []

    def ledger_committed(self, seconds: float, operations: int, waited: float = 0.0) -> None:
        self.sizes.append(operations)
        self.waits.append(waited)


async def _one_per_turn(
    store: PostgresStore, account_id: int, prefix: str, count: int
) -> list[asyncio.Task[object]]:
    """``count`` reserves, each submitted in its own turn of the event loop (without waiting for
    company, the first would leave alone and the others in the next batch)."""
    tasks: list[asyncio.Task[object]] = []
    for i in range(count):
        tasks.append(asyncio.ensure_future(store.reserve(_hold(account_id, f"{prefix}_{i}"))))
        await asyncio.sleep(0)
    return tasks


async def test_writes_arriving_faster_than_the_wait_leave_together_after_it(url: str) -> None:
    store, (account_id,) = await _store(url, wait=0.5)
    batches = Batches()
    store.observe_ledger(batches)
    # A burst first: the running average of the gaps between arrivals falls below the wait.
    await asyncio.gather(*await _one_per_turn(store, account_id, "warm", 8))
    batches.sizes.clear()
    batches.waits.clear()
    outcomes = await asyncio.gather(*await _one_per_turn(store, account_id, "req", 6))
    assert all(isinstance(o, Reservation) and o.granted_uc == 1_000 for o in outcomes)
    assert batches.sizes == [6]  # the first waited for the five after it
    assert 0 < batches.waits[0] <= 0.5
    account = await store.get_account(account_id)
    assert account is not None and account.reserved_uc == 14 * 1_000
    await store.close()


async def test_writes_arriving_slower_than_the_wait_leave_at_once(url: str) -> None:
    store, (account_id,) = await _store(url, wait=0.2)
    batches = Batches()
    store.observe_ledger(batches)
    for i in range(4):  # one write every 0.45 s: waiting 0.2 s would gather nothing
        await store.reserve(_hold(account_id, f"slow_{i}"))
        await asyncio.sleep(0.45)
    first = asyncio.ensure_future(store.reserve(_hold(account_id, "req_a")))
    await asyncio.sleep(0.05)  # within the wait: had the first waited, this one would join it
    second = asyncio.ensure_future(store.reserve(_hold(account_id, "req_b")))
    assert all(isinstance(o, Reservation) for o in await asyncio.gather(first, second))
    assert batches.sizes == [1] * 6
    assert batches.waits == [0.0] * 6
    await store.close()


async def test_closing_sends_the_writes_waiting_for_company_at_once(url: str) -> None:
    store, (account_id,) = await _store(url, wait=30.0)
    tasks = await _one_per_turn(store, account_id, "req", 5)
    await asyncio.sleep(0.3)  # the first left at once; the others now wait up to 30 s for company
    assert not all(task.done() for task in tasks)
    await asyncio.wait_for(store.close(), 10)  # not 30 s: closing does not wait for company
    assert all(isinstance(task.result(), Reservation) for task in tasks)
    conn = await asyncpg.connect(url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM reservations") == 5
    finally:
        await conn.close()


def test_database_batch_wait_setting_reaches_the_store() -> None:
    environ = {"MODELGATE_DATABASE_BATCH_WAIT_SECONDS": "0.004"}
    settings = load_settings(None, environ=environ, database_url="postgresql://db.invalid/modelgate")
    store = open_store(settings.resolved_database_url, batch_wait=settings.database_batch_wait_seconds)
    assert isinstance(store, PostgresStore)
    assert store.database.ledger_batches._wait == store.database.saves._wait == 0.004
    assert load_settings(None, environ={}).database_batch_wait_seconds == 0.001
    assert (
        load_settings(
            None, environ={"MODELGATE_DATABASE_BATCH_WAIT_SECONDS": "0"}
        ).database_batch_wait_seconds
        == 0
    )
    for bad in ("-0.001", "0.2", "soon"):
        with pytest.raises(ConfigError, match="database_batch_wait_seconds"):
            load_settings(None, environ={"MODELGATE_DATABASE_BATCH_WAIT_SECONDS": bad})
