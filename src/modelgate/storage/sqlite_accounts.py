"""Accounts and API keys on SQLite (``AccountStore``, ``KeyStore``), over a ``SqliteDatabase``.

Every change to a key bumps its ``version`` (one counter over all keys), so ``keys_changed_since``
lets each process refresh its key cache with the rows changed since it last looked.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from modelgate.storage import rows
from modelgate.storage.base import MAX_UC, Account, AmountTooLarge, KeyControls, KeyRecord, NewKey
from modelgate.storage.sqlite_database import SqliteDatabase

_KEY_COLUMNS = rows.KEY_COLUMNS
_account = rows.account_record


def _key(row: tuple[Any, ...]) -> KeyRecord:
    return rows.key_record(row, tuple(orjson.loads(row[5])) if row[5] is not None else None)


class SqliteAccounts:
    """``AccountStore``: accounts, their balances and top-ups."""

    def __init__(self, database: SqliteDatabase) -> None:
        self._database = database

    async def create_account(self, name: str, balance_uc: int, now: float) -> Account:
        def op() -> Account:
            with self._database.write() as db:
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
                    db.execute("SELECT * FROM accounts WHERE id = ?", (cur.lastrowid,)).fetchone()
                )

        return await self._database.run(op)

    async def get_account(self, account_id: int) -> Account | None:
        row = await self._database.run(
            lambda: (
                self._database.connection()
                .execute("SELECT * FROM accounts WHERE id = ?", (account_id,))
                .fetchone()
            )
        )
        return _account(row) if row else None

    async def find_account(self, name: str) -> Account | None:
        row = await self._database.run(
            lambda: (
                self._database.connection()
                .execute("SELECT * FROM accounts WHERE name = ?", (name,))
                .fetchone()
            )
        )
        return _account(row) if row else None

    async def list_accounts(self) -> list[Account]:
        rows = await self._database.run(
            lambda: self._database.connection().execute("SELECT * FROM accounts ORDER BY id").fetchall()
        )
        return [_account(r) for r in rows]

    async def top_up(self, account_id: int, amount_uc: int, note: str, now: float) -> Account:
        def op() -> Account:
            with self._database.write() as db:
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
                return _account(db.execute("SELECT * FROM accounts WHERE id = ?", (account_id,)).fetchone())

        return await self._database.run(op)

    async def topups_total(self, account_id: int) -> int:
        row = await self._database.run(
            lambda: (
                self._database.connection()
                .execute("SELECT COALESCE(SUM(amount_uc), 0) FROM topups WHERE account_id = ?", (account_id,))
                .fetchone()
            )
        )
        return int(row[0])


class SqliteKeys:
    """``KeyStore``: API keys (digests only), their controls, rotation and revocation."""

    def __init__(self, database: SqliteDatabase) -> None:
        self._database = database

    @staticmethod
    def _next_version(db: sqlite3.Connection) -> int:
        return int(db.execute("SELECT COALESCE(MAX(version), 0) + 1 FROM api_keys").fetchone()[0])

    @staticmethod
    def _get_key(db: sqlite3.Connection, key_id: str) -> KeyRecord | None:
        row = db.execute(f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE id = ?", (key_id,)).fetchone()
        return _key(row) if row else None

    async def create_key(self, key: NewKey, now: float) -> KeyRecord:
        allowed = orjson.dumps(list(key.allowed_models)).decode() if key.allowed_models is not None else None

        def op() -> KeyRecord:
            with self._database.write() as db:
                db.execute(
                    "INSERT INTO api_keys (id, account_id, name, grp, rpm, allowed_models, monthly_cap_uc, "
                    "digest, prefix, last4, created_at, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        key.id,
                        key.account_id,
                        key.name,
                        key.group,
                        key.rpm,
                        allowed,
                        key.monthly_cap_uc,
                        key.digest,
                        key.prefix,
                        key.last4,
                        now,
                        self._next_version(db),
                    ),
                )
                record = self._get_key(db, key.id)
                assert record is not None
                return record

        return await self._database.run(op)

    async def get_key(self, key_id: str) -> KeyRecord | None:
        return await self._database.run(lambda: self._get_key(self._database.connection(), key_id))

    async def list_keys(self, account_id: int | None = None) -> list[KeyRecord]:
        def op() -> list[KeyRecord]:
            if account_id is None:
                rows = self._database.connection().execute(
                    f"SELECT {_KEY_COLUMNS} FROM api_keys ORDER BY created_at, id"
                )
            else:
                rows = self._database.connection().execute(
                    f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE account_id = ? ORDER BY created_at, id",
                    (account_id,),
                )
            return [_key(r) for r in rows.fetchall()]

        return await self._database.run(op)

    async def update_key(self, key_id: str, controls: KeyControls, now: float) -> KeyRecord | None:
        sets: list[str] = []
        args: list[Any] = []
        if controls.name is not None:
            sets.append("name = ?")
            args.append(controls.name)
        if controls.rpm is not None:
            sets.append("rpm = ?")
            args.append(controls.rpm)
        if controls.allowed_models is not None:
            sets.append("allowed_models = ?")
            args.append(
                orjson.dumps(list(controls.allowed_models)).decode() if controls.allowed_models else None
            )
        if controls.monthly_cap_uc is not None:
            sets.append("monthly_cap_uc = ?")
            args.append(None if controls.monthly_cap_uc < 0 else controls.monthly_cap_uc)

        def op() -> KeyRecord | None:
            with self._database.write() as db:
                if self._get_key(db, key_id) is None:
                    return None
                db.execute(
                    f"UPDATE api_keys SET {', '.join([*sets, 'version = ?'])} WHERE id = ?",
                    (*args, self._next_version(db), key_id),
                )
                return self._get_key(db, key_id)

        return await self._database.run(op)

    async def rotate_key(
        self, key_id: str, digest: bytes, prefix: str, last4: str, grace_seconds: float, now: float
    ) -> KeyRecord | None:
        def op() -> KeyRecord | None:
            with self._database.write() as db:
                current = self._get_key(db, key_id)
                if current is None or current.state != "active":
                    return None
                # With no grace the old secret is dropped at once; otherwise it is kept as the
                # previous digest until it expires (one previous secret at a time).
                previous, expires = (
                    (current.digest, now + grace_seconds) if grace_seconds > 0 else (None, None)
                )
                db.execute(
                    "UPDATE api_keys SET digest = ?, prefix = ?, last4 = ?, previous_digest = ?, "
                    "previous_expires_at = ?, rotated_at = ?, version = ? WHERE id = ?",
                    (digest, prefix, last4, previous, expires, now, self._next_version(db), key_id),
                )
                return self._get_key(db, key_id)

        return await self._database.run(op)

    async def revoke_key(self, key_id: str, now: float) -> KeyRecord | None:
        def op() -> KeyRecord | None:
            with self._database.write() as db:
                current = self._get_key(db, key_id)
                if current is None:
                    return None
                if current.state != "disabled":
                    db.execute(
                        "UPDATE api_keys SET state = 'disabled', revoked_at = ?, version = ? WHERE id = ?",
                        (now, self._next_version(db), key_id),
                    )
                return self._get_key(db, key_id)

        return await self._database.run(op)

    async def keys_changed_since(self, version: int) -> list[KeyRecord]:
        rows = await self._database.run(
            lambda: (
                self._database.connection()
                .execute(
                    f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE version > ? ORDER BY version", (version,)
                )
                .fetchall()
            )
        )
        return [_key(r) for r in rows]
