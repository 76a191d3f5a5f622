"""``UsageReports`` on PostgreSQL (a repository over ``PostgresDatabase``), with the SQL shared with SQLite:
totals, daily charts and top keys from the usage rollups (``storage.rollups``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from modelgate.storage import reports, rollups, rows
from modelgate.storage.postgres_database import PostgresRepository
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


class PostgresReports(PostgresRepository):
    async def _fetch(self, sql: Callable[[Params], str]) -> list[Any]:
        p = Params(reports.dollar)
        text = sql(p)
        async with self._conn() as conn:
            return list(await conn.fetch(text, *p.values))

    async def usage_page(
        self, where: UsageFilter, *, limit: int, after: UsageCursor | None = None
    ) -> UsagePage:
        found = await self._fetch(lambda p: reports.page_sql(rows.USAGE_COLUMNS, where, limit, after, p))
        return reports.paged([rows.usage_record(r) for r in found], limit)

    async def usage_count(self, where: UsageFilter) -> int:
        if rollups.answers(where):
            found = await self._fetch(lambda p: rollups.count_sql(where, p))
        else:
            found = await self._fetch(
                lambda p: f"SELECT COUNT(*) FROM usage_records WHERE {reports.usage_where(where, p)}"
            )
        return int(found[0][0])

    async def usage_facets(self, where: UsageFilter) -> UsageFacets:
        sql = rollups.facets_sql if rollups.answers(where) else reports.facets_sql
        return reports.facets_of(await self._fetch(lambda p: sql(where, p)))

    async def usage_daily(
        self, month: str, *, account_id: int | None = None, key_id: str | None = None
    ) -> list[DailyUsage]:
        return reports.daily_of(await self._fetch(lambda p: rollups.daily_sql(month, account_id, key_id, p)))

    async def top_keys(self, month: str, *, account_id: int | None = None, limit: int = 5) -> list[KeySpend]:
        return reports.top_keys_of(
            await self._fetch(lambda p: rollups.top_keys_sql(month, account_id, limit, p))
        )

    async def key_activity(
        self, month: str, account_id: int | None = None, key_ids: list[str] | None = None
    ) -> dict[str, KeyActivity]:
        return reports.key_activity_of(
            await self._fetch(lambda p: reports.key_activity_sql(month, account_id, p, key_ids))
        )
