"""``AccountStore`` on PostgreSQL: accounts, their balances and the ledger (top-ups, adjustments).

Writes that take an ``AuditDraft`` append its entry in their own transaction (``storage.audit``).
"""

from __future__ import annotations

from typing import Any

from modelgate.storage import postgres_audit, rows
from modelgate.storage.audit import AuditDraft, LedgerKind
from modelgate.storage.postgres_database import PostgresRepository
from modelgate.storage.records import (
    LIMITED,
    MAX_UC,
    Account,
    AccountCaps,
    AccountLimits,
    AmountTooLarge,
    Conflict,
)

_ACCOUNT_COLUMNS = rows.ACCOUNT_COLUMNS
_account = rows.account_record


async def _audited(conn: Any, account: Account, audit: AuditDraft[Account] | None) -> Account:
    if audit is not None:
        await postgres_audit.append(conn, audit.entry(account))
    return account


class PostgresAccounts(PostgresRepository):
    async def create_account(
        self, name: str, balance_uc: int, now: float, *, audit: AuditDraft[Account] | None = None
    ) -> Account:
        async with self._tx() as conn:
            row = await conn.fetchrow(
                f"INSERT INTO accounts (name, balance_uc, created_at) VALUES ($1, $2, $3) "
                f"RETURNING {_ACCOUNT_COLUMNS}",
                name,
                balance_uc,
                now,
            )
            if balance_uc:
                await conn.execute(
                    "INSERT INTO topups (account_id, amount_uc, note, created_at, actor) "
                    "VALUES ($1, $2, 'initial', $3, $4)",
                    row[0],
                    balance_uc,
                    now,
                    audit.actor if audit is not None else "",
                )
            return await _audited(conn, _account(row), audit)

    async def _account_where(self, condition: str, value: Any) -> Account | None:
        async with self._conn() as conn:
            row = await conn.fetchrow(f"SELECT {_ACCOUNT_COLUMNS} FROM accounts WHERE {condition}", value)
        return _account(row) if row else None

    async def get_account(self, account_id: int) -> Account | None:
        return await self._account_where("id = $1", account_id)

    async def find_account(self, name: str) -> Account | None:
        return await self._account_where("name = $1", name)

    async def list_accounts(self) -> list[Account]:
        async with self._conn() as conn:
            rows = await conn.fetch(f"SELECT {_ACCOUNT_COLUMNS} FROM accounts ORDER BY id")
        return [_account(r) for r in rows]

    async def _update(
        self, sets: str, account_id: int, value: Any, audit: AuditDraft[Account] | None
    ) -> Account | None:
        async with self._tx() as conn:
            row = await conn.fetchrow(
                f"UPDATE accounts SET {sets} WHERE id = $2 RETURNING {_ACCOUNT_COLUMNS}", value, account_id
            )
            return None if row is None else await _audited(conn, _account(row), audit)

    async def rename_account(
        self, account_id: int, name: str, *, audit: AuditDraft[Account] | None = None
    ) -> Account | None:
        return await self._update("name = $1", account_id, name, audit)

    async def set_low_balance(
        self, account_id: int, threshold_uc: int | None, *, audit: AuditDraft[Account] | None = None
    ) -> Account | None:
        return await self._update("low_balance_uc = $1", account_id, threshold_uc, audit)

    async def top_up(
        self,
        account_id: int,
        amount_uc: int,
        note: str,
        now: float,
        *,
        audit: AuditDraft[Account] | None = None,
    ) -> Account:
        return await self._ledger_write(account_id, amount_uc, note, now, "topup", audit)

    async def adjust(
        self,
        account_id: int,
        amount_uc: int,
        note: str,
        now: float,
        *,
        audit: AuditDraft[Account] | None = None,
    ) -> Account:
        return await self._ledger_write(account_id, amount_uc, note, now, "adjustment", audit)

    async def _ledger_write(
        self,
        account_id: int,
        amount_uc: int,
        note: str,
        now: float,
        kind: LedgerKind,
        audit: AuditDraft[Account] | None,
    ) -> Account:
        async with self._tx() as conn:
            await conn.execute(
                "INSERT INTO topups (account_id, amount_uc, note, created_at, kind, actor) "
                "VALUES ($1, $2, $3, $4, $5, $6)",
                account_id,
                amount_uc,
                note,
                now,
                kind,
                audit.actor if audit is not None else "",
            )
            # A debit never takes the balance below what requests in flight hold.
            row = await conn.fetchrow(
                "UPDATE accounts SET balance_uc = balance_uc + $1 WHERE id = $2 AND balance_uc + $1 <= $3 "
                f"AND balance_uc + $1 >= reserved_uc RETURNING {_ACCOUNT_COLUMNS}",
                amount_uc,
                account_id,
                MAX_UC,
            )
            if row is None:
                if amount_uc > 0:
                    raise AmountTooLarge(f"the balance would exceed the maximum of {MAX_UC} µc")
                raise Conflict("the balance would fall below what requests in flight hold")
            return await _audited(conn, _account(row), audit)

    async def topups_total(self, account_id: int) -> int:
        async with self._conn() as conn:
            total = await conn.fetchval(
                "SELECT COALESCE(SUM(amount_uc), 0) FROM topups WHERE account_id = $1", account_id
            )
        return int(total)

    async def set_account_caps(
        self, account_id: int, caps: AccountCaps, *, audit: AuditDraft[Account] | None = None
    ) -> Account | None:
        changes = caps.columns()
        sets = ", ".join(f"{column} = ${i}" for i, (column, _) in enumerate(changes, start=2))
        async with self._tx() as conn:
            if sets:
                row = await conn.fetchrow(
                    f"UPDATE accounts SET {sets} WHERE id = $1 RETURNING {_ACCOUNT_COLUMNS}",
                    account_id,
                    *(v for _, v in changes),
                )
            else:
                row = await conn.fetchrow(
                    f"SELECT {_ACCOUNT_COLUMNS} FROM accounts WHERE id = $1", account_id
                )
            return None if row is None else await _audited(conn, _account(row), audit)

    async def set_account_limits(
        self, account_id: int, limits: AccountLimits, *, audit: AuditDraft[Account] | None = None
    ) -> Account | None:
        async with self._tx() as conn:
            row = await conn.fetchrow(
                "UPDATE accounts SET rpm = $1, tpm = $2, max_concurrency = $3 WHERE id = $4 "
                f"RETURNING {_ACCOUNT_COLUMNS}",
                limits.rpm,
                limits.tpm,
                limits.max_concurrency,
                account_id,
            )
            return None if row is None else await _audited(conn, _account(row), audit)

    async def limited_accounts(self) -> list[Account]:
        async with self._conn() as conn:
            rows = await conn.fetch(f"SELECT {_ACCOUNT_COLUMNS} FROM accounts WHERE {LIMITED}")
        return [_account(r) for r in rows]

    async def set_hide_balance(
        self, account_id: int, hide: bool, *, audit: AuditDraft[Account] | None = None
    ) -> Account | None:
        return await self._update("hide_balance = $1", account_id, hide, audit)
