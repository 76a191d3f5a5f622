"""``AccountStore`` on SQLite: accounts, their balances and top-ups."""

from __future__ import annotations

from modelgate.storage import rows
from modelgate.storage.records import MAX_UC, Account, AmountTooLarge
from modelgate.storage.sqlite_database import SqliteRepository

_account = rows.account_record
_COLUMNS = rows.ACCOUNT_COLUMNS


class SqliteAccounts(SqliteRepository):
    async def create_account(self, name: str, balance_uc: int, now: float) -> Account:
        def op() -> Account:
            with self._write() as db:
                cur = db.execute(
                    "INSERT INTO accounts (name, balance_uc, created_at) VALUES (?, ?, ?)",
                    (name, balance_uc, now),
                )
                if balance_uc:
                    db.execute(
                        "INSERT INTO topups (account_id, amount_uc, note, created_at) VALUES (?, ?, 'initial', ?)",
                        (cur.lastrowid, balance_uc, now),
                    )
                return _account(
                    db.execute(f"SELECT {_COLUMNS} FROM accounts WHERE id = ?", (cur.lastrowid,)).fetchone()
                )

        return await self._run(op)

    async def get_account(self, account_id: int) -> Account | None:
        row = await self._run(
            lambda: (
                self._db().execute(f"SELECT {_COLUMNS} FROM accounts WHERE id = ?", (account_id,)).fetchone()
            )
        )
        return _account(row) if row else None

    async def find_account(self, name: str) -> Account | None:
        row = await self._run(
            lambda: self._db().execute(f"SELECT {_COLUMNS} FROM accounts WHERE name = ?", (name,)).fetchone()
        )
        return _account(row) if row else None

    async def list_accounts(self) -> list[Account]:
        rows = await self._run(
            lambda: self._db().execute(f"SELECT {_COLUMNS} FROM accounts ORDER BY id").fetchall()
        )
        return [_account(r) for r in rows]

    async def rename_account(self, account_id: int, name: str) -> Account | None:
        def op() -> Account | None:
            with self._write() as db:
                db.execute("UPDATE accounts SET name = ? WHERE id = ?", (name, account_id))
                row = db.execute(f"SELECT {_COLUMNS} FROM accounts WHERE id = ?", (account_id,)).fetchone()
                return _account(row) if row else None

        return await self._run(op)

    async def top_up(self, account_id: int, amount_uc: int, note: str, now: float) -> Account:
        def op() -> Account:
            with self._write() as db:
                db.execute(
                    "INSERT INTO topups (account_id, amount_uc, note, created_at) VALUES (?, ?, ?, ?)",
                    (account_id, amount_uc, note, now),
                )
                updated = db.execute(
                    "UPDATE accounts SET balance_uc = balance_uc + ? WHERE id = ? AND balance_uc + ? <= ?",
                    (amount_uc, account_id, amount_uc, MAX_UC),
                ).rowcount
                if (
                    not updated
                    and db.execute("SELECT 1 FROM accounts WHERE id = ?", (account_id,)).fetchone()
                ):
                    raise AmountTooLarge(f"the balance would exceed the maximum of {MAX_UC} µc")
                return _account(
                    db.execute(f"SELECT {_COLUMNS} FROM accounts WHERE id = ?", (account_id,)).fetchone()
                )

        return await self._run(op)

    async def topups_total(self, account_id: int) -> int:
        row = await self._run(
            lambda: (
                self._db()
                .execute("SELECT COALESCE(SUM(amount_uc), 0) FROM topups WHERE account_id = ?", (account_id,))
                .fetchone()
            )
        )
        return int(row[0])

    async def set_hide_balance(self, account_id: int, hide: bool) -> Account | None:
        def op() -> Account | None:
            with self._write() as db:
                db.execute("UPDATE accounts SET hide_balance = ? WHERE id = ?", (int(hide), account_id))
                row = db.execute(f"SELECT {_COLUMNS} FROM accounts WHERE id = ?", (account_id,)).fetchone()
                return _account(row) if row else None

        return await self._run(op)
