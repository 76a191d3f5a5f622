"""Admin tokens on PostgreSQL (a repository over ``PostgresDatabase``, which provides the connections).

Every instance reads the token row on every admin request, so a revocation is refused by all
instances from the moment it commits.
"""

from __future__ import annotations

from typing import Any

from modelgate.storage import postgres_audit, rows
from modelgate.storage.audit import AuditDraft
from modelgate.storage.base import AdminToken
from modelgate.storage.postgres_database import PostgresRepository

_COLUMNS = rows.ADMIN_TOKEN_COLUMNS


class PostgresAdminTokens(PostgresRepository):
    async def create_admin_token(
        self,
        token_id: str,
        digest: bytes,
        account_id: int | None,
        now: float,
        *,
        name: str = "",
        prefix: str = "",
        last4: str = "",
        created_by: str | None = None,
        expires_at: float | None = None,
        audit: AuditDraft[AdminToken] | None = None,
    ) -> None:
        async with self._tx() as conn:
            row = await conn.fetchrow(
                "INSERT INTO admin_tokens (id, digest, account_id, created_at, name, prefix, last4, "
                f"created_by, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING {_COLUMNS}",
                token_id,
                digest,
                account_id,
                now,
                name,
                prefix,
                last4,
                created_by,
                expires_at,
            )
            if audit is not None:
                await postgres_audit.append(conn, audit.entry(rows.admin_token_record(row)))

    async def _one(self, condition: str, value: Any) -> AdminToken | None:
        async with self._conn() as conn:
            row = await conn.fetchrow(f"SELECT {_COLUMNS} FROM admin_tokens WHERE {condition}", value)
        return rows.admin_token_record(row) if row else None

    async def find_admin_token(self, digest: bytes) -> AdminToken | None:
        return await self._one("digest = $1", digest)

    async def get_admin_token(self, token_id: str) -> AdminToken | None:
        return await self._one("id = $1", token_id)

    async def list_admin_tokens(self, account_id: int | None = None) -> list[AdminToken]:
        async with self._conn() as conn:
            if account_id is None:
                found = await conn.fetch(f"SELECT {_COLUMNS} FROM admin_tokens ORDER BY created_at, id")
            else:
                found = await conn.fetch(
                    f"SELECT {_COLUMNS} FROM admin_tokens WHERE account_id = $1 ORDER BY created_at, id",
                    account_id,
                )
        return [rows.admin_token_record(r) for r in found]

    async def revoke_admin_token(
        self, token_id: str, now: float, *, audit: AuditDraft[AdminToken] | None = None
    ) -> AdminToken | None:
        async with self._tx() as conn:
            # The first revocation's instant is kept, a repeat changes nothing (and is not audited).
            row = await conn.fetchrow(
                f"UPDATE admin_tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL RETURNING {_COLUMNS}",
                token_id,
                now,
            )
            if row is not None:
                if audit is not None:
                    await postgres_audit.append(conn, audit.entry(rows.admin_token_record(row)))
                return rows.admin_token_record(row)
            row = await conn.fetchrow(f"SELECT {_COLUMNS} FROM admin_tokens WHERE id = $1", token_id)
        return rows.admin_token_record(row) if row else None

    async def touch_admin_token(self, token_id: str, now: float, resolution: float) -> bool:
        async with self._conn() as conn:
            status = await conn.execute(
                "UPDATE admin_tokens SET last_used_at = $2 WHERE id = $1 "
                "AND (last_used_at IS NULL OR last_used_at <= $3)",
                token_id,
                now,
                now - resolution,
            )
        return bool(status == "UPDATE 1")

    async def count_admin_tokens(self) -> int:
        async with self._conn() as conn:
            return int(await conn.fetchval("SELECT COUNT(*) FROM admin_tokens"))

    async def holds_credentials(self) -> bool:
        sql = "SELECT EXISTS (SELECT 1 FROM api_keys) OR EXISTS (SELECT 1 FROM admin_tokens)"
        async with self._conn() as conn:
            return bool(await conn.fetchval(sql))

    async def secret_fingerprint(self) -> str | None:
        async with self._conn() as conn:
            value = await conn.fetchval("SELECT fingerprint FROM secret_fingerprint WHERE id = 1")
        return None if value is None else str(value)

    async def record_secret_fingerprint(self, fingerprint: str, now: float) -> None:
        async with self._conn() as conn:
            await conn.execute(
                "INSERT INTO secret_fingerprint VALUES (1, $1, $2) "
                "ON CONFLICT (id) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, "
                "recorded_at = EXCLUDED.recorded_at",
                fingerprint,
                now,
            )
