"""People, their dashboard sessions, sign-ins under way, account members and invitations.

The protocol both engines implement (``storage.sqlite_people``, ``storage.postgres_people``) and
the records it speaks in. Secrets (session cookies, sign-in states, invitation tokens) are only
ever handed to it as HMAC digests (``keys.Digester``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from modelgate.storage.audit import AuditDraft

Role = Literal["owner", "member"]
ROLES: tuple[Role, ...] = ("owner", "member")
#: What a session may do: ``operator`` (everything) or a role in one account.
SessionRole = Literal["operator", "owner", "member"]


@dataclass(frozen=True, slots=True)
class Person:
    id: str
    issuer: str
    subject: str
    email: str
    name: str
    created_at: float
    last_login_at: float


@dataclass(frozen=True, slots=True)
class PendingLogin:
    browser_digest: bytes
    verifier: str
    nonce: str
    #: The digest of the invitation this sign-in accepts, if it carries one.
    invite_digest: bytes | None
    created_at: float


@dataclass(frozen=True, slots=True)
class AdminSession:
    digest: bytes
    person: Person
    #: None for an operator session.
    account_id: int | None
    role: SessionRole
    csrf: str
    created_at: float
    last_seen_at: float
    #: The absolute end: no use extends it.
    expires_at: float


@dataclass(frozen=True, slots=True)
class Member:
    account_id: int
    person: Person
    role: Role
    created_at: float


@dataclass(frozen=True, slots=True)
class Invite:
    id: str
    account_id: int
    role: Role
    email: str
    created_by: str
    created_at: float
    expires_at: float
    used_at: float | None
    used_by: str | None


class PeopleStore(Protocol):
    # people -------------------------------------------------------------------------------
    async def upsert_person(
        self, new_id: str, issuer: str, subject: str, email: str, name: str, now: float
    ) -> Person:
        """The person with this (issuer, subject), created with ``new_id`` when new; email and
        name are refreshed from the latest sign-in."""
        ...

    async def get_person(self, person_id: str) -> Person | None: ...

    # sign-ins under way -------------------------------------------------------------------
    async def save_login(
        self,
        state_digest: bytes,
        browser_digest: bytes,
        verifier: str,
        nonce: str,
        invite_digest: bytes | None,
        now: float,
    ) -> None: ...

    async def take_login(self, state_digest: bytes) -> PendingLogin | None:
        """The sign-in started with this state, removed: a second take finds nothing."""
        ...

    async def prune_logins(self, before: float) -> int: ...

    async def count_logins(self) -> int: ...

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
    ) -> None: ...

    async def find_session(self, digest: bytes) -> AdminSession | None: ...

    async def touch_session(self, digest: bytes, now: float) -> None: ...

    async def rotate_session(self, old: bytes, new: bytes, now: float, old_ends: float) -> bool:
        """A new id for a session: a copy under ``new`` (same person, role, CSRF token and absolute
        end), while ``old`` ends at ``old_ends``. False (nothing done) when ``old`` is gone or
        already ends by then (it was rotated)."""
        ...

    async def delete_session(self, digest: bytes) -> None: ...

    async def prune_sessions(self, idle_before: float, now: float) -> int:
        """Delete sessions idle since before ``idle_before`` or past their absolute end."""
        ...

    async def count_sessions(self, idle_before: float, now: float) -> int:
        """Sessions alive: used since ``idle_before`` and not past their absolute end."""
        ...

    # members ------------------------------------------------------------------------------
    async def memberships(self, person_id: str) -> list[Member]: ...

    async def members(self, account_id: int) -> list[Member]: ...

    async def member(self, account_id: int, person_id: str) -> Member | None: ...

    async def put_member(
        self,
        account_id: int,
        person_id: str,
        role: Role,
        now: float,
        *,
        audit: AuditDraft[Member] | None = None,
    ) -> Member:
        """Add the person to the account with ``role``, or change the role they have there; the
        ``audit`` entry (on the member as written) in the same transaction."""
        ...

    async def remove_member(
        self, account_id: int, person_id: str, *, audit: AuditDraft[Member] | None = None
    ) -> bool:
        """Take the person out of the account; when they were in it, the ``audit`` entry (on the
        member as they were, with no ``after``) in the same transaction."""
        ...

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
    ) -> Invite: ...

    async def invites(self, account_id: int | None) -> list[Invite]: ...

    async def get_invite(self, invite_id: str) -> Invite | None: ...

    async def find_invite(self, digest: bytes) -> Invite | None: ...

    async def use_invite(
        self, digest: bytes, person_id: str, now: float, *, audit: AuditDraft[Invite] | None = None
    ) -> Invite | None:
        """Mark the unused, unexpired invitation with this digest as used by ``person_id`` and
        make them a member with its role, at once, with the ``audit`` entry (``member.join``, on
        the invitation as used) in the same transaction; None when there is no such invitation."""
        ...

    async def delete_invite(self, invite_id: str, *, audit: AuditDraft[Invite] | None = None) -> bool:
        """Delete the invitation; when there was one, the ``audit`` entry (on the invitation as it
        was, with no ``after``) in the same transaction."""
        ...

    # key owners ---------------------------------------------------------------------------
    async def set_key_owner(self, key_id: str, person_id: str, account_id: int) -> None: ...

    async def key_owner(self, key_id: str) -> str | None: ...

    async def owned_keys(self, person_id: str, account_id: int) -> list[str]: ...
