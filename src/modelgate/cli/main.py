"""The ``modelgate`` command: serve the gateway and manage accounts, credits and keys.

Management commands work on the configured database directly, so they can be used while the
server runs; a running server sees key changes within its refresh interval (0.25 s default).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from modelgate.cli import account_limits
from modelgate.cli.context import (
    ConfigOpt,
    DataDirOpt,
    JsonOpt,
    Options,
    Repositories,
    emit,
    emit_one,
    fail,
    when,
    with_management,
    with_repositories,
)
from modelgate.cli.people import invites_app, members_app
from modelgate.cli.serve import serve_command
from modelgate.cli.spend_caps import CapOpt, caps_row, parse_caps
from modelgate.cli.tokens import tokens_app
from modelgate.cli.usage_rollups import rebuild_rollups_command
from modelgate.clock import month_of
from modelgate.management import Management, ManagementError, format_credits, parse_credits, parse_expiry
from modelgate.storage.base import Account, KeyRecord
from modelgate.storage.spend_windows import KEY_WINDOWS, WINDOWS, Window

app = typer.Typer(
    help="modelgate: a self-hosted LLM API gateway.", no_args_is_help=True, add_completion=False
)
accounts_app = typer.Typer(help="Accounts and their shared credit balance.", no_args_is_help=True)
credits_app = typer.Typer(help="Top up an account's balance.", no_args_is_help=True)
keys_app = typer.Typer(help="API keys: create, list, update, rotate, revoke.", no_args_is_help=True)
app.add_typer(accounts_app, name="accounts")
app.add_typer(credits_app, name="credits")
app.add_typer(keys_app, name="keys")
app.add_typer(tokens_app, name="tokens")
app.add_typer(invites_app, name="invites")
app.add_typer(members_app, name="members")
app.command("serve")(serve_command)


def account_row(account: Account) -> dict[str, Any]:
    return {
        "id": account.id,
        "name": account.name,
        "balance": format_credits(account.balance_uc),
        "balance_uc": account.balance_uc,
        "reserved_uc": account.reserved_uc,
        "created": when(account.created_at),
        "hide_balance": account.hide_balance,
        **caps_row(account.window_caps),
        "rpm": account.rpm if account.rpm is not None else "none",
        "tpm": account.tpm if account.tpm is not None else "none",
        "concurrency": account.max_concurrency if account.max_concurrency is not None else "none",
    }


def key_row(key: KeyRecord) -> dict[str, Any]:
    return {
        "id": key.id,
        "account_id": key.account_id,
        "name": key.name,
        "group": key.group,
        "key": f"{key.prefix}…{key.last4}",
        "state": key.state,
        "rpm": key.rpm,
        "models": ",".join(key.allowed_models) if key.allowed_models else "(all of group)",
        "monthly_cap": format_credits(key.monthly_cap_uc) if key.monthly_cap_uc is not None else "none",
        "monthly_cap_uc": key.monthly_cap_uc,
        "created": when(key.created_at),
        "rotated": when(key.rotated_at),
        "revoked": when(key.revoked_at),
        "previous_secret_valid_until": when(key.previous_expires_at),
        "tpm": key.tpm if key.tpm is not None else "none",
        "concurrency": key.max_concurrency if key.max_concurrency is not None else "none",
        "expires": when(key.expires_at),
        "allowed_ips": ",".join(key.allowed_ips) if key.allowed_ips else "(anywhere)",
        **caps_row(key.window_caps[:3]),
    }


KEY_COLUMNS = ["id", "name", "group", "key", "state", "rpm", "monthly_cap"]
KEY_WIDE_COLUMNS: tuple[str, ...] = (
    "models",
    "tpm",
    "concurrency",
    "created",
    "revoked",
    "expires",
    "allowed_ips",
)
KEY_WIDE_COLUMNS += ("cap_5h", "cap_day", "cap_week")


@accounts_app.command("create")
def accounts_create(
    name: str,
    credits: Annotated[str, typer.Option("--credits", help="Opening balance in credits.")] = "0",
    cap_by_window: CapOpt = None,
    monthly_cap: AccountMonthlyCapOpt = None,
    rpm: account_limits.AccountRpmOpt = None,
    tpm: account_limits.AccountTpmOpt = None,
    concurrency: account_limits.AccountConcurrencyOpt = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    json: JsonOpt = False,
) -> None:
    """Create an account with an optional opening balance, spend caps and rate limits (all its
    keys together)."""
    options = Options(config, data_dir, json)
    amount = _credits(credits, "credits")
    caps = _account_caps(cap_by_window, monthly_cap, clearable=False)
    for flag, value in (("--rpm", rpm), ("--tpm", tpm), ("--concurrency", concurrency)):
        account_limits.parse(value, flag)  # a bad flag fails before anything is created

    async def work(m: Management) -> Account:
        account = await m.create_account(name, amount)
        if caps:
            account = await m.set_account_caps(account, caps)
        return await account_limits.apply(m, account, rpm, tpm, concurrency)

    account = with_management(options, work)
    emit_one(
        options,
        account_row(account),
        f"created account {account.name} (id {account.id}) with {format_credits(account.balance_uc)} credits",
    )


@accounts_app.command("forget-responses")
def accounts_forget_responses(
    name: str, config: ConfigOpt = None, data_dir: DataDirOpt = None, json: JsonOpt = False
) -> None:
    """Delete every stored response and conversation of an account (its keys, balance and usage
    records stay)."""
    options = Options(config, data_dir, json)

    async def work(m: Management, r: Repositories) -> tuple[Account, int]:
        account = await m.account(name)
        return account, await r.responses.forget_account_state(account.id)

    account, deleted = with_repositories(options, work)
    emit_one(
        options,
        {"account": account.name, "deleted": deleted},
        f"deleted {deleted} stored responses and conversations of account {account.name}",
    )


@accounts_app.command("update")
def accounts_update(
    name: str,
    hide_balance: Annotated[
        bool | None,
        typer.Option(
            "--hide-balance/--show-balance",
            help="Hide the balance from the account's key holders (GET /v1/key), or show it.",
        ),
    ] = None,
    rename: Annotated[str | None, typer.Option("--name", help="A new name.")] = None,
    cap_by_window: CapOpt = None,
    monthly_cap: AccountMonthlyCapOpt = None,
    rpm: account_limits.AccountRpmOpt = None,
    tpm: account_limits.AccountTpmOpt = None,
    concurrency: account_limits.AccountConcurrencyOpt = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    json: JsonOpt = False,
) -> None:
    """Change an account (NAME or id): its name, whether key holders see its balance, its spend
    caps and rate limits (all its keys together)."""
    options = Options(config, data_dir, json)
    caps = _account_caps(cap_by_window, monthly_cap, clearable=True)
    limits_given = account_limits.given(rpm, tpm, concurrency)
    if hide_balance is None and rename is None and not caps and not limits_given:
        fail(
            "give --name, --hide-balance, --show-balance, --cap, --monthly-cap, --rpm, --tpm or --concurrency"
        )
    for flag, value in (("--rpm", rpm), ("--tpm", tpm), ("--concurrency", concurrency)):
        account_limits.parse(value, flag)

    async def work(m: Management) -> Account:
        account = await m.account(name)
        if rename is not None:
            account = await m.rename_account(account, rename)
        if hide_balance is not None:
            account = await m.set_hide_balance(account, hide_balance)
        if caps:
            account = await m.set_account_caps(account, caps)
        return await account_limits.apply(m, account, rpm, tpm, concurrency)

    account = with_management(options, work)
    shown = "hidden from" if account.hide_balance else "shown to"
    limits = f"; {account_limits.shown(account)}" if limits_given else ""
    emit_one(
        options, account_row(account), f"updated account {account.name}; balance {shown} key holders{limits}"
    )


@accounts_app.command("list")
def accounts_list(config: ConfigOpt = None, data_dir: DataDirOpt = None, json: JsonOpt = False) -> None:
    """List accounts and balances."""
    options = Options(config, data_dir, json)

    async def work(m: Management) -> list[Account]:
        return await m.accounts.list_accounts()

    rows = [account_row(a) for a in with_management(options, work)]
    emit(options, rows, ["id", "name", "balance", "reserved_uc", "created"], "accounts")


@credits_app.command("add")
def credits_add(
    account: str,
    amount: str,
    note: Annotated[str, typer.Option("--note", help="Free text kept with the top-up.")] = "",
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    json: JsonOpt = False,
) -> None:
    """Add AMOUNT credits to ACCOUNT (name or id)."""
    options = Options(config, data_dir, json)
    micro = _credits(amount, "amount")

    async def work(m: Management) -> Account:
        return await m.add_credits(await m.account(account), micro, note)

    updated = with_management(options, work)
    emit_one(
        options, account_row(updated), f"{updated.name}: balance {format_credits(updated.balance_uc)} credits"
    )


def _credits(value: str, field: str) -> int:
    try:
        return parse_credits(value, field)
    except ValueError as exc:
        fail(str(exc))


AccountMonthlyCapOpt = Annotated[
    str | None,
    typer.Option(
        "--monthly-cap", help="Credits per UTC month for all the account's keys together; 'none' clears."
    ),
]


def _account_caps(cap: list[str] | None, monthly_cap: str | None, *, clearable: bool) -> dict[Window, int]:
    """An account's ``--cap`` values and ``--monthly-cap`` by window (µc; ``-1``: remove)."""
    caps = parse_caps(cap, WINDOWS, clearable=clearable)
    if monthly_cap is not None:
        if "month" in caps:
            fail("give the month as --monthly-cap or --cap month=..., not both")
        caps.update(parse_caps([f"month={monthly_cap}"], WINDOWS, clearable=clearable))
    return caps


def _limit(value: str | None, flag: str, *, clearable: bool) -> int | None:
    """A ``--tpm`` or ``--concurrency`` value: a whole number from 1 up, or (``clearable``)
    ``none`` to remove the limit (-1); ``management`` checks the upper bound."""
    if value is None:
        return None
    if clearable and value.strip().lower() == "none":
        return -1
    text = value.strip()
    if not text.isdigit() or int(text) < 1:
        fail(f"{flag}: must be a whole number from 1 up" + (" or 'none'" if clearable else ""))
    return int(text)


TpmOpt = Annotated[
    str | None, typer.Option("--tpm", help="Input + output tokens per rolling minute ('none': no limit).")
]
ConcurrencyOpt = Annotated[
    str | None, typer.Option("--concurrency", help="Requests in flight at once ('none': no limit).")
]


def _models(value: str | None) -> list[str] | None:
    return None if value is None else [m for m in value.split(",") if m.strip()]


def _expiry(value: str | None) -> float | None:
    try:
        return None if value is None else parse_expiry(value)
    except ManagementError as exc:
        fail(str(exc))


def _ranges(repeated: list[str] | None, listed: str | None) -> list[str] | None:
    """``--allow-ip`` (repeatable) and ``--allowed-ips a,b`` together; None when neither is given."""
    if repeated is None and listed is None:
        return None
    ranges = list(repeated or [])
    ranges += [part for part in (listed or "").split(",") if part.strip()]
    return ranges


ExpiresOpt = Annotated[
    str | None,
    typer.Option(
        "--expires-at", help="RFC 3339 date-time the key is refused from, e.g. 2027-01-31T00:00:00Z."
    ),
]
AllowIpOpt = Annotated[
    list[str] | None,
    typer.Option("--allow-ip", help="An address range (CIDR) the key may be used from; repeatable."),
]
AllowedIpsOpt = Annotated[
    str | None, typer.Option("--allowed-ips", help="Address ranges (CIDRs), comma-separated.")
]


@keys_app.command("create")
def keys_create(
    account: Annotated[str, typer.Option("--account", help="Account name or id.")],
    group: Annotated[str, typer.Option("--group", help="Basic, Pro (aria-* models) or Nova (nova-*).")],
    name: Annotated[str, typer.Option("--name", help="A label for the key.")] = "",
    rpm: Annotated[
        int | None, typer.Option("--rpm", help="Requests per minute (default from config).")
    ] = None,
    models: Annotated[
        str | None, typer.Option("--models", help="Allowed model ids or aliases, comma-separated.")
    ] = None,
    monthly_cap: Annotated[
        str | None, typer.Option("--monthly-cap", help="Monthly credit cap (UTC month).")
    ] = None,
    tpm: TpmOpt = None,
    concurrency: ConcurrencyOpt = None,
    expires_at: ExpiresOpt = None,
    allow_ip: AllowIpOpt = None,
    allowed_ips: AllowedIpsOpt = None,
    cap_by_window: CapOpt = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    json: JsonOpt = False,
) -> None:
    """Create a key; its secret is printed once and cannot be shown again."""
    options = Options(config, data_dir, json)
    caps = parse_caps(cap_by_window, KEY_WINDOWS, clearable=False)
    cap = _credits(monthly_cap, "monthly-cap") if monthly_cap is not None else None
    tpm_limit = _limit(tpm, "tpm", clearable=False)
    concurrency_limit = _limit(concurrency, "concurrency", clearable=False)
    expiry = _expiry(expires_at)

    async def work(m: Management) -> Any:
        return await m.create_key(
            await m.account(account),
            group,
            name=name,
            rpm=rpm,
            models=_models(models),
            monthly_cap_uc=cap,
            tpm=tpm_limit,
            max_concurrency=concurrency_limit,
            expires_at=expiry,
            allowed_ips=_ranges(allow_ip, allowed_ips),
            caps=caps,
        )

    issued = with_management(options, work)
    row = {**key_row(issued.record), "secret": issued.secret}
    emit_one(
        options,
        row,
        f"created key {issued.record.id} ({issued.record.group}) for account {account}\n"
        f"secret (shown once, store it now): {issued.secret}",
    )


@keys_app.command("list")
def keys_list(
    account: Annotated[str | None, typer.Option("--account", help="Only this account's keys.")] = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    json: JsonOpt = False,
) -> None:
    """List keys (never their secrets)."""
    options = Options(config, data_dir, json)

    async def work(m: Management) -> list[KeyRecord]:
        account_id = (await m.account(account)).id if account else None
        return await m.keys.list_keys(account_id)

    rows = [key_row(k) for k in with_management(options, work)]
    emit(options, rows, KEY_COLUMNS, "keys", whole=("id", "key"), wide=KEY_WIDE_COLUMNS)


@keys_app.command("revoke")
def keys_revoke(
    key_id: str, config: ConfigOpt = None, data_dir: DataDirOpt = None, json: JsonOpt = False
) -> None:
    """Disable a key at once (running servers refuse it within a second)."""
    options = Options(config, data_dir, json)

    async def work(m: Management) -> KeyRecord:
        return await m.revoke_key(await m.key(key_id))

    record = with_management(options, work)
    emit_one(options, key_row(record), f"revoked key {record.id}")


@keys_app.command("rotate")
def keys_rotate(
    key_id: str,
    grace: Annotated[
        float | None, typer.Option("--grace", help="Seconds the old secret keeps working.")
    ] = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    json: JsonOpt = False,
) -> None:
    """Give a key a new secret; the old one works for the grace period (default from config)."""
    options = Options(config, data_dir, json)
    settings = options.settings()
    grace_seconds = settings.keys.rotation_grace_seconds if grace is None else grace

    async def work(m: Management) -> Any:
        return await m.rotate_key(await m.key(key_id), grace_seconds)

    issued = with_management(options, work)
    emit_one(
        options,
        {**key_row(issued.record), "secret": issued.secret},
        f"rotated key {key_id}; old secret valid for {grace_seconds:g} s\nnew secret (shown once): {issued.secret}",
    )


@keys_app.command("update")
def keys_update(
    key_id: str,
    rpm: Annotated[int | None, typer.Option("--rpm", help="Requests per minute.")] = None,
    models: Annotated[
        str | None, typer.Option("--models", help="Allowed models, comma-separated; '' for all.")
    ] = None,
    monthly_cap: Annotated[
        str | None, typer.Option("--monthly-cap", help="Credits per UTC month; 'none' to clear.")
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="New label.")] = None,
    tpm: TpmOpt = None,
    concurrency: ConcurrencyOpt = None,
    expires_at: Annotated[
        str | None, typer.Option("--expires-at", help="RFC 3339 date-time; 'never' to clear.")
    ] = None,
    allow_ip: AllowIpOpt = None,
    allowed_ips: Annotated[
        str | None,
        typer.Option("--allowed-ips", help="Address ranges (CIDRs), comma-separated; '' for anywhere."),
    ] = None,
    cap_by_window: CapOpt = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    json: JsonOpt = False,
) -> None:
    """Change a key's controls; the change applies to running servers within a second."""
    options = Options(config, data_dir, json)
    caps = parse_caps(cap_by_window, KEY_WINDOWS, clearable=True)
    clear = monthly_cap is not None and monthly_cap.lower() == "none"
    cap = _credits(monthly_cap, "monthly-cap") if monthly_cap is not None and not clear else None
    tpm_limit = _limit(tpm, "tpm", clearable=True)
    concurrency_limit = _limit(concurrency, "concurrency", clearable=True)
    never = expires_at is not None and expires_at.strip().lower() == "never"
    expiry = None if never else _expiry(expires_at)

    async def work(m: Management) -> KeyRecord:
        return await m.update_key(
            await m.key(key_id),
            name=name,
            rpm=rpm,
            models=_models(models),
            monthly_cap_uc=cap,
            clear_cap=clear,
            tpm=tpm_limit,
            max_concurrency=concurrency_limit,
            expires_at=expiry,
            clear_expiry=never,
            allowed_ips=_ranges(allow_ip, allowed_ips),
            caps=caps,
        )

    record = with_management(options, work)
    emit_one(options, key_row(record), f"updated key {record.id}")


#: ``modelgate usage`` shows a month's usage; its subcommands maintain the usage data.
usage_app = typer.Typer(help="Usage and spend per month; rebuild-rollups.")
app.add_typer(usage_app, name="usage")
usage_app.command("rebuild-rollups")(rebuild_rollups_command)


@usage_app.callback(invoke_without_command=True)
def usage(
    ctx: typer.Context,
    account: Annotated[str | None, typer.Option("--account", help="Account name or id.")] = None,
    key: Annotated[str | None, typer.Option("--key", help="Key id.")] = None,
    month: Annotated[str | None, typer.Option("--month", help="YYYY-MM (UTC); default this month.")] = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    json: JsonOpt = False,
) -> None:
    """Usage and spend per month, for an account or a key."""
    if ctx.invoked_subcommand is not None:
        return
    options = Options(config, data_dir, json)
    if (account is None) == (key is None):
        fail("give exactly one of --account or --key")
    period = month or month_of(datetime.now(UTC).timestamp())
    if len(period) != 7 or period[4] != "-":
        fail("--month: use YYYY-MM")

    async def work(m: Management, r: Repositories) -> Any:
        account_id = (await m.account(account)).id if account else None
        key_id = (await m.key(key)).id if key else None
        return await r.usage.usage_summary(period, account_id=account_id, key_id=key_id)

    summary = with_repositories(options, work)
    row = {
        "month": summary.month,
        "requests": summary.requests,
        "input_tokens": summary.input_tokens,
        "output_tokens": summary.output_tokens,
        "cache_creation_tokens": summary.cache_creation_tokens,
        "cache_read_tokens": summary.cache_read_tokens,
        "web_search_requests": summary.web_search_requests,
        "charged": format_credits(summary.charged_uc),
        "charged_uc": summary.charged_uc,
        "by_model_uc": summary.by_model,
    }
    if options.json:
        emit_one(options, row, "")
    else:
        emit(options, [row], ["month", "requests", "input_tokens", "output_tokens", "charged"], "usage")
