"""People, sessions, sign-ins, members and invitations on PostgreSQL (``storage.people``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from modelgate.storage import postgres_audit
from modelgate.storage.audit import AuditDraft
from modelgate.storage.people import (
    AdminSession,
    Invite,
    Member,
    PendingLogin,
    Person,
    Role,
    SessionRole,
)
from modelgate.storage.postgres_database import PostgresRepository

_PERSON = "p.id, p.issuer, p.subject, p.email, p.name, p.created_at, p.last_login_at"
#: An invitation makes its person a member with its role, but never demotes an owner.
_JOIN = (
    "INSERT INTO account_members VALUES ($1, $2, $3, $4) ON CONFLICT (account_id, person_id) DO UPDATE SET "
    "role = CASE WHEN account_members.role = 'owner' THEN 'owner' ELSE excluded.role END"
)
_INVITE = "id, account_id, role, email, created_by, created_at, expires_at, used_at, used_by"
_ONE_MEMBER = "m.account_id = $1 AND m.person_id = $2"


async def _members_on(conn: Any, condition: str, *args: Any) -> list[Member]:
    found = await conn.fetch(
        f"SELECT m.account_id, m.role, m.created_at, NULL, {_PERSON} FROM account_members m "
        f"JOIN people p ON p.id = m.person_id WHERE {condition} ORDER BY m.account_id, m.created_at, p.id",
        *args,
    )
    return [Member(int(r[0]), _person(r, 4), r[1], float(r[2])) for r in found]


_PUT_MEMBER = (
    "INSERT INTO account_members VALUES ($1, $2, $3, $4) "
    "ON CONFLICT (account_id, person_id) DO UPDATE SET role = excluded.role"
)


def _person(row: Any, at: int = 0) -> Person:
    return Person(
        str(row[at]),
        str(row[at + 1]),
        str(row[at + 2]),
        str(row[at + 3]),
        str(row[at + 4]),
        float(row[at + 5]),
        float(row[at + 6]),
    )


def _invite(row: Any) -> Invite:
    return Invite(
        str(row[0]),
        int(row[1]),
        row[2],
        str(row[3]),
        str(row[4]),
        float(row[5]),
        float(row[6]),
        None if row[7] is None else float(row[7]),
        None if row[8] is None else str(row[8]),
    )


class PostgresPeople(PostgresRepository):
    async def _one(self, sql: str, *args: Any) -> Any:
        async with self._conn() as conn:
            return await conn.fetchrow(sql, *args)

    async def _all(self, sql: str, *args: Any) -> list[Any]:
        async with self._conn() as conn:
            return list(await conn.fetch(sql, *args))

    async def _status(self, sql: str, *args: Any) -> int:
        async with self._conn() as conn:
            status = await conn.execute(sql, *args)
        return int(str(status).rsplit(" ", 1)[-1])

    # people -------------------------------------------------------------------------------
    async def upsert_person(
        self, new_id: str, issuer: str, subject: str, email: str, name: str, now: float
    ) -> Person:
        row = await self._one(
            "INSERT INTO people AS p (id, issuer, subject, email, name, created_at, last_login_at) "
            "VALUES ($1, $2, $3, $4, $5, $6, $6) ON CONFLICT (issuer, subject) DO UPDATE SET "
            "email = excluded.email, name = excluded.name, last_login_at = excluded.last_login_at "
            f"RETURNING {_PERSON}",
            new_id,
            issuer,
            subject,
            email,
            name,
            now,
        )
        return _person(row)

    async def get_person(self, person_id: str) -> Person | None:
        row = await self._one(f"SELECT {_PERSON} FROM people p WHERE id = $1", person_id)
        return None if row is None else _person(row)

    # sign-ins under way -------------------------------------------------------------------
    async def save_login(
        self,
        state_digest: bytes,
        browser_digest: bytes,
        verifier: str,
        nonce: str,
        invite_digest: bytes | None,
        now: float,
    ) -> None:
        await self._status(
            "INSERT INTO sso_logins VALUES ($1, $2, $3, $4, $5, $6)",
            state_digest,
            browser_digest,
            verifier,
            nonce,
            invite_digest,
            now,
        )

    async def take_login(self, state_digest: bytes) -> PendingLogin | None:
        row = await self._one(
            "DELETE FROM sso_logins WHERE state_digest = $1 "
            "RETURNING browser_digest, verifier, nonce, invite_digest, created_at",
            state_digest,
        )
        return (
            None
            if row is None
            else PendingLogin(
                bytes(row[0]), row[1], row[2], None if row[3] is None else bytes(row[3]), float(row[4])
            )
        )

    async def prune_logins(self, before: float) -> int:
        return await self._status("DELETE FROM sso_logins WHERE created_at < $1", before)

    async def count_logins(self) -> int:
        row = await self._one("SELECT COUNT(*) FROM sso_logins")
        return int(row[0])

    # sessions -----------------------------------------------------------------------------
    async def create_session(
        self,
        digest: bytes,
        person_id: str,
        account_id: int | None,
        role: SessionRole,
        csrf: str,
        now: float,
        expires_at: float,
    ) -> None:
        await self._status(
            "INSERT INTO admin_sessions VALUES ($1, $2, $3, $4, $5, $6, $6, $7)",
            digest,
            person_id,
            account_id,
            role,
            csrf,
            now,
            expires_at,
        )

    async def find_session(self, digest: bytes) -> AdminSession | None:
        row = await self._one(
            "SELECT s.digest, s.account_id, s.role, s.csrf, s.created_at, s.last_seen_at, s.expires_at, "
            f"{_PERSON} FROM admin_sessions s JOIN people p ON p.id = s.person_id WHERE s.digest = $1",
            digest,
        )
        if row is None:
            return None
        return AdminSession(
            bytes(row[0]),
            _person(row, 7),
            None if row[1] is None else int(row[1]),
            row[2],
            str(row[3]),
            float(row[4]),
            float(row[5]),
            float(row[6]),
        )

    async def touch_session(self, digest: bytes, now: float) -> None:
        await self._status("UPDATE admin_sessions SET last_seen_at = $2 WHERE digest = $1", digest, now)

    async def rotate_session(self, old: bytes, new: bytes, now: float, old_ends: float) -> bool:
        copied = await self._status(
            "WITH old AS (SELECT * FROM admin_sessions WHERE digest = $1 AND expires_at > $4 FOR UPDATE), "
            "ended AS (UPDATE admin_sessions s SET expires_at = $4 FROM old WHERE s.digest = old.digest) "
            "INSERT INTO admin_sessions SELECT $2, person_id, account_id, role, csrf, $3, $3, expires_at FROM old",
            old,
            new,
            now,
            old_ends,
        )
        return copied == 1

    async def delete_session(self, digest: bytes) -> None:
        await self._status("DELETE FROM admin_sessions WHERE digest = $1", digest)

    async def prune_sessions(self, idle_before: float, now: float) -> int:
        return await self._status(
            "DELETE FROM admin_sessions WHERE last_seen_at < $1 OR expires_at <= $2", idle_before, now
        )

    async def count_sessions(self, idle_before: float, now: float) -> int:
        row = await self._one(
            "SELECT COUNT(*) FROM admin_sessions WHERE last_seen_at >= $1 AND expires_at > $2",
            idle_before,
            now,
        )
        return int(row[0])

    # members ------------------------------------------------------------------------------
    async def _members(self, condition: str, *args: Any) -> list[Member]:
        async with self._conn() as conn:
            return await _members_on(conn, condition, *args)

    async def memberships(self, person_id: str) -> list[Member]:
        return await self._members("m.person_id = $1", person_id)

    async def members(self, account_id: int) -> list[Member]:
        return await self._members("m.account_id = $1", account_id)

    async def member(self, account_id: int, person_id: str) -> Member | None:
        found = await self._members("m.account_id = $1 AND m.person_id = $2", account_id, person_id)
        return found[0] if found else None

    async def put_member(
        self,
        account_id: int,
        person_id: str,
        role: Role,
        now: float,
        *,
        audit: AuditDraft[Member] | None = None,
    ) -> Member:
        async with self._tx() as conn:
            await conn.execute(_PUT_MEMBER, account_id, person_id, role, now)
            member = (await _members_on(conn, _ONE_MEMBER, account_id, person_id))[0]
            if audit is not None:
                await postgres_audit.append(conn, audit.entry(member))
        return member

    async def remove_member(
        self, account_id: int, person_id: str, *, audit: AuditDraft[Member] | None = None
    ) -> bool:
        async with self._tx() as conn:
            found = await _members_on(conn, _ONE_MEMBER, account_id, person_id)
            status = await conn.execute(
                "DELETE FROM account_members WHERE account_id = $1 AND person_id = $2", account_id, person_id
            )
            removed = int(str(status).rsplit(" ", 1)[-1]) == 1
            if removed and found and audit is not None:
                await postgres_audit.append(conn, replace(audit.entry(found[0]), after=None))
        return removed

    # invitations --------------------------------------------------------------------------
    async def create_invite(
        self,
        invite_id: str,
        digest: bytes,
        account_id: int,
        role: Role,
        email: str,
        created_by: str,
        now: float,
        expires_at: float,
        *,
        audit: AuditDraft[Invite] | None = None,
    ) -> Invite:
        invite = Invite(invite_id, account_id, role, email, created_by, now, expires_at, None, None)
        async with self._tx() as conn:
            await conn.execute(
                "INSERT INTO account_invites (id, digest, account_id, role, email, created_by, created_at, "
                "expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                invite_id,
                digest,
                account_id,
                role,
                email,
                created_by,
                now,
                expires_at,
            )
            if audit is not None:
                await postgres_audit.append(conn, audit.entry(invite))
        return invite

    async def invites(self, account_id: int | None) -> list[Invite]:
        if account_id is None:
            found = await self._all(f"SELECT {_INVITE} FROM account_invites ORDER BY created_at, id")
        else:
            found = await self._all(
                f"SELECT {_INVITE} FROM account_invites WHERE account_id = $1 ORDER BY created_at, id",
                account_id,
            )
        return [_invite(r) for r in found]

    async def get_invite(self, invite_id: str) -> Invite | None:
        row = await self._one(f"SELECT {_INVITE} FROM account_invites WHERE id = $1", invite_id)
        return None if row is None else _invite(row)

    async def find_invite(self, digest: bytes) -> Invite | None:
        row = await self._one(f"SELECT {_INVITE} FROM account_invites WHERE digest = $1", digest)
        return None if row is None else _invite(row)

    async def use_invite(
        self, digest: bytes, person_id: str, now: float, *, audit: AuditDraft[Invite] | None = None
    ) -> Invite | None:
        async with self._tx() as conn:
            row = await conn.fetchrow(
                "UPDATE account_invites SET used_at = $3, used_by = $2 "
                f"WHERE digest = $1 AND used_at IS NULL AND expires_at > $3 RETURNING {_INVITE}",
                digest,
                person_id,
                now,
            )
            if row is None:
                return None
            invite = _invite(row)
            await conn.execute(_JOIN, invite.account_id, person_id, invite.role, now)
            if audit is not None:
                await postgres_audit.append(conn, audit.entry(invite))
            return invite

    async def delete_invite(self, invite_id: str, *, audit: AuditDraft[Invite] | None = None) -> bool:
        async with self._tx() as conn:
            row = await conn.fetchrow(f"SELECT {_INVITE} FROM account_invites WHERE id = $1", invite_id)
            status = await conn.execute("DELETE FROM account_invites WHERE id = $1", invite_id)
            removed = int(str(status).rsplit(" ", 1)[-1]) == 1
            if removed and row is not None and audit is not None:
                await postgres_audit.append(conn, replace(audit.entry(_invite(row)), after=None))
        return removed

    # key owners ---------------------------------------------------------------------------
    async def set_key_owner(self, key_id: str, person_id: str, account_id: int) -> None:
        await self._status(
            "INSERT INTO key_owners VALUES ($1, $2, $3) ON CONFLICT (key_id) DO NOTHING",
            key_id,
            person_id,
            account_id,
        )

    async def key_owner(self, key_id: str) -> str | None:
        row = await self._one("SELECT person_id FROM key_owners WHERE key_id = $1", key_id)
        return None if row is None else str(row[0])

    async def owned_keys(self, person_id: str, account_id: int) -> list[str]:
        found = await self._all(
            "SELECT key_id FROM key_owners WHERE person_id = $1 AND account_id = $2 ORDER BY key_id",
            person_id,
            account_id,
        )
        return [str(r[0]) for r in found]
