"""``UsageStore`` on PostgreSQL: month summaries (from the rollups), recent usage records, the
rollups' rebuild and the deletion of old records (``usage.retention_days``)."""

from __future__ import annotations

from typing import Any

from modelgate.storage import rollups, rows
from modelgate.storage.postgres_database import PostgresRepository
from modelgate.storage.records import UsageRecord, UsageSummary
from modelgate.storage.reports import Params, dollar

_USAGE_COLUMNS = rows.USAGE_COLUMNS
_usage = rows.usage_record
_DAY = "to_char(to_timestamp(created_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"


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
        p = Params(dollar)
        sql = rollups.summary_sql(month, account_id, key_id, p)
        async with self._conn() as conn:
            found = await conn.fetch(sql, *p.values)
        return rollups.summary_of(month, list(found))

    async def usage_records(
        self, month: str, *, account_id: int | None = None, key_id: str | None = None, limit: int = 100
    ) -> list[UsageRecord]:
        where, args = self._usage_filter(month, account_id, key_id)
        async with self._conn() as conn:
            rows = await conn.fetch(
                f"SELECT {_USAGE_COLUMNS} FROM usage_records WHERE {where} "
                f"ORDER BY created_at DESC, request_id DESC LIMIT ${len(args) + 1}",
                *args,
                limit,
            )
        return [_usage(r) for r in rows]

    async def rebuild_rollups(self) -> int:
        async with self._tx() as conn:
            # SHARE mode: no record is inserted (no ledger batch commits) until the rebuild has.
            await conn.execute("LOCK TABLE usage_records IN SHARE MODE")
            for statement in rollups.rebuild_statements(_DAY):
                await conn.execute(statement)
            return int(await conn.fetchval("SELECT COUNT(*) FROM usage_rollups"))

    async def delete_usage_before(self, cutoff: float, limit: int) -> int:
        async with self._conn() as conn:
            status = await conn.execute(
                "DELETE FROM usage_records WHERE request_id IN (SELECT request_id FROM usage_records "
                "WHERE created_at < $1 ORDER BY created_at LIMIT $2)",
                cutoff,
                limit,
            )
        return int(status.split()[-1])
