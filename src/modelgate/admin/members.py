"""Members of an account and invitations (docs/people.md).

An account's owners (people with the owner role, account tokens, operators) invite people with a
one-time link (``POST /invites``: the token is shown once, stored as its HMAC digest, and expires
after ``sso.invite_ttl_seconds``), change roles and remove members. The invited person opens the
link, signs in with single sign-on, and becomes a member of the account with the invitation's role.
Members (the member role) manage only the keys they created (``admin.context``); they may list the
account's members but change nothing about them.

Visibility rule as everywhere (``admin.auth``): another account's member or invitation ids answer
exactly like missing ones. An account always keeps an owner: demoting or removing its last owner
person is refused (409) unless an operator does it.
"""

from __future__ import annotations

import secrets
from typing import Any, Literal

from pydantic import Field
from starlette.requests import Request
from starlette.responses import Response

from modelgate.admin import schemas
from modelgate.admin.auth import Principal
from modelgate.admin.context import AdminContext
from modelgate.admin.http import (
    bad_request,
    conflict,
    json_response,
    not_found,
    parse_body,
    path_int,
    query_int,
)
from modelgate.admin.sessions import Sessions, kind_digest
from modelgate.admin.sso import INVITE_PREFIX, LOGIN_PATH
from modelgate.audit.actor import draft
from modelgate.keys import Digester, random_base62
from modelgate.storage.audit import AuditDraft, Subject
from modelgate.storage.people import Invite, Member, PeopleStore, Role


class MemberUpdate(schemas.Body):
    role: Literal["owner", "member"]


class InviteCreate(schemas.Body):
    #: The account to invite to (default: the caller's).
    account_id: schemas.AccountId | None = None
    role: Literal["owner", "member"] = "member"
    #: Who the link is meant for (shown in the list; the link works for whoever opens it first).
    email: str = Field("", max_length=320)


MEMBER_REQUEST_MODELS = (MemberUpdate, InviteCreate)


def member_view(member: Member) -> dict[str, Any]:
    person = member.person
    return {
        "account_id": member.account_id,
        "person_id": person.id,
        "email": person.email,
        "name": person.name,
        "role": member.role,
        "since": schemas.when(member.created_at),
        "last_sign_in": schemas.when(person.last_login_at),
    }


def _role_of(member: Member) -> Subject:
    """A member in the log (``member.update``): their role in the account."""
    return Subject(f"person:{member.person.id}", member.account_id, {"role": member.role})


def _standing_of(member: Member) -> Subject:
    """A removed member in the log (``member.remove``): their role and email."""
    return Subject(
        f"person:{member.person.id}", member.account_id, {"role": member.role, "email": member.person.email}
    )


def _invited(invite: Invite) -> Subject:
    """An invitation in the log: its role, email and expiry (never its token)."""
    return Subject(
        f"invite:{invite.id}",
        invite.account_id,
        {"role": invite.role, "email": invite.email, "expires_at": schemas.when(invite.expires_at)},
    )


def invite_view(invite: Invite, now: float) -> dict[str, Any]:
    if invite.used_at is not None:
        state = "used"
    elif invite.expires_at <= now:
        state = "expired"
    else:
        state = "open"
    return {
        "id": invite.id,
        "account_id": invite.account_id,
        "role": invite.role,
        "email": invite.email,
        "state": state,
        "created_by": invite.created_by,
        "created_at": schemas.when(invite.created_at),
        "expires_at": schemas.when(invite.expires_at),
        "used_at": None if invite.used_at is None else schemas.when(invite.used_at),
        "used_by": invite.used_by,
    }


def invite_link(token: str) -> str:
    """The sign-in link that accepts an invitation (relative to the gateway's address)."""
    return f"{LOGIN_PATH}/login?invite={token}"


async def issue_invite(
    people: PeopleStore,
    digester: Digester,
    account_id: int,
    role: Role,
    email: str,
    created_by: str,
    now: float,
    ttl: float,
    audit: AuditDraft[Invite] | None = None,
) -> tuple[Invite, str]:
    """A new invitation and its one-time token (only the token's digest is stored); ``audit``
    is written with it (the entry never holds the token)."""
    token = INVITE_PREFIX + secrets.token_urlsafe(32)
    invite = await people.create_invite(
        "inv_" + random_base62(16),
        kind_digest(digester, "invite", token),
        account_id,
        role,
        email,
        created_by,
        now,
        now + ttl,
        audit=audit,
    )
    return invite, token


class MemberEndpoints:
    def __init__(self, context: AdminContext, sessions: Sessions) -> None:
        self.context = context
        self.sessions = sessions
        self.people = context.services.people

    async def _member(self, principal: Principal, request: Request) -> Member:
        account = await self.context.account(principal, path_int(request, "account_id", "account"))
        person_id = str(request.path_params["person_id"])
        member = await self.people.member(account.id, person_id)
        if member is None:
            raise not_found("member", person_id[:40])
        return member

    async def _keep_an_owner(self, principal: Principal, member: Member, new_role: Role | None) -> None:
        if principal.is_operator or member.role != "owner" or new_role == "owner":
            return
        owners = [m for m in await self.people.members(member.account_id) if m.role == "owner"]
        if len(owners) <= 1:
            raise conflict("an account keeps at least one owner: make another member owner first")

    async def list(self, request: Request, principal: Principal) -> Response:
        account = await self.context.account(principal, path_int(request, "account_id", "account"))
        members = await self.people.members(account.id)
        return json_response({"data": [member_view(m) for m in members]})

    async def update(self, request: Request, principal: Principal) -> Response:
        member = await self._member(principal, request)
        principal.require_owner()
        body = await parse_body(request, MemberUpdate)
        await self._keep_an_owner(principal, member, body.role)
        now = self.context.now()
        updated = await self.people.put_member(
            member.account_id, member.person.id, body.role, now,
            audit=draft("member.update", _role_of, now, before=member),
        )  # fmt: skip
        return json_response(member_view(updated))

    async def remove(self, request: Request, principal: Principal) -> Response:
        member = await self._member(principal, request)
        principal.require_owner()
        await self._keep_an_owner(principal, member, None)
        await self.people.remove_member(
            member.account_id, member.person.id,
            audit=draft("member.remove", _standing_of, self.context.now(), before=member),
        )  # fmt: skip
        return json_response({**member_view(member), "removed": True})

    # invitations --------------------------------------------------------------------------

    async def invites_list(self, request: Request, principal: Principal) -> Response:
        account_id = query_int(request, "account_id")
        if account_id is None:
            account_id = principal.account_id
        if account_id is not None:
            account_id = (await self.context.account(principal, account_id)).id
        principal.require_owner()
        now = self.context.now()
        return json_response({"data": [invite_view(i, now) for i in await self.people.invites(account_id)]})

    async def invite_create(self, request: Request, principal: Principal) -> Response:
        body = await parse_body(request, InviteCreate)
        account_id = body.account_id if body.account_id is not None else principal.account_id
        if account_id is None:
            raise bad_request("account_id: required with an operator token")
        account = await self.context.account(principal, account_id)
        principal.require_owner()
        now = self.context.now()
        invite, token = await issue_invite(
            self.people,
            self.sessions.digester,
            account.id,
            body.role,
            body.email.strip(),
            principal.actor,
            now,
            self.context.settings.sso.invite_ttl_seconds,
            draft("member.invite", _invited, now),
        )
        return json_response({**invite_view(invite, now), "token": token, "link": invite_link(token)}, 201)

    async def invite_revoke(self, request: Request, principal: Principal) -> Response:
        invite_id = str(request.path_params["invite_id"])
        invite = await self.people.get_invite(invite_id)
        if invite is None or (principal.account_id is not None and invite.account_id != principal.account_id):
            raise not_found("invite", invite_id[:40])
        principal.require_owner()
        now = self.context.now()
        await self.people.delete_invite(
            invite.id, audit=draft("member.invite_revoke", _invited, now, before=invite)
        )
        return json_response({**invite_view(invite, self.context.now()), "revoked": True})
