"""People, sessions, sign-ins, members and invitations on SQLite (``storage.people``)."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from typing import Any

from modelgate.storage import sqlite_audit
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
from modelgate.storage.sqlite_database import SqliteRepository

_PERSON = "p.id, p.issuer, p.subject, p.email, p.name, p.created_at, p.last_login_at"
#: An invitation makes its person a member with its role, but never demotes an owner.
_JOIN = (
    "INSERT INTO account_members VALUES (?, ?, ?, ?) ON CONFLICT (account_id, person_id) DO UPDATE SET "
    "role = CASE WHEN account_members.role = 'owner' THEN 'owner' ELSE excluded.role END"
)
_INVITE = "id, account_id, role, email, created_by, created_at, expires_at, used_at, used_by"


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


def _member(row: Any) -> Member:
    return Member(int(row[0]), _person(row, 4), row[1], float(row[2]))


class SqlitePeople(SqliteRepository):
    def _one(self, sql: str, *args: Any) -> Any:
        return self._db().execute(sql, args).fetchone()

    def _all(self, sql: str, *args: Any) -> list[Any]:
        return self._db().execute(sql, args).fetchall()

    # people -------------------------------------------------------------------------------
    async def upsert_person(
        self, new_id: str, issuer: str, subject: str, email: str, name: str, now: float
    ) -> Person:
        def op() -> Person:
            with self._write() as db:
                db.execute(
                    "INSERT INTO people (id, issuer, subject, email, name, created_at, last_login_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (issuer, subject) DO UPDATE SET "
                    "email = excluded.email, name = excluded.name, last_login_at = excluded.last_login_at",
                    (new_id, issuer, subject, email, name, now, now),
                )
                row = db.execute(
                    f"SELECT {_PERSON} FROM people p WHERE issuer = ? AND subject = ?", (issuer, subject)
                ).fetchone()
                return _person(row)

        return await self._run(op)

    async def get_person(self, person_id: str) -> Person | None:
        row = await self._run(self._one, f"SELECT {_PERSON} FROM people p WHERE id = ?", person_id)
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
        def op() -> None:
            with self._write() as db:
                db.execute(
                    "INSERT INTO sso_logins VALUES (?, ?, ?, ?, ?, ?)",
                    (state_digest, browser_digest, verifier, nonce, invite_digest, now),
                )

        await self._run(op)

    async def take_login(self, state_digest: bytes) -> PendingLogin | None:
        def op() -> PendingLogin | None:
            with self._write() as db:
                row = db.execute(
                    "DELETE FROM sso_logins WHERE state_digest = ? "
                    "RETURNING browser_digest, verifier, nonce, invite_digest, created_at",
                    (state_digest,),
                ).fetchone()
                return (
                    None
                    if row is None
                    else PendingLogin(
                        bytes(row[0]),
                        row[1],
                        row[2],
                        None if row[3] is None else bytes(row[3]),
                        float(row[4]),
                    )
                )

        return await self._run(op)

    async def prune_logins(self, before: float) -> int:
        def op() -> int:
            with self._write() as db:
                return db.execute("DELETE FROM sso_logins WHERE created_at < ?", (before,)).rowcount

        return await self._run(op)

    async def count_logins(self) -> int:
        row = await self._run(self._one, "SELECT COUNT(*) FROM sso_logins")
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
        def op() -> None:
            with self._write() as db:
                db.execute(
                    "INSERT INTO admin_sessions VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (digest, person_id, account_id, role, csrf, now, now, expires_at),
                )

        await self._run(op)

    async def find_session(self, digest: bytes) -> AdminSession | None:
        row = await self._run(
            self._one,
            "SELECT s.digest, s.account_id, s.role, s.csrf, s.created_at, s.last_seen_at, s.expires_at, "
            f"{_PERSON} FROM admin_sessions s JOIN people p ON p.id = s.person_id WHERE s.digest = ?",
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
        def op() -> None:
            with self._write() as db:
                db.execute("UPDATE admin_sessions SET last_seen_at = ? WHERE digest = ?", (now, digest))

        await self._run(op)

    async def rotate_session(self, old: bytes, new: bytes, now: float, old_ends: float) -> bool:
        def op() -> bool:
            with self._write() as db:
                copied = db.execute(
                    "INSERT INTO admin_sessions SELECT ?, person_id, account_id, role, csrf, ?, ?, expires_at "
                    "FROM admin_sessions WHERE digest = ? AND expires_at > ?",
                    (new, now, now, old, old_ends),
                ).rowcount
                if copied:
                    db.execute("UPDATE admin_sessions SET expires_at = ? WHERE digest = ?", (old_ends, old))
                return copied == 1

        return await self._run(op)

    async def delete_session(self, digest: bytes) -> None:
        def op() -> None:
            with self._write() as db:
                db.execute("DELETE FROM admin_sessions WHERE digest = ?", (digest,))

        await self._run(op)

    async def prune_sessions(self, idle_before: float, now: float) -> int:
        def op() -> int:
            with self._write() as db:
                return db.execute(
                    "DELETE FROM admin_sessions WHERE last_seen_at < ? OR expires_at <= ?", (idle_before, now)
                ).rowcount

        return await self._run(op)

    async def count_sessions(self, idle_before: float, now: float) -> int:
        row = await self._run(
            self._one,
            "SELECT COUNT(*) FROM admin_sessions WHERE last_seen_at >= ? AND expires_at > ?",
            idle_before,
            now,
        )
        return int(row[0])

    # members ------------------------------------------------------------------------------
    def _members(self, condition: str, *args: Any) -> list[Member]:
        found = self._all(
            f"SELECT m.account_id, m.role, m.created_at, NULL, {_PERSON} FROM account_members m "
            f"JOIN people p ON p.id = m.person_id WHERE {condition} ORDER BY m.account_id, m.created_at, p.id",
            *args,
        )
        return [_member(r) for r in found]

    async def memberships(self, person_id: str) -> list[Member]:
        return await self._run(self._members, "m.person_id = ?", person_id)

    async def members(self, account_id: int) -> list[Member]:
        return await self._run(self._members, "m.account_id = ?", account_id)

    async def member(self, account_id: int, person_id: str) -> Member | None:
        found = await self._run(self._members, "m.account_id = ? AND m.person_id = ?", account_id, person_id)
        return found[0] if found else None

    @staticmethod
    def _put_member(db: sqlite3.Connection, account_id: int, person_id: str, role: Role, now: float) -> None:
        db.execute(
            "INSERT INTO account_members VALUES (?, ?, ?, ?) "
            "ON CONFLICT (account_id, person_id) DO UPDATE SET role = excluded.role",
            (account_id, person_id, role, now),
        )

    async def put_member(
        self,
        account_id: int,
        person_id: str,
        role: Role,
        now: float,
        *,
        audit: AuditDraft[Member] | None = None,
    ) -> Member:
        def op() -> Member:
            with self._write() as db:
                self._put_member(db, account_id, person_id, role, now)
                member = self._members("m.account_id = ? AND m.person_id = ?", account_id, person_id)[0]
                if audit is not None:
                    sqlite_audit.append(db, audit.entry(member))
            return member

        return await self._run(op)

    async def remove_member(
        self, account_id: int, person_id: str, *, audit: AuditDraft[Member] | None = None
    ) -> bool:
        def op() -> bool:
            with self._write() as db:
                found = self._members("m.account_id = ? AND m.person_id = ?", account_id, person_id)
                sql = "DELETE FROM account_members WHERE account_id = ? AND person_id = ?"
                removed = db.execute(sql, (account_id, person_id)).rowcount == 1
                if removed and found and audit is not None:
                    sqlite_audit.append(db, replace(audit.entry(found[0]), after=None))
                return removed

        return await self._run(op)

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

        def op() -> None:
            with self._write() as db:
                db.execute(
                    "INSERT INTO account_invites (id, digest, account_id, role, email, created_by, "
                    "created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (invite_id, digest, account_id, role, email, created_by, now, expires_at),
                )
                if audit is not None:
                    sqlite_audit.append(db, audit.entry(invite))

        await self._run(op)
        return invite

    async def invites(self, account_id: int | None) -> list[Invite]:
        if account_id is None:
            found = await self._run(
                self._all, f"SELECT {_INVITE} FROM account_invites ORDER BY created_at, id"
            )
        else:
            found = await self._run(
                self._all,
                f"SELECT {_INVITE} FROM account_invites WHERE account_id = ? ORDER BY created_at, id",
                account_id,
            )
        return [_invite(r) for r in found]

    async def get_invite(self, invite_id: str) -> Invite | None:
        row = await self._run(self._one, f"SELECT {_INVITE} FROM account_invites WHERE id = ?", invite_id)
        return None if row is None else _invite(row)

    async def find_invite(self, digest: bytes) -> Invite | None:
        row = await self._run(self._one, f"SELECT {_INVITE} FROM account_invites WHERE digest = ?", digest)
        return None if row is None else _invite(row)

    async def use_invite(
        self, digest: bytes, person_id: str, now: float, *, audit: AuditDraft[Invite] | None = None
    ) -> Invite | None:
        def op() -> Invite | None:
            with self._write() as db:
                row = db.execute(
                    "UPDATE account_invites SET used_at = ?, used_by = ? "
                    "WHERE digest = ? AND used_at IS NULL AND expires_at > ? "
                    f"RETURNING {_INVITE}",
                    (now, person_id, digest, now),
                ).fetchone()
                if row is None:
                    return None
                invite = _invite(row)
                db.execute(_JOIN, (invite.account_id, person_id, invite.role, now))
                if audit is not None:
                    sqlite_audit.append(db, audit.entry(invite))
                return invite

        return await self._run(op)

    async def delete_invite(self, invite_id: str, *, audit: AuditDraft[Invite] | None = None) -> bool:
        def op() -> bool:
            with self._write() as db:
                row = db.execute(
                    f"SELECT {_INVITE} FROM account_invites WHERE id = ?", (invite_id,)
                ).fetchone()
                removed = db.execute("DELETE FROM account_invites WHERE id = ?", (invite_id,)).rowcount == 1
                if removed and row is not None and audit is not None:
                    sqlite_audit.append(db, replace(audit.entry(_invite(row)), after=None))
                return removed

        return await self._run(op)

    # key owners ---------------------------------------------------------------------------
    async def set_key_owner(self, key_id: str, person_id: str, account_id: int) -> None:
        def op() -> None:
            with self._write() as db:
                db.execute(
                    "INSERT INTO key_owners VALUES (?, ?, ?) ON CONFLICT (key_id) DO NOTHING",
                    (key_id, person_id, account_id),
                )

        await self._run(op)

    async def key_owner(self, key_id: str) -> str | None:
        row = await self._run(self._one, "SELECT person_id FROM key_owners WHERE key_id = ?", key_id)
        return None if row is None else str(row[0])

    async def owned_keys(self, person_id: str, account_id: int) -> list[str]:
        found = await self._run(
            self._all,
            "SELECT key_id FROM key_owners WHERE person_id = ? AND account_id = ? ORDER BY key_id",
            person_id,
            account_id,
        )
        return [str(r[0]) for r in found]
