"""Stored responses written after their answer (``storage.deferred_responses``), on SQLite and
PostgreSQL: while a write is held up in the database, every read of its account through the
wrapper waits for it and then finds it (read-your-writes), other accounts are not held up, and
``drain`` returns only once every write has ended."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

from modelgate.storage.deferred_responses import DeferredResponses
from modelgate.storage.responses import PageRequest
from tests.storage.engines import fresh_database
from tests.storage.test_contract import NOW
from tests.storage.test_contract_responses import LIMIT, item, response
from tests.whole_store import PostgresStore, SqliteStore, WholeStore

#: Holds the database's write path for one account until the block ends.
Hold = Callable[[int], AbstractAsyncContextManager[None]]


@dataclass
class Engine:
    store: WholeStore
    hold_writes: Hold


@asynccontextmanager
async def writes_held(url: str, account_id: int) -> AsyncIterator[None]:
    """On PostgreSQL, the account's stored-byte row locked, as a long concurrent writer of the
    account would: a stored answer's write waits for it (the ledger's writes do not touch it)."""
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await conn.execute(
                "INSERT INTO state_usage (account_id, bytes) VALUES ($1, 0) ON CONFLICT DO NOTHING",
                account_id,
            )
            await conn.execute("SELECT 1 FROM state_usage WHERE account_id = $1 FOR UPDATE", account_id)
            yield
    finally:
        await conn.close()


@contextmanager
def _sqlite_lock(path: Path) -> Iterator[None]:
    # Another connection holding SQLite's write lock: the group commit retries, then waits for it
    # on the store's worker thread.
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        yield
        other.execute("ROLLBACK")
    finally:
        other.close()


@pytest.fixture(params=["sqlite", "postgresql"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    if request.param == "sqlite":
        path = tmp_path / "deferred.db"
        sqlite_store = SqliteStore(path)
        await sqlite_store.migrate()

        @asynccontextmanager
        async def hold_sqlite(account_id: int) -> AsyncIterator[None]:
            with _sqlite_lock(path):
                yield

        try:
            yield Engine(sqlite_store, hold_sqlite)
        finally:
            await sqlite_store.close()
        return
    async with fresh_database() as url:
        postgres_store = PostgresStore(url)
        await postgres_store.migrate()

        def hold_postgres(account_id: int) -> AbstractAsyncContextManager[None]:
            return writes_held(url, account_id)

        try:
            yield Engine(postgres_store, hold_postgres)
        finally:
            await postgres_store.close()


async def test_reads_of_an_account_wait_for_its_write_in_flight_and_find_it(engine: Engine) -> None:
    store = engine.store
    deferred = DeferredResponses(store.responses)
    mine = await store.create_account("deferred-mine", 0, NOW)
    other = await store.create_account("deferred-other", 0, NOW)
    await store.save_response(response("resp_other", other.id), LIMIT)
    saved = response(
        "resp_late", mine.id, inputs=(item("msg_in", "hi"),), outputs=(item("msg_out", "hello", "output"),)
    )
    outcomes: list[bool | BaseException] = []
    async with engine.hold_writes(mine.id):
        deferred.save_after(saved, LIMIT, outcomes.append)
        assert deferred.in_flight == 1
        got = asyncio.ensure_future(deferred.get_response(mine.id, "resp_late", NOW))
        chain = asyncio.ensure_future(deferred.response_chain(mine.id, "resp_late", NOW, 10))
        found = asyncio.ensure_future(deferred.find_item(mine.id, "msg_out", NOW))
        page = asyncio.ensure_future(
            deferred.response_input_items_page(mine.id, "resp_late", NOW, 10, PageRequest(20, True))
        )
        used = asyncio.ensure_future(deferred.state_bytes(mine.id))
        reads = (got, chain, found, page, used)
        drained = asyncio.ensure_future(deferred.drain())
        # Another account's reads are not held up by this write.
        assert await deferred.get_response(other.id, "resp_other", NOW) is not None
        await asyncio.sleep(0.2)  # the write is at the database, held there
        assert not any(read.done() for read in reads) and not drained.done()
        # Not yet in the database: a read past the wrapper does not find it.
        assert await store.get_response(mine.id, "resp_late", NOW) is None
    await drained
    assert outcomes == [True] and deferred.in_flight == 0 and deferred.kept == 1
    stored, history, hit, listed = await got, await chain, await found, await page
    assert stored is not None and stored.body == saved.body
    assert history is not None and [r.id for r in history] == ["resp_late"]
    assert hit is not None and hit.owner_id == "resp_late"
    assert listed is not None and [i.id for i in listed.items] == ["msg_in"]
    assert await used == await store.state_bytes(mine.id) > 0


async def test_a_delete_right_after_the_answer_deletes_the_response(engine: Engine) -> None:
    store = engine.store
    deferred = DeferredResponses(store.responses)
    mine = await store.create_account("deferred-delete", 0, NOW)
    outcomes: list[bool | BaseException] = []
    async with engine.hold_writes(mine.id):
        deferred.save_after(response("resp_gone", mine.id, inputs=(item("m1", "x"),)), LIMIT, outcomes.append)
        deleting = asyncio.ensure_future(deferred.delete_response(mine.id, "resp_gone"))
        await asyncio.sleep(0.1)
        assert not deleting.done()
    assert await deleting  # it waited for the write, then deleted what it wrote
    assert outcomes == [True]
    assert await deferred.get_response(mine.id, "resp_gone", NOW) is None
    assert await store.state_bytes(mine.id) == 0


async def test_a_refused_or_failed_write_is_told_and_counted(engine: Engine) -> None:
    store = engine.store
    deferred = DeferredResponses(store.responses)
    mine = await store.create_account("deferred-refused", 0, NOW)
    outcomes: list[bool | BaseException] = []
    big = response("resp_big", mine.id, inputs=(item("b1", "y" * 500),))
    deferred.save_after(big, 100, outcomes.append)  # over the account's limit: refused
    deferred.save_after(response("resp_dup", mine.id), LIMIT, outcomes.append)
    deferred.save_after(response("resp_dup", mine.id), LIMIT, outcomes.append)  # the same id again
    await deferred.drain()
    assert outcomes[0] is False and outcomes[1] is True and isinstance(outcomes[2], Exception)
    assert (deferred.kept, deferred.refused, deferred.failed) == (1, 1, 1)
    assert await deferred.get_response(mine.id, "resp_big", NOW) is None
    assert await deferred.get_response(mine.id, "resp_dup", NOW) is not None


async def test_gathered_writes_leave_together_when_read_or_drained(engine: Engine) -> None:
    """With a batch window far longer than the test, nothing is written until a read of one of the
    accounts starts the batch (all of it); ``drain`` starts what is gathering."""
    store = engine.store
    deferred = DeferredResponses(store.responses, batch_seconds=3600)
    mine = await store.create_account("batched-mine", 0, NOW)
    other = await store.create_account("batched-other", 0, NOW)
    outcomes: list[bool | BaseException] = []
    deferred.save_after(response("resp_a", mine.id, inputs=(item("a1", "x"),)), LIMIT, outcomes.append)
    deferred.save_after(response("resp_b", other.id, inputs=(item("b1", "y"),)), LIMIT, outcomes.append)
    await asyncio.sleep(0.05)
    assert await store.get_response(mine.id, "resp_a", NOW) is None  # still gathering
    assert deferred.in_flight == 2 and outcomes == []
    found = await deferred.get_response(mine.id, "resp_a", NOW)  # starts the batch and waits
    assert found is not None
    await deferred.drain()
    assert outcomes == [True, True] and deferred.in_flight == 0
    assert await store.get_response(other.id, "resp_b", NOW) is not None

    deferred.save_after(response("resp_c", other.id), LIMIT, outcomes.append)
    await deferred.drain()  # a stop writes what is gathering
    assert outcomes[-1] is True and await store.get_response(other.id, "resp_c", NOW) is not None
