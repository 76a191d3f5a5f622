"""``UsageStore`` and ``UsageReports`` on PostgreSQL, over a ``PostgresDatabase``, with the SQL shared with SQLite."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from modelgate.storage import reports, rows
from modelgate.storage.base import UsageRecord, UsageSummary
from modelgate.storage.postgres_database import PostgresDatabase
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

_DAY = "to_char(to_timestamp(created_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"


class PostgresReports:
    """``UsageStore`` and ``UsageReports``: the usage records, summed and paged."""

    def __init__(self, database: PostgresDatabase) -> None:
        self._database = database

    async def _fetch(self, sql: Callable[[Params], str]) -> list[Any]:
        p = Params(reports.dollar)
        text = sql(p)
        async with self._database.conn() as conn:
            return list(await conn.fetch(text, *p.values))

    async def usage_page(
        self, where: UsageFilter, *, limit: int, after: UsageCursor | None = None
    ) -> UsagePage:
        found = await self._fetch(lambda p: reports.page_sql(rows.USAGE_COLUMNS, where, limit, after, p))
        return reports.paged([rows.usage_record(r) for r in found], limit)

    async def usage_count(self, where: UsageFilter) -> int:
        found = await self._fetch(
            lambda p: f"SELECT COUNT(*) FROM usage_records WHERE {reports.usage_where(where, p)}"
        )
        return int(found[0][0])

    async def usage_facets(self, where: UsageFilter) -> UsageFacets:
        return reports.facets_of(await self._fetch(lambda p: reports.facets_sql(where, p)))

    async def usage_daily(
        self, month: str, *, account_id: int | None = None, key_id: str | None = None
    ) -> list[DailyUsage]:
        return reports.daily_of(
            await self._fetch(lambda p: reports.daily_sql(_DAY, month, account_id, key_id, p))
        )

    async def top_keys(self, month: str, *, account_id: int | None = None, limit: int = 5) -> list[KeySpend]:
        return reports.top_keys_of(
            await self._fetch(lambda p: reports.top_keys_sql(month, account_id, limit, p))
        )

    async def key_activity(self, month: str, account_id: int | None = None) -> dict[str, KeyActivity]:
        return reports.key_activity_of(
            await self._fetch(lambda p: reports.key_activity_sql(month, account_id, p))
        )

    @staticmethod
    def _usage_filter(month: str, account_id: int | None, key_id: str | None) -> tuple[str, list[Any]]:
        where: list[str] = ["month = $1"]
        args: list[Any] = [month]
        if account_id is not None:
            args.append(account_id)
            where.append(f"account_id = ${len(args)}")
        if key_id is not None:
            args.append(key_id)
            where.append(f"key_id = ${len(args)}")
        return " AND ".join(where), args

    async def usage_summary(
        self, month: str, *, account_id: int | None = None, key_id: str | None = None
    ) -> UsageSummary:
        where, args = self._usage_filter(month, account_id, key_id)
        async with self._database.conn() as conn:
            total = await conn.fetchrow(
                "SELECT COUNT(*), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), "
                "COALESCE(SUM(cache_creation_tokens), 0), COALESCE(SUM(cache_read_tokens), 0), "
                "COALESCE(SUM(charged_uc), 0), COALESCE(SUM(web_search_requests), 0) "
                f"FROM usage_records WHERE {where}",
                *args,
            )
            by_model = await conn.fetch(
                f"SELECT model, SUM(charged_uc) FROM usage_records WHERE {where} GROUP BY model ORDER BY model",
                *args,
            )
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

    async def usage_records(
        self, month: str, *, account_id: int | None = None, key_id: str | None = None, limit: int = 100
    ) -> list[UsageRecord]:
        where, args = self._usage_filter(month, account_id, key_id)
        async with self._database.conn() as conn:
            found = await conn.fetch(
                f"SELECT {rows.USAGE_COLUMNS} FROM usage_records WHERE {where} "
                f"ORDER BY created_at DESC LIMIT ${len(args) + 1}",
                *args,
                limit,
            )
        return [rows.usage_record(r) for r in found]
