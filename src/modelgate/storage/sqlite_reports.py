"""``UsageReports`` on SQLite (a repository over ``SqliteDatabase``).

Totals, daily charts and top keys read the usage rollups (``storage.rollups``); the log's pages
read the records along an index. Neither ever runs on the event loop: they run on a reader thread
of their own, with its own connection (WAL lets it read while the loop writes), and
Python's sqlite3 releases the GIL while SQLite works. The ledger's worker thread stays free for
the writes that need it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from modelgate.storage import reports, rollups, rows
from modelgate.storage.reports import (
    DailyUsage,
    KeyActivity,
    KeySpend,
    Params,
    UsageCursor,
    UsageFacets,
    UsageFilter,
    UsagePage,
)
from modelgate.storage.sqlite_database import SqliteRepository

T = TypeVar("T")


class SqliteReports(SqliteRepository):
    @staticmethod
    def _fetch(sql: Callable[[Params], str]) -> Callable[[sqlite3.Connection], list[Any]]:
        def query(db: sqlite3.Connection) -> list[Any]:
            p = Params(reports.qmark)
            text = sql(p)
            return db.execute(text, p.values).fetchall()

        return query

    async def usage_page(
        self, where: UsageFilter, *, limit: int, after: UsageCursor | None = None
    ) -> UsagePage:
        found = await self._read(
            self._fetch(lambda p: reports.page_sql(rows.USAGE_COLUMNS, where, limit, after, p))
        )
        return reports.paged([rows.usage_record(r) for r in found], limit)

    async def usage_count(self, where: UsageFilter) -> int:
        if rollups.answers(where):
            found = await self._read(self._fetch(lambda p: rollups.count_sql(where, p)))
        else:
            found = await self._read(
                self._fetch(
                    lambda p: f"SELECT COUNT(*) FROM usage_records WHERE {reports.usage_where(where, p)}"
                )
            )
        return int(found[0][0])

    async def usage_facets(self, where: UsageFilter) -> UsageFacets:
        sql = rollups.facets_sql if rollups.answers(where) else reports.facets_sql
        return reports.facets_of(await self._read(self._fetch(lambda p: sql(where, p))))

    async def usage_daily(
        self, month: str, *, account_id: int | None = None, key_id: str | None = None
    ) -> list[DailyUsage]:
        found = await self._read(self._fetch(lambda p: rollups.daily_sql(month, account_id, key_id, p)))
        return reports.daily_of(found)

    async def top_keys(self, month: str, *, account_id: int | None = None, limit: int = 5) -> list[KeySpend]:
        found = await self._read(self._fetch(lambda p: rollups.top_keys_sql(month, account_id, limit, p)))
        return reports.top_keys_of(found)

    async def key_activity(
        self, month: str, account_id: int | None = None, key_ids: list[str] | None = None
    ) -> dict[str, KeyActivity]:
        found = await self._read(
            self._fetch(lambda p: reports.key_activity_sql(month, account_id, p, key_ids))
        )
        return reports.key_activity_of(found)
