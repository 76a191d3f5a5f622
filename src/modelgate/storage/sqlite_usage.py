"""``UsageStore`` on SQLite: month summaries (from the rollups), recent usage records, the rollups'
rebuild and the deletion of old records (``usage.retention_days``).

Reads run on the reader thread with its own connection (``SqliteDatabase.read``), never on the
event loop; the rebuild and the deletions are writes and run on the worker thread, whose
connection waits for the write lock instead of failing.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from modelgate.storage import rollups, rows
from modelgate.storage.records import UsageRecord, UsageSummary
from modelgate.storage.reports import Params, qmark
from modelgate.storage.sqlite_database import SqliteRepository

_USAGE_COLUMNS = rows.USAGE_COLUMNS
_usage = rows.usage_record
_DAY = "strftime('%Y-%m-%d', created_at, 'unixepoch')"


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
        p = Params(qmark)
        sql = rollups.summary_sql(month, account_id, key_id, p)
        found = await self._read(lambda db: db.execute(sql, p.values).fetchall())
        return rollups.summary_of(month, found)

    async def usage_records(
        self, month: str, *, account_id: int | None = None, key_id: str | None = None, limit: int = 100
    ) -> list[UsageRecord]:
        where, args = self._usage_filter(month, account_id, key_id)
        sql = (
            f"SELECT {_USAGE_COLUMNS} FROM usage_records WHERE {where} "
            "ORDER BY created_at DESC, request_id DESC LIMIT ?"
        )
        found = await self._read(lambda db: db.execute(sql, (*args, limit)).fetchall())
        return [_usage(r) for r in found]

    async def rebuild_rollups(self) -> int:
        def op() -> int:
            with self._write() as db:  # BEGIN IMMEDIATE: no record is written meanwhile
                for statement in rollups.rebuild_statements(_DAY):
                    db.execute(statement)
                return int(db.execute("SELECT COUNT(*) FROM usage_rollups").fetchone()[0])

        return await self._run_on_worker(op)

    async def delete_usage_before(self, cutoff: float, limit: int) -> int:
        def op() -> int:
            with self._write() as db:
                return _delete_oldest(db, cutoff, limit)

        return await self._run_on_worker(op)


def _delete_oldest(db: sqlite3.Connection, cutoff: float, limit: int) -> int:
    """Oldest first along ``usage_created (created_at, request_id)``: a batch reads only what it deletes."""
    cursor = db.execute(
        "DELETE FROM usage_records WHERE request_id IN (SELECT request_id FROM usage_records "
        "WHERE created_at < ? ORDER BY created_at LIMIT ?)",
        (cutoff, limit),
    )
    return int(cursor.rowcount)
