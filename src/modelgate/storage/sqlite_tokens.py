"""Admin tokens on SQLite (a repository over ``SqliteDatabase``).

Authentication reads one row by digest per admin request, so a revocation written by any process
(the CLI, another instance sharing the file) is refused by the very next request.
"""

from __future__ import annotations

from typing import Any, TypeVar

from modelgate.storage import rows, sqlite_audit
from modelgate.storage.audit import AuditDraft
from modelgate.storage.records import AdminToken
from modelgate.storage.sqlite_database import SqliteRepository

T = TypeVar("T")
_COLUMNS = rows.ADMIN_TOKEN_COLUMNS


class SqliteAdminTokens(SqliteRepository):
    def _token_where(self, condition: str, *args: Any) -> list[AdminToken]:
        found = self._db().execute(f"SELECT {_COLUMNS} FROM admin_tokens WHERE {condition}", args)
        return [rows.admin_token_record(r) for r in found.fetchall()]

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
        def op() -> None:
            with self._write() as db:
                db.execute(
                    "INSERT INTO admin_tokens (id, digest, account_id, created_at, name, prefix, last4, "
                    "created_by, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (token_id, digest, account_id, now, name, prefix, last4, created_by, expires_at),
                )
                if audit is not None:
                    sqlite_audit.append(db, audit.entry(self._token_where("id = ?", token_id)[0]))

        await self._run(op)

    async def find_admin_token(self, digest: bytes) -> AdminToken | None:
        found = await self._run(self._token_where, "digest = ?", digest)
        return found[0] if found else None

    async def get_admin_token(self, token_id: str) -> AdminToken | None:
        found = await self._run(self._token_where, "id = ?", token_id)
        return found[0] if found else None

    async def list_admin_tokens(self, account_id: int | None = None) -> list[AdminToken]:
        if account_id is None:
            return await self._run(self._token_where, "1 = 1 ORDER BY created_at, id")
        return await self._run(self._token_where, "account_id = ? ORDER BY created_at, id", account_id)

    async def revoke_admin_token(
        self, token_id: str, now: float, *, audit: AuditDraft[AdminToken] | None = None
    ) -> AdminToken | None:
        def op() -> AdminToken | None:
            with self._write() as db:
                changed = db.execute(
                    "UPDATE admin_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                    (now, token_id),
                ).rowcount
                found = self._token_where("id = ?", token_id)
                if changed and found and audit is not None:
                    sqlite_audit.append(db, audit.entry(found[0]))
                return found[0] if found else None

        return await self._run(op)

    async def touch_admin_token(self, token_id: str, now: float, resolution: float) -> bool:
        def op() -> bool:
            with self._write() as db:
                cursor = db.execute(
                    "UPDATE admin_tokens SET last_used_at = ? WHERE id = ? "
                    "AND (last_used_at IS NULL OR last_used_at <= ?)",
                    (now, token_id, now - resolution),
                )
                return cursor.rowcount == 1

        return await self._run(op)

    async def count_admin_tokens(self) -> int:
        row = await self._run(lambda: self._db().execute("SELECT COUNT(*) FROM admin_tokens").fetchone())
        return int(row[0])

    async def holds_credentials(self) -> bool:
        sql = "SELECT EXISTS (SELECT 1 FROM api_keys) OR EXISTS (SELECT 1 FROM admin_tokens)"
        row = await self._run(lambda: self._db().execute(sql).fetchone())
        return bool(row[0])

    async def secret_fingerprint(self) -> str | None:
        sql = "SELECT fingerprint FROM secret_fingerprint WHERE id = 1"
        row = await self._run(lambda: self._db().execute(sql).fetchone())
        return None if row is None else str(row[0])

    async def record_secret_fingerprint(self, fingerprint: str, now: float) -> None:
        def op() -> None:
            with self._write() as tx:
                tx.execute(
                    "INSERT INTO secret_fingerprint VALUES (1, ?, ?) "
                    "ON CONFLICT (id) DO UPDATE SET fingerprint = excluded.fingerprint, "
                    "recorded_at = excluded.recorded_at",
                    (fingerprint, now),
                )

        await self._run(op)
