"""``modelgate tokens``: issue, list and revoke admin tokens on the configured database.

Running servers read a token's row on every admin request, so a revocation made here is refused
by all of them from the next request on.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from modelgate.cli.context import (
    ConfigOpt,
    DataDirOpt,
    JsonOpt,
    Options,
    emit,
    emit_one,
    fail,
    when,
    with_management,
)
from modelgate.management import IssuedToken, Management, ManagementError, parse_lifetime
from modelgate.storage.base import Account, AdminToken

tokens_app = typer.Typer(
    help="Admin tokens for the admin API and the dashboard: create, list, revoke.", no_args_is_help=True
)
TOKEN_COLUMNS = ["id", "owner", "token", "state", "last_used", "expires"]
TOKEN_WIDE_COLUMNS = ("name", "created", "revoked")


def token_row(token: AdminToken, now: float) -> dict[str, Any]:
    state = "active"
    if token.revoked_at is not None:
        state = "revoked"
    elif token.expires_at is not None and now >= token.expires_at:
        state = "expired"
    return {
        "id": token.id,
        "name": token.name,
        "scope": "operator" if token.account_id is None else "account",
        "account_id": token.account_id,
        "owner": "operator" if token.account_id is None else f"account {token.account_id}",
        "token": f"{token.prefix}…{token.last4}" if token.prefix else "(not kept)",
        "state": state,
        "created": when(token.created_at),
        "created_by": token.created_by,
        "last_used": when(token.last_used_at),
        "expires": when(token.expires_at),
        "revoked": when(token.revoked_at),
    }


@tokens_app.command("create")
def tokens_create(
    account: Annotated[
        str | None, typer.Option("--account", help="An account-scoped token for this account (name or id).")
    ] = None,
    name: Annotated[str, typer.Option("--name", help="A label shown in token listings.")] = "",
    expires: Annotated[
        str | None,
        typer.Option("--expires", help="Refuse the token after a duration (90d, 12h, 30m) or on a UTC date."),
    ] = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    json: JsonOpt = False,
) -> None:
    """Issue an admin token: an operator token, or with --account one that sees only that account.

    The token is printed once. Use it as ``Authorization: Bearer`` on /admin/api or in the dashboard.
    """
    options = Options(config, data_dir, json)
    try:
        lifetime = None if expires is None else parse_lifetime(expires, time.time())
    except ManagementError as exc:
        fail(str(exc))

    async def work(m: Management) -> tuple[IssuedToken, Account | None]:
        owner = await m.account(account) if account else None
        return await m.issue_admin_token(owner, name=name, expires_in=lifetime), owner

    issued, owner = with_management(options, work)
    scope = f"account {owner.name}" if owner else "operator"
    until = f", valid until {when(issued.record.expires_at)}" if issued.record.expires_at else ""
    emit_one(
        options,
        {**token_row(issued.record, time.time()), "token": issued.secret},
        f"created {scope} admin token {issued.record.id}{until}; shown once, store it now:\n{issued.secret}",
    )


@tokens_app.command("list")
def tokens_list(
    account: Annotated[str | None, typer.Option("--account", help="Only this account's tokens.")] = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    json: JsonOpt = False,
) -> None:
    """List admin tokens (never their secrets): scope, state, last use (to the minute), expiry."""
    options = Options(config, data_dir, json)

    async def work(m: Management) -> list[AdminToken]:
        account_id = (await m.account(account)).id if account else None
        return await m.tokens.list_admin_tokens(account_id)

    now = time.time()
    rows = [token_row(t, now) for t in with_management(options, work)]
    emit(options, rows, TOKEN_COLUMNS, "admin tokens", whole=("id", "token"), wide=TOKEN_WIDE_COLUMNS)


@tokens_app.command("revoke")
def tokens_revoke(
    token_id: str, config: ConfigOpt = None, data_dir: DataDirOpt = None, json: JsonOpt = False
) -> None:
    """Revoke an admin token: running servers refuse it from its next request."""
    options = Options(config, data_dir, json)

    async def work(m: Management) -> AdminToken:
        return await m.revoke_admin_token(await m.admin_token(token_id))

    record = with_management(options, work)
    emit_one(options, token_row(record, time.time()), f"revoked admin token {record.id}")
