"""``UsageStore`` and ``UsageReports`` on SQLite, over a ``SqliteDatabase``.

Report queries can scan a month of records, so they never run on the event loop: they run on a
reader thread of their own, with its own connection (WAL lets it read while the loop writes), and
Python's sqlite3 releases the GIL while SQLite works. The ledger's worker thread stays free for
the writes that need it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from modelgate.storage import reports, rows
from modelgate.storage.base import UsageRecord, UsageSummary
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
from modelgate.storage.sqlite_database import SqliteDatabase

_DAY = "strftime('%Y-%m-%d', created_at, 'unixepoch')"


class SqliteReports:
    """``UsageStore`` and ``UsageReports``: the usage records, summed and paged."""

    def __init__(self, database: SqliteDatabase) -> None:
        self._database = database

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
        found = await self._database.read(
            self._fetch(lambda p: reports.page_sql(rows.USAGE_COLUMNS, where, limit, after, p))
        )
        return reports.paged([rows.usage_record(r) for r in found], limit)

    async def usage_count(self, where: UsageFilter) -> int:
        found = await self._database.read(
            self._fetch(lambda p: f"SELECT COUNT(*) FROM usage_records WHERE {reports.usage_where(where, p)}")
        )
        return int(found[0][0])

    async def usage_facets(self, where: UsageFilter) -> UsageFacets:
        return reports.facets_of(
            await self._database.read(self._fetch(lambda p: reports.facets_sql(where, p)))
        )

    async def usage_daily(
        self, month: str, *, account_id: int | None = None, key_id: str | None = None
    ) -> list[DailyUsage]:
        found = await self._database.read(
            self._fetch(lambda p: reports.daily_sql(_DAY, month, account_id, key_id, p))
        )
        return reports.daily_of(found)

    async def top_keys(self, month: str, *, account_id: int | None = None, limit: int = 5) -> list[KeySpend]:
        found = await self._database.read(
            self._fetch(lambda p: reports.top_keys_sql(month, account_id, limit, p))
        )
        return reports.top_keys_of(found)

    async def key_activity(self, month: str, account_id: int | None = None) -> dict[str, KeyActivity]:
        found = await self._database.read(
            self._fetch(lambda p: reports.key_activity_sql(month, account_id, p))
        )
        return reports.key_activity_of(found)

    @staticmethod
    def _usage_filter(month: str, account_id: int | None, key_id: str | None) -> tuple[str, list[Any]]:
        where: list[str] = ["month = ?"]
        args: list[Any] = [month]
        if account_id is not None:
            where.append("account_id = ?")
            args.append(account_id)
        if key_id is not None:
            where.append("key_id = ?")
            args.append(key_id)
        return " AND ".join(where), args

    async def usage_summary(
        self, month: str, *, account_id: int | None = None, key_id: str | None = None
    ) -> UsageSummary:
        where, args = self._usage_filter(month, account_id, key_id)

        def op() -> UsageSummary:
            db = self._database.connection()
            total = db.execute(
                "SELECT COUNT(*), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), "
                "COALESCE(SUM(cache_creation_tokens), 0), COALESCE(SUM(cache_read_tokens), 0), "
                "COALESCE(SUM(charged_uc), 0), COALESCE(SUM(web_search_requests), 0) "
                f"FROM usage_records WHERE {where}",
                args,
            ).fetchone()
            by_model = db.execute(
                f"SELECT model, SUM(charged_uc) FROM usage_records WHERE {where} GROUP BY model ORDER BY model",
                args,
            ).fetchall()
            requests, input_tokens, output_tokens, cache_creation, cache_read, charged, searches = (
                int(v) for v in total
            )
            return UsageSummary(
                month,
                requests,
                input_tokens,
                output_tokens,
                cache_creation,
                cache_read,
                charged,
                by_model={m: int(c) for m, c in by_model},
                web_search_requests=searches,
            )

        return await self._database.run(op)

    async def usage_records(
        self, month: str, *, account_id: int | None = None, key_id: str | None = None, limit: int = 100
    ) -> list[UsageRecord]:
        where, args = self._usage_filter(month, account_id, key_id)
        found = await self._database.run(
            lambda: (
                self._database.connection()
                .execute(
                    f"SELECT {rows.USAGE_COLUMNS} FROM usage_records WHERE {where} ORDER BY created_at DESC LIMIT ?",
                    (*args, limit),
                )
                .fetchall()
            )
        )
        return [rows.usage_record(r) for r in found]
