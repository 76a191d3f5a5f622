"""Usage rollups (migrations sqlite 0013, postgresql 0018) on SQLite and PostgreSQL alike: every
report read from them equals the same report scanned from the records, over a few thousand records
across days, models, endpoints, statuses, keys and accounts; a rebuild restores them; retention
deletes only old records and leaves the rollups' sums."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

from modelgate.clock import month_of
from modelgate.retention import UsageSweeper
from modelgate.storage import reports
from modelgate.storage.base import KeyRecord, Store
from modelgate.storage.reports import Params, UsageFilter
from tests.gateway_server import ManualClock
from tests.storage.test_contract import hold, new_key, setup_key, usage_of
from tests.whole_store import PostgresStore, SqliteStore

DAY = 86_400.0
MAY_1 = datetime(2026, 5, 1, tzinfo=UTC).timestamp()
MODELS = ("aria-haiku-4.5", "aria-sonnet-4.5", "gpt-5-mini")
ENDPOINTS = ("messages", "chat", "responses")
STATUSES = ("ok", "ok", "ok", "upstream_error", "client_closed")
RECORDS = 2_400


async def raw(store: Store, sql: Callable[[Params], str]) -> list[tuple[Any, ...]]:
    """A report's query run as given (here: the scan of the records the rollups replace)."""
    if isinstance(store, SqliteStore):
        p = Params(reports.qmark)
        text = sql(p)
        return [tuple(r) for r in store.database.db().execute(text, p.values).fetchall()]
    assert isinstance(store, PostgresStore)
    p = Params(reports.dollar)
    text = sql(p)
    async with store.database.conn() as conn:
        return [tuple(r) for r in await conn.fetch(text, *p.values)]


def totals_sql(month: str, account_id: int | None, key_id: str | None, p: Params) -> str:
    in_month = f"month = {p(month)}"
    return (
        "SELECT COUNT(*), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), "
        "COALESCE(SUM(cache_creation_tokens), 0), COALESCE(SUM(cache_read_tokens), 0), "
        f"COALESCE(SUM(charged_uc), 0) FROM usage_records WHERE {in_month} AND "
        + reports.usage_where(UsageFilter(account_id=account_id, key_id=key_id), p)
    )


def count_sql(where: UsageFilter, p: Params) -> str:
    return f"SELECT COUNT(*) FROM usage_records WHERE {reports.usage_where(where, p)}"


def day_expression(store: Store) -> str:
    if isinstance(store, SqliteStore):
        return "strftime('%Y-%m-%d', created_at, 'unixepoch')"
    return "to_char(to_timestamp(created_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"


async def seed(store: Store) -> tuple[list[KeyRecord], list[float]]:
    """``RECORDS`` requests through the ledger (reserve, then settle), spread over 40 days (two
    months), three models, endpoints and statuses, six keys of two accounts."""
    rng = random.Random(34)
    keys: list[KeyRecord] = []
    for _ in range(2):
        account, first = await setup_key(store, balance=10**12)
        keys += [first, *[await store.create_key(new_key(account), MAY_1) for _ in range(2)]]
    starts: list[float] = []

    async def one(n: int) -> None:
        key = keys[rng.randrange(len(keys))]
        at = MAY_1 + 10 * DAY + rng.random() * 40 * DAY
        model, endpoint, status = rng.choice(MODELS), rng.choice(ENDPOINTS), rng.choice(STATUSES)
        request = replace(hold(key, 5_000, now=at, model=model), month=month_of(at), endpoint=endpoint)
        assert not hasattr(await store.reserve(request), "reason")
        usage = usage_of(request, rng.randrange(0, 5_000), status=status, endpoint=endpoint, model=model)
        usage.input_tokens, usage.output_tokens = rng.randrange(1, 9_000), rng.randrange(0, 3_000)
        usage.cache_read_tokens, usage.cache_creation_tokens = rng.randrange(0, 500), rng.randrange(0, 50)
        assert (await store.settle(usage)).applied
        starts.append(at)

    for chunk in range(0, RECORDS, 100):
        await asyncio.gather(*(one(n) for n in range(chunk, chunk + 100)))
    return keys, starts


async def assert_rollups_equal_the_records(store: Store, keys: list[KeyRecord]) -> None:
    day = day_expression(store)
    scopes: list[tuple[int | None, str | None]] = [(None, None)]
    scopes += [(keys[0].account_id, None), (keys[3].account_id, None), (None, keys[1].id), (None, keys[4].id)]
    for month in ("2026-05", "2026-06", "2026-07"):
        for account_id, key_id in scopes:
            daily = await store.usage_daily(month, account_id=account_id, key_id=key_id)
            scanned = await raw(store, partial(reports.daily_sql, day, month, account_id, key_id))
            assert daily == reports.daily_of(scanned)
            summary = await store.usage_summary(month, account_id=account_id, key_id=key_id)
            totals = await raw(store, partial(totals_sql, month, account_id, key_id))
            assert (
                summary.requests,
                summary.input_tokens,
                summary.output_tokens,
                summary.cache_creation_tokens,
                summary.cache_read_tokens,
                summary.charged_uc,
            ) == tuple(int(v) for v in totals[0])
            assert sum(summary.by_model.values()) == summary.charged_uc
        for account_id in (None, keys[0].account_id):
            top = await store.top_keys(month, account_id=account_id, limit=50)
            assert top == reports.top_keys_of(
                await raw(store, partial(reports.top_keys_sql, month, account_id, 50))
            )
    for account_id, key_id in scopes:
        for since, until in ((None, None), (MAY_1 + 15 * DAY, MAY_1 + 33 * DAY), (MAY_1 + 31 * DAY, None)):
            for model in (None, MODELS[1]):
                where = UsageFilter(
                    account_id=account_id, key_id=key_id, model=model, since=since, until=until
                )
                count = await raw(store, partial(count_sql, where))
                assert await store.usage_count(where) == int(count[0][0])
                facets = reports.facets_of(await raw(store, partial(reports.facets_sql, where)))
                assert await store.usage_facets(where) == facets


async def test_every_report_from_the_rollups_equals_the_scan_of_the_records(store: Store) -> None:
    keys, _ = await seed(store)
    assert len(await raw(store, lambda p: "SELECT request_id FROM usage_records")) == RECORDS
    await assert_rollups_equal_the_records(store, keys)


async def test_a_rebuild_recomputes_the_rollups_from_the_records(store: Store) -> None:
    keys, _ = await seed(store)
    scanned_daily = await store.usage_daily("2026-05")
    # Damage both rollups: the rebuild must restore exactly what a scan says.
    await raw(store, lambda p: "UPDATE usage_rollups SET requests = 0, charged_uc = 1")
    await raw(store, lambda p: "DELETE FROM usage_account_rollups WHERE model = 'gpt-5-mini'")
    assert await store.usage_daily("2026-05") != scanned_daily
    assert await store.rebuild_rollups() > 0
    assert await store.usage_daily("2026-05") == scanned_daily
    await assert_rollups_equal_the_records(store, keys)


async def test_retention_deletes_only_records_older_than_the_cutoff_and_keeps_the_sums(store: Store) -> None:
    _, starts = await seed(store)
    before = {m: await store.usage_summary(m) for m in ("2026-05", "2026-06")}
    top_before = await store.top_keys("2026-05", limit=50)
    cutoff = MAY_1 + 30 * DAY + 3_600.5
    old = sum(1 for at in starts if at < cutoff)
    assert 0 < old < RECORDS
    deleted = 0
    while (batch := await store.delete_usage_before(cutoff, 100)) > 0:
        assert batch <= 100
        deleted += batch
    assert deleted == old
    left = await raw(store, lambda p: "SELECT created_at FROM usage_records")
    assert len(left) == RECORDS - old and min(float(r[0]) for r in left) >= cutoff
    # The rollups keep what was spent, records or not.
    assert {m: await store.usage_summary(m) for m in ("2026-05", "2026-06")} == before
    assert await store.top_keys("2026-05", limit=50) == top_before
    # A rebuild afterwards counts only the records that remain.
    await store.rebuild_rollups()
    for month in ("2026-05", "2026-06"):
        kept = sum(1 for at in starts if at >= cutoff and month_of(at) == month)
        assert (await store.usage_summary(month)).requests == kept
    assert (await store.usage_summary("2026-05")).requests < before["2026-05"].requests


async def test_the_usage_sweeper_deletes_past_the_retention_in_batches(store: Store) -> None:
    _, starts = await seed(store)
    now = MAY_1 + 50 * DAY
    sweeper = UsageSweeper(store, ManualClock(now), retention_days=20, interval=3600, batch=100)
    expected = sum(1 for at in starts if at < now - 20 * DAY)
    assert await sweeper.sweep() == expected == sweeper.deleted
    left = await raw(store, lambda p: "SELECT MIN(created_at), COUNT(*) FROM usage_records")
    assert float(left[0][0]) >= now - 20 * DAY and int(left[0][1]) == RECORDS - expected
    assert await sweeper.sweep() == 0
