"""One key's usage log pages from the index by (key_id, created_at, request_id) (sqlite 0018 /
postgresql 0023): the page of a busy key reads its newest records in order instead of sorting
all of that key's records first. Checked on the plans both engines choose for the page's SQL."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import asyncpg

from modelgate.storage import reports
from modelgate.storage.reports import Params, UsageCursor, UsageFilter, dollar, qmark
from tests.storage.engines import fresh_database
from tests.whole_store import PostgresStore, SqliteStore

KEY_PAGE = UsageFilter(key_id="key_busy")
AFTER = UsageCursor(1_700_000_000.5, "req_x")


def page_sql(placeholder: Callable[[int], str], after: UsageCursor | None) -> tuple[str, list[object]]:
    p = Params(placeholder)
    return reports.page_sql("request_id", KEY_PAGE, 50, after, p), p.values


async def test_sqlite_pages_one_keys_log_from_its_index_without_sorting(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "index.db")
    await store.migrate()
    await store.close()
    with sqlite3.connect(tmp_path / "index.db") as db:
        for after in (None, AFTER):
            sql, values = page_sql(qmark, after)
            plan = " | ".join(row[-1] for row in db.execute("EXPLAIN QUERY PLAN " + sql, values))
            assert "usage_key_created" in plan, plan
            assert "TEMP B-TREE" not in plan, plan


async def test_postgresql_pages_one_keys_log_from_its_index_without_sorting() -> None:
    async with fresh_database() as url:
        store = PostgresStore(url)
        await store.migrate()
        await store.close()
        db = await asyncpg.connect(url)
        try:
            # An empty table is cheapest to scan whole: make the planner use an index if one fits.
            await db.execute("SET enable_seqscan = off")
            for after in (None, AFTER):
                sql, values = page_sql(dollar, after)
                rows = await db.fetch("EXPLAIN " + sql, *values)
                plan = " | ".join(row[0] for row in rows)
                assert "usage_key_created" in plan, plan
                assert "Sort" not in plan, plan
        finally:
            await db.close()
