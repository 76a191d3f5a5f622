"""``UsageStore`` on PostgreSQL: month summaries and recent usage records."""

from __future__ import annotations

from typing import Any

from modelgate.storage import rows
from modelgate.storage.postgres_database import PostgresRepository
from modelgate.storage.records import UsageRecord, UsageSummary

_USAGE_COLUMNS = rows.USAGE_COLUMNS
_usage = rows.usage_record


class PostgresUsage(PostgresRepository):
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
        async with self._conn() as conn:
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
        async with self._conn() as conn:
            rows = await conn.fetch(
                f"SELECT {_USAGE_COLUMNS} FROM usage_records WHERE {where} "
                f"ORDER BY created_at DESC LIMIT ${len(args) + 1}",
                *args,
                limit,
            )
        return [_usage(r) for r in rows]
