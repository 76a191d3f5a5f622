"""``KeyStore`` on SQLite: API key records (digests only), versioned for the auth view's polling."""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from modelgate.storage import key_search, rows, sqlite_audit
from modelgate.storage.audit import AuditDraft
from modelgate.storage.key_pages import key_page_sql, key_window_end_sql
from modelgate.storage.records import KeyControls, KeyRecord, NewKey, window_cap_columns
from modelgate.storage.reports import Params, qmark
from modelgate.storage.sqlite_database import SqliteRepository

_KEY_COLUMNS = rows.KEY_COLUMNS
KeyAudit = AuditDraft[KeyRecord] | None


def _json_list(value: str | None) -> tuple[str, ...] | None:
    return tuple(orjson.loads(value)) if value is not None else None


def _key(row: tuple[Any, ...]) -> KeyRecord:
    return rows.key_record(row, _json_list(row[5]), _json_list(row[20]))


def _json_text(values: tuple[str, ...] | None) -> str | None:
    """A list column as stored: JSON text; None and an empty list are both NULL (no restriction)."""
    return orjson.dumps(list(values)).decode() if values else None


class SqliteKeys(SqliteRepository):
    @staticmethod
    def _next_version(db: sqlite3.Connection) -> int:
        return int(db.execute("SELECT COALESCE(MAX(version), 0) + 1 FROM api_keys").fetchone()[0])

    @staticmethod
    def _get_key(db: sqlite3.Connection, key_id: str) -> KeyRecord | None:
        row = db.execute(f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE id = ?", (key_id,)).fetchone()
        return _key(row) if row else None

    @staticmethod
    def _audited(db: sqlite3.Connection, record: KeyRecord | None, audit: KeyAudit) -> KeyRecord | None:
        if record is not None and audit is not None:
            sqlite_audit.append(db, audit.entry(record))
        return record

    async def create_key(self, key: NewKey, now: float, *, audit: KeyAudit = None) -> KeyRecord:
        allowed = orjson.dumps(list(key.allowed_models)).decode() if key.allowed_models is not None else None

        def op() -> KeyRecord:
            with self._write() as db:
                db.execute(
                    "INSERT INTO api_keys (id, account_id, name, grp, rpm, allowed_models, monthly_cap_uc, "
                    "digest, prefix, last4, created_at, version, tpm, max_concurrency, expires_at, allowed_ips, "
                    "cap_5h_uc, cap_day_uc, cap_week_uc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                        key.tpm,
                        key.max_concurrency,
                        key.expires_at,
                        _json_text(key.allowed_ips),
                        key.cap_5h_uc,
                        key.cap_day_uc,
                        key.cap_week_uc,
                    ),
                )
                record = self._audited(db, self._get_key(db, key.id), audit)
                assert record is not None
                return record

        return await self._run(op)

    async def get_key(self, key_id: str) -> KeyRecord | None:
        return await self._run(lambda: self._get_key(self._db(), key_id))

    async def list_keys(self, account_id: int | None = None) -> list[KeyRecord]:
        def op() -> list[KeyRecord]:
            if account_id is None:
                rows = self._db().execute(f"SELECT {_KEY_COLUMNS} FROM api_keys ORDER BY created_at, id")
            else:
                rows = self._db().execute(
                    f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE account_id = ? ORDER BY created_at, id",
                    (account_id,),
                )
            return [_key(r) for r in rows.fetchall()]

        return await self._run(op)

    async def update_key(
        self, key_id: str, controls: KeyControls, now: float, *, audit: KeyAudit = None
    ) -> KeyRecord | None:
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
        for column, limit in (("tpm", controls.tpm), ("max_concurrency", controls.max_concurrency)):
            if limit is not None:  # -1: no limit
                sets.append(f"{column} = ?")
                args.append(None if limit < 0 else limit)
        for column, cap in window_cap_columns(controls):
            sets.append(f"{column} = ?")
            args.append(cap)
        if controls.expires_at is not None:
            sets.append("expires_at = ?")
            args.append(None if controls.expires_at < 0 else controls.expires_at)
        if controls.allowed_ips is not None:
            sets.append("allowed_ips = ?")
            args.append(_json_text(controls.allowed_ips))

        def op() -> KeyRecord | None:
            with self._write() as db:
                if self._get_key(db, key_id) is None:
                    return None
                db.execute(
                    f"UPDATE api_keys SET {', '.join([*sets, 'version = ?'])} WHERE id = ?",
                    (*args, self._next_version(db), key_id),
                )
                return self._audited(db, self._get_key(db, key_id), audit)

        return await self._run(op)

    async def rotate_key(
        self,
        key_id: str,
        digest: bytes,
        prefix: str,
        last4: str,
        grace_seconds: float,
        now: float,
        *,
        audit: KeyAudit = None,
    ) -> KeyRecord | None:
        def op() -> KeyRecord | None:
            with self._write() as db:
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
                return self._audited(db, self._get_key(db, key_id), audit)

        return await self._run(op)

    async def revoke_key(self, key_id: str, now: float, *, audit: KeyAudit = None) -> KeyRecord | None:
        def op() -> KeyRecord | None:
            with self._write() as db:
                current = self._get_key(db, key_id)
                if current is None:
                    return None
                if current.state != "disabled":
                    db.execute(
                        "UPDATE api_keys SET state = 'disabled', revoked_at = ?, version = ? WHERE id = ?",
                        (now, self._next_version(db), key_id),
                    )
                    return self._audited(db, self._get_key(db, key_id), audit)
                return current

        return await self._run(op)

    async def key_page(
        self,
        account_id: int | None,
        *,
        limit: int,
        after: tuple[float, str] | None = None,
        search: str = "",
        owner: str | None = None,
    ) -> list[KeyRecord]:
        def page(
            db: sqlite3.Connection, hits: bool = False, until: tuple[float, str] | None = None
        ) -> list[KeyRecord]:
            p = Params(qmark)
            among = key_search.sqlite_hits(search, p) if hits else None
            sql = key_page_sql(account_id, limit, after, search, p, owner, among, until)
            return [_key(r) for r in db.execute(sql, p.values).fetchall()]

        def op(db: sqlite3.Connection) -> list[KeyRecord]:
            if not search or not key_search.indexed(search):
                return page(db)
            cap = key_search.INDEXED_MATCHES
            (found,) = db.execute(
                key_search.sqlite_count_sql(), (key_search.fts_phrase(search), cap + 1)
            ).fetchone()
            if found <= cap:
                return page(db, hits=True)
            # Many matches: usually dense in key order, so the next keys fill the page; when they
            # do not (the matches sit further on), every candidate is read and sorted instead.
            p = Params(qmark)
            end = db.execute(
                key_window_end_sql(account_id, after, p, owner, key_search.SCAN_WINDOW), p.values
            ).fetchone()
            if end is None:  # fewer keys left than the window: scanning them all is the bound
                return page(db)
            first = page(db, until=(end[0], end[1]))
            return first if len(first) == limit else page(db, hits=True)

        return await self._read(op)

    async def keys_changed_since(self, version: int, limit: int | None = None) -> list[KeyRecord]:
        # On the reader thread, records built there too: a page of keys costs the event loop
        # nothing but the hop (``SqliteDatabase.read``).
        def op(db: sqlite3.Connection) -> list[KeyRecord]:
            found = db.execute(
                f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE version > ? ORDER BY version LIMIT ?",
                (version, -1 if limit is None else limit),
            ).fetchall()
            return [_key(r) for r in found]

        return await self._read(op)
