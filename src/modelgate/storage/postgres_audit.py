"""``AuditStore`` on PostgreSQL: the audit log, the account ledger, monthly statement figures and
alert claims; ``append`` is what audited writes of the other repositories call inside their
transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from modelgate.storage.audit import AuditEntry, AuditFilter, LedgerEntry, State, StatementFigures
from modelgate.storage.postgres_database import PostgresRepository

_AUDIT_COLUMNS = "id, at, actor, action, target, account_id, before::text, after::text, request_id, client"
_LEDGER_COLUMNS = "id, account_id, kind, amount_uc, note, actor, created_at"


def _json(value: State | None) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


async def append(conn: Any, entry: AuditEntry) -> int:
    """Append ``entry`` in the caller's open transaction."""
    return int(
        await conn.fetchval(
            "INSERT INTO audit_log (at, actor, action, target, account_id, before, after, request_id, client) "
            "VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7::jsonb, $8, $9) RETURNING id",
            entry.at,
            entry.actor,
            entry.action,
            entry.target,
            entry.account_id,
            _json(entry.before),
            _json(entry.after),
            entry.request_id,
            entry.client,
        )
    )


def _entry(row: Sequence[Any]) -> AuditEntry:
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


class PostgresAudit(PostgresRepository):
    async def append_audit(self, entry: AuditEntry) -> int:
        async with self._tx() as conn:
            return await append(conn, entry)

    async def audit_page(
        self, where: AuditFilter, *, limit: int, before_id: int | None = None
    ) -> list[AuditEntry]:
        conditions: list[str] = []
        args: list[Any] = []
        for column, value in (
            ("account_id = ", where.account_id),
            ("action = ", where.action),
            ("actor = ", where.actor),
            ("target = ", where.target),
            ("at >= ", where.since),
            ("at < ", where.until),
            ("id < ", before_id),
        ):
            if value is not None:
                args.append(value)
                conditions.append(f"{column}${len(args)}")
        sql = f"SELECT {_AUDIT_COLUMNS} FROM audit_log"
        if conditions:
            sql += " WHERE " + " AND ".join(conditions)
        args.append(limit)
        sql += f" ORDER BY id DESC LIMIT ${len(args)}"
        async with self._conn() as conn:
            found = await conn.fetch(sql, *args)
        return [_entry(r) for r in found]

    async def ledger_page(
        self, account_id: int, *, limit: int, before_id: int | None = None
    ) -> list[LedgerEntry]:
        async with self._conn() as conn:
            found = await conn.fetch(
                f"SELECT {_LEDGER_COLUMNS} FROM topups WHERE account_id = $1 AND ($2::bigint IS NULL OR id < $2) "
                "ORDER BY id DESC LIMIT $3",
                account_id,
                before_id,
                limit,
            )
        return [LedgerEntry(*r) for r in found]

    async def statement_figures(
        self, account_id: int, since: float, until: float, month: str
    ) -> StatementFigures:
        async with self._conn() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            # One snapshot: the sums and the balance agree to the micro-credit.
            account = await conn.fetchrow(
                "SELECT balance_uc, reserved_uc FROM accounts WHERE id = $1", account_id
            ) or (0, 0)
            ledger = await conn.fetchrow(
                "SELECT "
                "COALESCE(SUM(amount_uc) FILTER (WHERE kind = 'topup' AND created_at < $2), 0), "
                "COALESCE(SUM(amount_uc) FILTER (WHERE kind <> 'topup' AND created_at < $2), 0), "
                "COALESCE(SUM(amount_uc) FILTER (WHERE kind = 'topup' AND created_at >= $2 AND created_at < $3), 0), "
                "COALESCE(SUM(amount_uc) FILTER (WHERE kind <> 'topup' AND created_at >= $2 AND created_at < $3), 0) "
                "FROM topups WHERE account_id = $1",
                account_id,
                since,
                until,
            )
            # From the rollups, which retention (usage.retention_days) leaves whole: the records
            # themselves may be gone, the money they moved is not.
            usage = await conn.fetchrow(
                "SELECT COALESCE(SUM(charged_uc) FILTER (WHERE month < $2), 0), "
                "COALESCE(SUM(charged_uc) FILTER (WHERE month = $2), 0), "
                "COALESCE(SUM(requests) FILTER (WHERE month = $2), 0) "
                "FROM usage_account_rollups WHERE account_id = $1 AND month <= $2",
                account_id,
                month,
            )
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

    async def claim_alert(self, event: str, subject: str, window: str, now: float) -> bool:
        async with self._conn() as conn:
            status = await conn.execute(
                "INSERT INTO alert_claims (event, subject, period, at) VALUES ($1, $2, $3, $4) "
                "ON CONFLICT DO NOTHING",
                event,
                subject,
                window,
                now,
            )
        return bool(status == "INSERT 0 1")
