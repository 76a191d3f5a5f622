"""``KeyStore`` on PostgreSQL: API key records (digests only).

Key versions come from a sequence. A sequence alone hands out numbers in call order but
transactions commit in any order: a poller that saw version 7 could miss a version 6 committed
just after. Key writers therefore hold a transaction-scoped advisory lock from ``nextval`` to
commit (PostgreSQL makes a commit visible before it releases locks), so versions become visible in
increasing order and ``keys_changed_since`` never skips one. Key writes are rare (admin actions),
so serialising them costs nothing on the request path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from modelgate.storage import key_search, postgres_audit, rows
from modelgate.storage.audit import AuditDraft
from modelgate.storage.key_pages import key_page_sql
from modelgate.storage.postgres_database import _LOCK_KEY_VERSIONS, PostgresRepository
from modelgate.storage.records import KeyControls, KeyRecord, NewKey, window_cap_columns
from modelgate.storage.reports import Params, dollar

_KEY_COLUMNS = rows.KEY_COLUMNS
KeyAudit = AuditDraft[KeyRecord] | None


def _key(row: Sequence[Any]) -> KeyRecord:
    return rows.key_record(
        row, tuple(row[5]) if row[5] is not None else None, tuple(row[20]) if row[20] is not None else None
    )


async def _audited(conn: Any, record: KeyRecord, audit: KeyAudit) -> KeyRecord:
    if audit is not None:
        await postgres_audit.append(conn, audit.entry(record))
    return record


class PostgresKeys(PostgresRepository):
    @staticmethod
    async def _next_version(conn: Any) -> int:
        """A new key version; the caller's transaction keeps the ordering lock until it commits."""
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY_VERSIONS)
        return int(await conn.fetchval("SELECT nextval('api_key_version')"))

    @staticmethod
    async def _get_key(conn: Any, key_id: str) -> KeyRecord | None:
        row = await conn.fetchrow(f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE id = $1", key_id)
        return _key(row) if row else None

    async def create_key(self, key: NewKey, now: float, *, audit: KeyAudit = None) -> KeyRecord:
        allowed = list(key.allowed_models) if key.allowed_models is not None else None
        async with self._tx() as conn:
            version = await self._next_version(conn)
            row = await conn.fetchrow(
                "INSERT INTO api_keys (id, account_id, name, grp, rpm, allowed_models, monthly_cap_uc, "
                "digest, prefix, last4, created_at, version, tpm, max_concurrency, expires_at, allowed_ips, "
                "cap_5h_uc, cap_day_uc, cap_week_uc) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19) "
                f"RETURNING {_KEY_COLUMNS}",
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
                version,
                key.tpm,
                key.max_concurrency,
                key.expires_at,
                list(key.allowed_ips) if key.allowed_ips else None,
                key.cap_5h_uc,
                key.cap_day_uc,
                key.cap_week_uc,
            )
            return await _audited(conn, _key(row), audit)

    async def get_key(self, key_id: str) -> KeyRecord | None:
        async with self._conn() as conn:
            return await self._get_key(conn, key_id)

    async def list_keys(self, account_id: int | None = None) -> list[KeyRecord]:
        async with self._conn() as conn:
            if account_id is None:
                rows = await conn.fetch(f"SELECT {_KEY_COLUMNS} FROM api_keys ORDER BY created_at, id")
            else:
                rows = await conn.fetch(
                    f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE account_id = $1 ORDER BY created_at, id",
                    account_id,
                )
        return [_key(r) for r in rows]

    async def update_key(
        self, key_id: str, controls: KeyControls, now: float, *, audit: KeyAudit = None
    ) -> KeyRecord | None:
        values: dict[str, Any] = {}
        if controls.name is not None:
            values["name"] = controls.name
        if controls.rpm is not None:
            values["rpm"] = controls.rpm
        if controls.allowed_models is not None:
            values["allowed_models"] = list(controls.allowed_models) if controls.allowed_models else None
        if controls.monthly_cap_uc is not None:
            values["monthly_cap_uc"] = None if controls.monthly_cap_uc < 0 else controls.monthly_cap_uc
        for column, limit in (("tpm", controls.tpm), ("max_concurrency", controls.max_concurrency)):
            if limit is not None:  # -1: no limit
                values[column] = None if limit < 0 else limit
        values.update(window_cap_columns(controls))
        if controls.expires_at is not None:
            values["expires_at"] = None if controls.expires_at < 0 else controls.expires_at
        if controls.allowed_ips is not None:
            values["allowed_ips"] = list(controls.allowed_ips) if controls.allowed_ips else None
        async with self._tx() as conn:
            if await self._get_key(conn, key_id) is None:
                return None
            values["version"] = await self._next_version(conn)
            sets = ", ".join(f"{column} = ${i}" for i, column in enumerate(values, start=2))
            row = await conn.fetchrow(
                f"UPDATE api_keys SET {sets} WHERE id = $1 RETURNING {_KEY_COLUMNS}", key_id, *values.values()
            )
            return await _audited(conn, _key(row), audit)

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
        async with self._tx() as conn:
            # The version lock serialises key writers, so the row cannot change under us.
            version = await self._next_version(conn)
            current = await self._get_key(conn, key_id)
            if current is None or current.state != "active":
                return None
            # With no grace the old secret is dropped at once; otherwise it is kept as the previous
            # digest until it expires (one previous secret at a time).
            previous, expires = (current.digest, now + grace_seconds) if grace_seconds > 0 else (None, None)
            row = await conn.fetchrow(
                "UPDATE api_keys SET digest = $2, prefix = $3, last4 = $4, previous_digest = $5, "
                f"previous_expires_at = $6, rotated_at = $7, version = $8 WHERE id = $1 RETURNING {_KEY_COLUMNS}",
                key_id,
                digest,
                prefix,
                last4,
                previous,
                expires,
                now,
                version,
            )
            return await _audited(conn, _key(row), audit)

    async def revoke_key(self, key_id: str, now: float, *, audit: KeyAudit = None) -> KeyRecord | None:
        async with self._tx() as conn:
            version = await self._next_version(conn)
            current = await self._get_key(conn, key_id)
            if current is None or current.state == "disabled":
                return current
            row = await conn.fetchrow(
                "UPDATE api_keys SET state = 'disabled', revoked_at = $2, version = $3 WHERE id = $1 "
                f"RETURNING {_KEY_COLUMNS}",
                key_id,
                now,
                version,
            )
            return await _audited(conn, _key(row), audit)

    async def key_page(
        self,
        account_id: int | None,
        *,
        limit: int,
        after: tuple[float, str] | None = None,
        search: str = "",
        owner: str | None = None,
    ) -> list[KeyRecord]:
        p = Params(dollar)
        sql = key_page_sql(account_id, limit, after, search, p, owner)
        async with self._conn() as conn:
            if search:
                async with conn.transaction():
                    await conn.execute(key_search.CUSTOM_PLANS)
                    found = await conn.fetch(sql, *p.values)
            else:
                found = await conn.fetch(sql, *p.values)
        return [_key(r) for r in found]

    async def keys_changed_since(self, version: int, limit: int | None = None) -> list[KeyRecord]:
        async with self._conn() as conn:
            rows = await conn.fetch(
                f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE version > $1 ORDER BY version LIMIT $2",
                version,
                limit,
            )
        return [_key(r) for r in rows]
