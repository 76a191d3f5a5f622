"""``AuditStore`` on SQLite: the audit log, the account ledger, monthly statement figures and alert
claims; ``append`` is what audited writes of the other repositories call inside their transaction.
Reads run on the reader thread (``SqliteDatabase.read``)."""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from modelgate.storage.audit import AuditEntry, AuditFilter, LedgerEntry, State, StatementFigures
from modelgate.storage.sqlite_database import SqliteRepository

_AUDIT_COLUMNS = "id, at, actor, action, target, account_id, before, after, request_id, client"
_LEDGER_COLUMNS = "id, account_id, kind, amount_uc, note, actor, created_at"


def _json(value: State | None) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def append(db: sqlite3.Connection, entry: AuditEntry) -> int:
    """Append ``entry`` in the caller's open write transaction."""
    cur = db.execute(
        "INSERT INTO audit_log (at, actor, action, target, account_id, before, after, request_id, client) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            entry.at,
            entry.actor,
            entry.action,
            entry.target,
            entry.account_id,
            _json(entry.before),
            _json(entry.after),
            entry.request_id,
            entry.client,
        ),
    )
    return int(cur.lastrowid or 0)


def _entry(row: tuple[Any, ...]) -> AuditEntry:
    return AuditEntry(
        id=row[0],
        at=row[1],
        actor=row[2],
        action=row[3],
        target=row[4],
        account_id=row[5],
        before=None if row[6] is None else orjson.loads(row[6]),
        after=None if row[7] is None else orjson.loads(row[7]),
        request_id=row[8],
        client=row[9],
    )


class SqliteAudit(SqliteRepository):
    async def append_audit(self, entry: AuditEntry) -> int:
        def op() -> int:
            with self._write() as db:
                return append(db, entry)

        return await self._run(op)

    async def audit_page(
        self, where: AuditFilter, *, limit: int, before_id: int | None = None
    ) -> list[AuditEntry]:
        conditions: list[str] = []
        args: list[Any] = []
        for column, value in (
            ("account_id = ?", where.account_id),
            ("action = ?", where.action),
            ("actor = ?", where.actor),
            ("target = ?", where.target),
            ("at >= ?", where.since),
            ("at < ?", where.until),
            ("id < ?", before_id),
        ):
            if value is not None:
                conditions.append(column)
                args.append(value)
        sql = f"SELECT {_AUDIT_COLUMNS} FROM audit_log"
        if conditions:
            sql += " WHERE " + " AND ".join(conditions)
        sql += " ORDER BY id DESC LIMIT ?"
        found = await self._read(lambda db: db.execute(sql, (*args, limit)).fetchall())
        return [_entry(r) for r in found]

    async def ledger_page(
        self, account_id: int, *, limit: int, before_id: int | None = None
    ) -> list[LedgerEntry]:
        sql = f"SELECT {_LEDGER_COLUMNS} FROM topups WHERE account_id = ?"
        args: list[Any] = [account_id]
        if before_id is not None:
            sql += " AND id < ?"
            args.append(before_id)
        sql += " ORDER BY id DESC LIMIT ?"
        found = await self._read(lambda db: db.execute(sql, (*args, limit)).fetchall())
        return [LedgerEntry(*r) for r in found]

    async def statement_figures(
        self, account_id: int, since: float, until: float, month: str
    ) -> StatementFigures:
        def query(db: sqlite3.Connection) -> StatementFigures:
            # One read transaction: the sums and the balance are of the same snapshot (WAL).
            db.execute("BEGIN")
            try:
                return figures(db)
            finally:
                db.execute("COMMIT")

        def figures(db: sqlite3.Connection) -> StatementFigures:
            account = db.execute(
                "SELECT balance_uc, reserved_uc FROM accounts WHERE id = ?", (account_id,)
            ).fetchone() or (0, 0)
            ledger = db.execute(
                "SELECT "
                "COALESCE(SUM(CASE WHEN kind = 'topup' AND created_at < ? THEN amount_uc END), 0), "
                "COALESCE(SUM(CASE WHEN kind <> 'topup' AND created_at < ? THEN amount_uc END), 0), "
                "COALESCE(SUM(CASE WHEN kind = 'topup' AND created_at >= ? AND created_at < ? THEN amount_uc END), 0), "
                "COALESCE(SUM(CASE WHEN kind <> 'topup' AND created_at >= ? AND created_at < ? THEN amount_uc END), 0) "
                "FROM topups WHERE account_id = ?",
                (since, since, since, until, since, until, account_id),
            ).fetchone()
            # From the rollups, which retention (usage.retention_days) leaves whole: the records
            # themselves may be gone, the money they moved is not.
            usage = db.execute(
                "SELECT COALESCE(SUM(CASE WHEN month < ? THEN charged_uc END), 0), "
                "COALESCE(SUM(CASE WHEN month = ? THEN charged_uc END), 0), "
                "COALESCE(SUM(CASE WHEN month = ? THEN requests END), 0) "
                "FROM usage_account_rollups WHERE account_id = ? AND month <= ?",
                (month, month, month, account_id, month),
            ).fetchone()
            return StatementFigures(
                top_ups_before_uc=int(ledger[0]),
                adjustments_before_uc=int(ledger[1]),
                usage_before_uc=int(usage[0]),
                top_ups_uc=int(ledger[2]),
                adjustments_uc=int(ledger[3]),
                usage_uc=int(usage[1]),
                requests=int(usage[2]),
                balance_uc=int(account[0]),
                reserved_uc=int(account[1]),
            )

        return await self._read(query)

    async def claim_alert(self, event: str, subject: str, window: str, now: float) -> bool:
        def op() -> bool:
            with self._write() as db:
                cur = db.execute(
                    "INSERT INTO alert_claims (event, subject, period, at) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT DO NOTHING",
                    (event, subject, window, now),
                )
                return cur.rowcount == 1

        return await self._run(op)
