"""``UsageStore`` on SQLite: month summaries and recent usage records."""

from __future__ import annotations

from typing import Any

from modelgate.storage import rows
from modelgate.storage.records import UsageRecord, UsageSummary
from modelgate.storage.sqlite_database import SqliteRepository

_USAGE_COLUMNS = rows.USAGE_COLUMNS
_usage = rows.usage_record


class SqliteUsage(SqliteRepository):
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
            db = self._db()
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

        return await self._run(op)

    async def usage_records(
        self, month: str, *, account_id: int | None = None, key_id: str | None = None, limit: int = 100
    ) -> list[UsageRecord]:
        where, args = self._usage_filter(month, account_id, key_id)
        rows = await self._run(
            lambda: (
                self._db()
                .execute(
                    f"SELECT {_USAGE_COLUMNS} FROM usage_records WHERE {where} ORDER BY created_at DESC LIMIT ?",
                    (*args, limit),
                )
                .fetchall()
            )
        )
        return [_usage(r) for r in rows]
