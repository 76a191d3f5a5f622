"""``AccountStore`` on PostgreSQL: accounts, their balances and top-ups."""

from __future__ import annotations

from typing import Any

from modelgate.storage import rows
from modelgate.storage.postgres_database import PostgresRepository
from modelgate.storage.records import MAX_UC, Account, AmountTooLarge

_ACCOUNT_COLUMNS = rows.ACCOUNT_COLUMNS
_account = rows.account_record


class PostgresAccounts(PostgresRepository):
    async def create_account(self, name: str, balance_uc: int, now: float) -> Account:
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
                    "INSERT INTO topups (account_id, amount_uc, note, created_at) VALUES ($1, $2, 'initial', $3)",
                    row[0],
                    balance_uc,
                    now,
                )
            return _account(row)

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

    async def rename_account(self, account_id: int, name: str) -> Account | None:
        async with self._tx() as conn:
            row = await conn.fetchrow(
                f"UPDATE accounts SET name = $1 WHERE id = $2 RETURNING {_ACCOUNT_COLUMNS}", name, account_id
            )
        return _account(row) if row else None

    async def top_up(self, account_id: int, amount_uc: int, note: str, now: float) -> Account:
        async with self._tx() as conn:
            await conn.execute(
                "INSERT INTO topups (account_id, amount_uc, note, created_at) VALUES ($1, $2, $3, $4)",
                account_id,
                amount_uc,
                note,
                now,
            )
            row = await conn.fetchrow(
                f"UPDATE accounts SET balance_uc = balance_uc + $1 WHERE id = $2 AND balance_uc + $1 <= $3 "
                f"RETURNING {_ACCOUNT_COLUMNS}",
                amount_uc,
                account_id,
                MAX_UC,
            )
            if row is None and await conn.fetchval("SELECT 1 FROM accounts WHERE id = $1", account_id):
                raise AmountTooLarge(f"the balance would exceed the maximum of {MAX_UC} µc")
            return _account(row)

    async def topups_total(self, account_id: int) -> int:
        async with self._conn() as conn:
            total = await conn.fetchval(
                "SELECT COALESCE(SUM(amount_uc), 0) FROM topups WHERE account_id = $1", account_id
            )
        return int(total)

    async def set_hide_balance(self, account_id: int, hide: bool) -> Account | None:
        async with self._tx() as conn:
            row = await conn.fetchrow(
                f"UPDATE accounts SET hide_balance = $1 WHERE id = $2 RETURNING {_ACCOUNT_COLUMNS}",
                hide,
                account_id,
            )
        return _account(row) if row else None
