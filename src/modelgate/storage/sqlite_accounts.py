"""``AccountStore`` on SQLite: accounts, their balances and the ledger (top-ups, adjustments).

Writes that take an ``AuditDraft`` append its entry in their own transaction (``storage.audit``).
"""

from __future__ import annotations

import sqlite3

from modelgate.storage import rows, sqlite_audit
from modelgate.storage.audit import AuditDraft, LedgerKind
from modelgate.storage.records import (
    LIMITED,
    MAX_UC,
    Account,
    AccountCaps,
    AccountLimits,
    AmountTooLarge,
    Conflict,
)
from modelgate.storage.sqlite_database import SqliteRepository

_account = rows.account_record
_SELECT = f"SELECT {rows.ACCOUNT_COLUMNS} FROM accounts"


def _get(db: sqlite3.Connection, account_id: int) -> Account | None:
    row = db.execute(f"{_SELECT} WHERE id = ?", (account_id,)).fetchone()
    return _account(row) if row else None


def _audited(db: sqlite3.Connection, account: Account, audit: AuditDraft[Account] | None) -> Account:
    if audit is not None:
        sqlite_audit.append(db, audit.entry(account))
    return account


class SqliteAccounts(SqliteRepository):
    async def create_account(
        self, name: str, balance_uc: int, now: float, *, audit: AuditDraft[Account] | None = None
    ) -> Account:
        actor = audit.actor if audit is not None else ""

        def op() -> Account:
            with self._write() as db:
                cur = db.execute(
                    "INSERT INTO accounts (name, balance_uc, created_at) VALUES (?, ?, ?)",
                    (name, balance_uc, now),
                )
                if balance_uc:
                    db.execute(
                        "INSERT INTO topups (account_id, amount_uc, note, created_at, actor) "
                        "VALUES (?, ?, 'initial', ?, ?)",
                        (cur.lastrowid, balance_uc, now, actor),
                    )
                account = _get(db, int(cur.lastrowid or 0))
                assert account is not None  # just written
                return _audited(db, account, audit)

        return await self._run(op)

    async def get_account(self, account_id: int) -> Account | None:
        return await self._run(lambda: _get(self._db(), account_id))

    async def find_account(self, name: str) -> Account | None:
        row = await self._run(lambda: self._db().execute(f"{_SELECT} WHERE name = ?", (name,)).fetchone())
        return _account(row) if row else None

    async def list_accounts(self) -> list[Account]:
        rows = await self._run(lambda: self._db().execute(f"{_SELECT} ORDER BY id").fetchall())
        return [_account(r) for r in rows]

    async def rename_account(
        self, account_id: int, name: str, *, audit: AuditDraft[Account] | None = None
    ) -> Account | None:
        def op() -> Account | None:
            with self._write() as db:
                db.execute("UPDATE accounts SET name = ? WHERE id = ?", (name, account_id))
                account = _get(db, account_id)
                return None if account is None else _audited(db, account, audit)

        return await self._run(op)

    async def set_low_balance(
        self, account_id: int, threshold_uc: int | None, *, audit: AuditDraft[Account] | None = None
    ) -> Account | None:
        def op() -> Account | None:
            with self._write() as db:
                db.execute("UPDATE accounts SET low_balance_uc = ? WHERE id = ?", (threshold_uc, account_id))
                account = _get(db, account_id)
                return None if account is None else _audited(db, account, audit)

        return await self._run(op)

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
        actor = audit.actor if audit is not None else ""

        def op() -> Account:
            with self._write() as db:
                db.execute(
                    "INSERT INTO topups (account_id, amount_uc, note, created_at, kind, actor) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (account_id, amount_uc, note, now, kind, actor),
                )
                # A debit never takes the balance below what requests in flight hold.
                updated = db.execute(
                    "UPDATE accounts SET balance_uc = balance_uc + ? WHERE id = ? AND balance_uc + ? <= ? "
                    "AND balance_uc + ? >= reserved_uc",
                    (amount_uc, account_id, amount_uc, MAX_UC, amount_uc),
                ).rowcount
                account = _get(db, account_id)
                if not updated and account is not None:
                    if amount_uc > 0:
                        raise AmountTooLarge(f"the balance would exceed the maximum of {MAX_UC} µc")
                    raise Conflict("the balance would fall below what requests in flight hold")
                if account is None:
                    raise Conflict(f"account {account_id} not found")
                return _audited(db, account, audit)

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

    async def set_account_caps(
        self, account_id: int, caps: AccountCaps, *, audit: AuditDraft[Account] | None = None
    ) -> Account | None:
        changes = caps.columns()

        def op() -> Account | None:
            with self._write() as db:
                if changes:
                    sets = ", ".join(f"{column} = ?" for column, _ in changes)
                    db.execute(
                        f"UPDATE accounts SET {sets} WHERE id = ?", (*(v for _, v in changes), account_id)
                    )
                account = _get(db, account_id)
                return None if account is None else _audited(db, account, audit)

        return await self._run(op)

    async def set_account_limits(
        self, account_id: int, limits: AccountLimits, *, audit: AuditDraft[Account] | None = None
    ) -> Account | None:
        def op() -> Account | None:
            with self._write() as db:
                db.execute(
                    "UPDATE accounts SET rpm = ?, tpm = ?, max_concurrency = ? WHERE id = ?",
                    (limits.rpm, limits.tpm, limits.max_concurrency, account_id),
                )
                account = _get(db, account_id)
                return None if account is None else _audited(db, account, audit)

        return await self._run(op)

    async def limited_accounts(self) -> list[Account]:
        rows = await self._run(lambda: self._db().execute(f"{_SELECT} WHERE {LIMITED}").fetchall())
        return [_account(r) for r in rows]

    async def set_hide_balance(
        self, account_id: int, hide: bool, *, audit: AuditDraft[Account] | None = None
    ) -> Account | None:
        def op() -> Account | None:
            with self._write() as db:
                db.execute("UPDATE accounts SET hide_balance = ? WHERE id = ?", (int(hide), account_id))
                account = _get(db, account_id)
                return None if account is None else _audited(db, account, audit)

        return await self._run(op)
