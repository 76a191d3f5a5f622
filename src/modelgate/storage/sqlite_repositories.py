"""The SQLite repositories of accounts, keys, the ledger and usage records, each over the
``SqliteDatabase`` it is given (``storage.sqlite_database``). Writes use ``BEGIN IMMEDIATE``, which
takes SQLite's write lock up front: the read-check-update inside a reservation is serialised
against every other writer, the CLI included (WAL mode lets readers run alongside). A reservation
row lives only while its request is in flight: settle and release delete it, and the usage record
is the permanent trace.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from modelgate.storage import rows
from modelgate.storage import sqlite_ledger as ledger_sql
from modelgate.storage.base import (
    MAX_UC,
    Account,
    AmountTooLarge,
    KeyControls,
    KeyRecord,
    LedgerObserver,
    NewKey,
    Refusal,
    Reservation,
    ReserveRequest,
    Settlement,
    UsageRecord,
    UsageSummary,
)
from modelgate.storage.sqlite_database import SqliteDatabase

_KEY_COLUMNS = rows.KEY_COLUMNS
_USAGE_COLUMNS = rows.USAGE_COLUMNS
_account = rows.account_record
_usage = rows.usage_record


def _key(row: tuple[Any, ...]) -> KeyRecord:
    return rows.key_record(row, tuple(orjson.loads(row[5])) if row[5] is not None else None)


class SqliteAccounts:
    """``AccountStore``: accounts and their top-ups."""

    def __init__(self, database: SqliteDatabase) -> None:
        self.database = database

    async def create_account(self, name: str, balance_uc: int, now: float) -> Account:
        def op() -> Account:
            with self.database.write() as db:
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

        return await self.database.run(op)

    async def get_account(self, account_id: int) -> Account | None:
        row = await self.database.run(
            lambda: (
                self.database.conn().execute("SELECT * FROM accounts WHERE id = ?", (account_id,)).fetchone()
            )
        )
        return _account(row) if row else None

    async def find_account(self, name: str) -> Account | None:
        row = await self.database.run(
            lambda: self.database.conn().execute("SELECT * FROM accounts WHERE name = ?", (name,)).fetchone()
        )
        return _account(row) if row else None

    async def list_accounts(self) -> list[Account]:
        rows = await self.database.run(
            lambda: self.database.conn().execute("SELECT * FROM accounts ORDER BY id").fetchall()
        )
        return [_account(r) for r in rows]

    async def top_up(self, account_id: int, amount_uc: int, note: str, now: float) -> Account:
        def op() -> Account:
            with self.database.write() as db:
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

        return await self.database.run(op)

    async def topups_total(self, account_id: int) -> int:
        row = await self.database.run(
            lambda: (
                self.database.conn()
                .execute("SELECT COALESCE(SUM(amount_uc), 0) FROM topups WHERE account_id = ?", (account_id,))
                .fetchone()
            )
        )
        return int(row[0])


class SqliteKeys:
    """``KeyStore``: API key records; every change takes the next version."""

    def __init__(self, database: SqliteDatabase) -> None:
        self.database = database

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
            with self.database.write() as db:
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

        return await self.database.run(op)

    async def get_key(self, key_id: str) -> KeyRecord | None:
        return await self.database.run(lambda: self._get_key(self.database.conn(), key_id))

    async def list_keys(self, account_id: int | None = None) -> list[KeyRecord]:
        def op() -> list[KeyRecord]:
            if account_id is None:
                rows = self.database.conn().execute(
                    f"SELECT {_KEY_COLUMNS} FROM api_keys ORDER BY created_at, id"
                )
            else:
                rows = self.database.conn().execute(
                    f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE account_id = ? ORDER BY created_at, id",
                    (account_id,),
                )
            return [_key(r) for r in rows.fetchall()]

        return await self.database.run(op)

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
            with self.database.write() as db:
                if self._get_key(db, key_id) is None:
                    return None
                db.execute(
                    f"UPDATE api_keys SET {', '.join([*sets, 'version = ?'])} WHERE id = ?",
                    (*args, self._next_version(db), key_id),
                )
                return self._get_key(db, key_id)

        return await self.database.run(op)

    async def rotate_key(
        self, key_id: str, digest: bytes, prefix: str, last4: str, grace_seconds: float, now: float
    ) -> KeyRecord | None:
        def op() -> KeyRecord | None:
            with self.database.write() as db:
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

        return await self.database.run(op)

    async def revoke_key(self, key_id: str, now: float) -> KeyRecord | None:
        def op() -> KeyRecord | None:
            with self.database.write() as db:
                current = self._get_key(db, key_id)
                if current is None:
                    return None
                if current.state != "disabled":
                    db.execute(
                        "UPDATE api_keys SET state = 'disabled', revoked_at = ?, version = ? WHERE id = ?",
                        (now, self._next_version(db), key_id),
                    )
                return self._get_key(db, key_id)

        return await self.database.run(op)

    async def keys_changed_since(self, version: int) -> list[KeyRecord]:
        rows = await self.database.run(
            lambda: (
                self.database.conn()
                .execute(
                    f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE version > ? ORDER BY version", (version,)
                )
                .fetchall()
            )
        )
        return [_key(r) for r in rows]


class SqliteLedger:
    """``LedgerStore``: reserve, settle and release in the loop's shared transaction."""

    def __init__(self, database: SqliteDatabase) -> None:
        self.database = database

    async def reserve(self, request: ReserveRequest) -> Reservation | Refusal:
        self.database.file_probe.check_room()
        return await self.database.ledger.run(lambda db: ledger_sql.reserve(db, request))

    async def settle(self, usage: UsageRecord) -> Settlement:
        return await self.database.ledger.run(lambda db: ledger_sql.finish(db, usage, charge=True))

    async def release(self, usage: UsageRecord) -> Settlement:
        return await self.database.ledger.run(lambda db: ledger_sql.finish(db, usage, charge=False))

    async def expired_reservations(self, now: float, limit: int = 100) -> list[tuple[str, str, int, str]]:
        rows = await self.database.run(
            lambda: (
                self.database.conn()
                .execute(
                    "SELECT request_id, key_id, account_id, month FROM reservations "
                    "WHERE expires_at < ? ORDER BY expires_at LIMIT ?",
                    (now, limit),
                )
                .fetchall()
            )
        )
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    async def month_spend(self, key_id: str, month: str) -> tuple[int, int]:
        row = await self.database.run(
            lambda: (
                self.database.conn()
                .execute(
                    "SELECT spent_uc, reserved_uc FROM key_month_spend WHERE key_id = ? AND month = ?",
                    (key_id, month),
                )
                .fetchone()
            )
        )
        return (int(row[0]), int(row[1])) if row else (0, 0)

    async def pending_reservations(self) -> int:
        row = await self.database.run(
            lambda: self.database.conn().execute("SELECT COUNT(*) FROM reservations").fetchone()
        )
        return int(row[0])

    async def reservation_stats(self) -> tuple[int, float | None]:
        sql = "SELECT COUNT(*), MIN(created_at) FROM reservations"
        row = await self.database.run(lambda: self.database.conn().execute(sql).fetchone())
        return int(row[0]), None if row[1] is None else float(row[1])

    def observe_ledger(self, observer: LedgerObserver | None) -> None:
        self.database.ledger.observer = observer


class SqliteUsage:
    """``UsageStore``: the month's usage records and their totals."""

    def __init__(self, database: SqliteDatabase) -> None:
        self.database = database

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
            db = self.database.conn()
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

        return await self.database.run(op)

    async def usage_records(
        self, month: str, *, account_id: int | None = None, key_id: str | None = None, limit: int = 100
    ) -> list[UsageRecord]:
        where, args = self._usage_filter(month, account_id, key_id)
        rows = await self.database.run(
            lambda: (
                self.database.conn()
                .execute(
                    f"SELECT {_USAGE_COLUMNS} FROM usage_records WHERE {where} ORDER BY created_at DESC LIMIT ?",
                    (*args, limit),
                )
                .fetchall()
            )
        )
        return [_usage(r) for r in rows]
