"""The usage rollups are kept once per ledger batch (sqlite 0016, postgresql 0021: no trigger),
on SQLite and PostgreSQL alike: after a concurrent run of two instances on one database, whose
batches mix settlements, releases, replays, refusals and a duplicate record, every rollup row
equals the scan of the records, column by column; the triggers are gone."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from modelgate.clock import month_of
from modelgate.storage.base import Conflict, KeyRecord, Store
from tests.storage.conftest import StoreFactory
from tests.storage.rollup_scan import postgres_rollups_and_scan, sqlite_rollups_and_scan
from tests.storage.test_contract import hold, new_key, setup_key, usage_of
from tests.whole_store import PostgresStore, SqliteStore

DAY = 86_400.0
#: Mid-month: a day is in one month (SQLite rounds to milliseconds before it takes the day,
#: so 0.4 ms before a month's first midnight is in the new day but the old month).
MIDNIGHT = datetime(2026, 6, 15, tzinfo=UTC).timestamp()
MODELS = ("aria-haiku-4.5", "gpt-5-mini")
STATUSES = ("ok", "ok", "upstream_error", "client_closed")


async def rollups_and_scan(store: Store) -> list[tuple[list[object], list[object]]]:
    if isinstance(store, SqliteStore):
        return sqlite_rollups_and_scan(store.database.db())
    assert isinstance(store, PostgresStore)
    async with store.database.conn() as conn:
        return await postgres_rollups_and_scan(conn)


async def triggers(store: Store) -> list[str]:
    if isinstance(store, SqliteStore):
        found = (
            store.database.db().execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall()
        )
        return [str(r[0]) for r in found if "rollup" in str(r[0])]
    assert isinstance(store, PostgresStore)
    async with store.database.conn() as conn:
        rows = await conn.fetch("SELECT tgname FROM pg_trigger WHERE tgname LIKE '%rollup%'")
    return [str(r[0]) for r in rows]


async def test_rollups_kept_per_batch_equal_the_records_after_two_instances_ran_at_once(
    engine: StoreFactory,
) -> None:
    stores = [await engine(), await engine()]
    assert await triggers(stores[0]) == []
    rng = random.Random(16)
    keys: list[KeyRecord] = []
    for _ in range(2):
        account, first = await setup_key(stores[0], balance=10**12)
        keys += [first, await stores[0].create_key(new_key(account), MIDNIGHT - 40 * DAY)]
    settled: list[str] = []
    conflicts = 0

    async def one(n: int) -> None:
        nonlocal conflicts
        store = stores[n % 2]
        key = keys[rng.randrange(len(keys))]
        # Around midnight UTC, some within a millisecond of it: the day is the one a scan computes.
        at = MIDNIGHT + rng.choice((-1, 1)) * rng.choice((0.0004, 0.0006, 0.4, rng.random() * DAY))
        model, status = rng.choice(MODELS), rng.choice(STATUSES)
        request = replace(hold(key, 9_000, now=at, model=model), month=month_of(at), endpoint="chat")
        if n % 17 == 0 and settled:  # a request id already recorded: its settlement is refused
            request = replace(request, request_id=rng.choice(settled))
        try:  # (a reused id may be held by another of these right now: refused too)
            reserved = await store.reserve(request)
        except Conflict:
            conflicts += 1
            return
        assert not hasattr(reserved, "reason")
        usage = usage_of(request, rng.randrange(0, 9_000), status=status, endpoint="chat", model=model)
        usage.input_tokens, usage.output_tokens = rng.randrange(1, 9_000), rng.randrange(0, 3_000)
        usage.cache_read_tokens, usage.cache_creation_tokens = rng.randrange(0, 500), rng.randrange(0, 50)
        usage.cache_write_1h_tokens, usage.web_search_requests = rng.randrange(0, 10), rng.randrange(0, 3)
        finish = store.settle if n % 5 else store.release
        try:
            outcomes = await asyncio.gather(finish(usage), stores[(n + 1) % 2].settle(replace(usage)))
        except Conflict:
            conflicts += 1
            return
        # Of the settlement and its replay from the other instance, exactly one applied.
        assert sorted(o.applied for o in outcomes) == [False, True]
        settled.append(request.request_id)

    for chunk in range(0, 600, 60):
        await asyncio.gather(*(one(n) for n in range(chunk, chunk + 60)))
    assert conflicts > 0 and len(settled) > 400
    for kept, scanned in await rollups_and_scan(stores[0]):
        assert kept == scanned and kept


@pytest.mark.parametrize("created_at", [MIDNIGHT - 0.0004, MIDNIGHT - 0.0006, MIDNIGHT + 0.3])
async def test_a_record_near_midnight_counts_on_the_day_a_scan_gives_it(
    store: Store, created_at: float
) -> None:
    _, key = await setup_key(store, balance=10**9)
    request = replace(hold(key, 1_000, now=created_at), month=month_of(created_at))
    await store.reserve(request)
    assert (await store.settle(usage_of(request, 100))).applied
    for kept, scanned in await rollups_and_scan(store):
        assert kept == scanned and kept
