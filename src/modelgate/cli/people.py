"""``modelgate invites`` and ``modelgate members``: invite people to an account (for example its
first owner) and list who belongs to it, on the configured database (docs/people.md).

The invitation's one-time token is printed once; the person opens ``<gateway>/admin/api/sso/login
?invite=<token>`` and signs in with single sign-on.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

import typer

from modelgate.admin.members import invite_link, invite_view, issue_invite, member_view
from modelgate.cli.context import (
    ConfigOpt,
    DataDirOpt,
    JsonOpt,
    Options,
    Repositories,
    emit,
    emit_one,
    fail,
    with_repositories,
)
from modelgate.management import Management
from modelgate.storage.people import Invite, Member

invites_app = typer.Typer(
    help="Invitations to an account (single sign-on): create, list, revoke.", no_args_is_help=True
)
members_app = typer.Typer(help="People who are members of an account.", no_args_is_help=True)
INVITE_COLUMNS = ["id", "account_id", "role", "email", "state", "expires_at"]
MEMBER_COLUMNS = ["person_id", "name", "email", "role", "last_sign_in"]


@invites_app.command("create")
def invites_create(
    account: Annotated[str, typer.Option("--account", help="The account to invite to (name or id).")],
    role: Annotated[str, typer.Option("--role", help="owner or member.")] = "member",
    email: Annotated[str, typer.Option("--email", help="Who the link is for (shown in listings).")] = "",
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    json: JsonOpt = False,
) -> None:
    """Invite a person to an account; prints the one-time sign-in link's token once."""
    options = Options(config, data_dir, json)
    if role not in ("owner", "member"):
        fail("--role: owner or member")
    chosen: Literal["owner", "member"] = "owner" if role == "owner" else "member"
    ttl = options.settings().sso.invite_ttl_seconds

    async def work(m: Management, r: Repositories) -> tuple[Invite, str]:
        found = await m.account(account)
        return await issue_invite(
            r.people, m.digester, found.id, chosen, email.strip(), "cli", time.time(), ttl
        )

    invite, token = with_repositories(options, work)
    link = invite_link(token)
    emit_one(
        options,
        {**invite_view(invite, time.time()), "token": token, "link": link},
        f"invited a {chosen} to account {invite.account_id} ({invite.id}); shown once, hand this link over:\n"
        f"<gateway address>{link}",
    )


@invites_app.command("list")
def invites_list(
    account: Annotated[str | None, typer.Option("--account", help="Only this account's invitations.")] = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    json: JsonOpt = False,
) -> None:
    """List invitations (never their tokens): role, state (open, used, expired), expiry."""
    options = Options(config, data_dir, json)

    async def work(m: Management, r: Repositories) -> list[Invite]:
        account_id = (await m.account(account)).id if account else None
        return await r.people.invites(account_id)

    now = time.time()
    rows: list[dict[str, Any]] = [invite_view(i, now) for i in with_repositories(options, work)]
    emit(options, rows, INVITE_COLUMNS, "invitations")


@invites_app.command("revoke")
def invites_revoke(
    invite_id: str, config: ConfigOpt = None, data_dir: DataDirOpt = None, json: JsonOpt = False
) -> None:
    """Withdraw an invitation: its link stops working."""
    options = Options(config, data_dir, json)

    async def work(m: Management, r: Repositories) -> bool:
        return await r.people.delete_invite(invite_id)

    if not with_repositories(options, work):
        fail(f"invitation {invite_id} not found")
    emit_one(options, {"id": invite_id, "revoked": True}, f"withdrew invitation {invite_id}")


@members_app.command("list")
def members_list(
    account: Annotated[str, typer.Option("--account", help="The account (name or id).")],
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    json: JsonOpt = False,
) -> None:
    """The people who belong to an account, with their roles and last sign-in."""
    options = Options(config, data_dir, json)

    async def work(m: Management, r: Repositories) -> list[Member]:
        return await r.people.members((await m.account(account)).id)

    rows = [member_view(m) for m in with_repositories(options, work)]
    emit(options, rows, MEMBER_COLUMNS, "members", whole=("person_id",))
