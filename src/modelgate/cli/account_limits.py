"""The ``--rpm``, ``--tpm`` and ``--concurrency`` options of ``accounts create`` and ``accounts
update``: an account's rate limits, shared by all its keys together (docs/keys.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from modelgate.cli.context import fail
from modelgate.management import Management
from modelgate.storage.base import Account, AccountLimits

AccountRpmOpt = Annotated[
    str | None,
    typer.Option("--rpm", help="Requests per minute of all the account's keys together ('none': no limit)."),
]
AccountTpmOpt = Annotated[
    str | None,
    typer.Option(
        "--tpm", help="Input + output tokens per rolling minute of all its keys ('none': no limit)."
    ),
]
AccountConcurrencyOpt = Annotated[
    str | None,
    typer.Option("--concurrency", help="Requests in flight at once for all its keys ('none': no limit)."),
]

#: A flag given as ``none``: the limit is removed.
CLEAR = -1


def parse(value: str | None, flag: str) -> int | None:
    """A whole number from 1 up, ``none`` (``CLEAR``), or None when the flag was not given."""
    if value is None:
        return None
    text = value.strip()
    if text.lower() == "none":
        return CLEAR
    if not text.isdigit() or int(text) < 1:
        fail(f"{flag}: must be a whole number from 1 up or 'none'")
    return int(text)


def given(rpm: str | None, tpm: str | None, concurrency: str | None) -> bool:
    return rpm is not None or tpm is not None or concurrency is not None


async def apply(
    m: Management, account: Account, rpm: str | None, tpm: str | None, concurrency: str | None
) -> Account:
    """The account with the flags given applied (the others stay)."""
    if not given(rpm, tpm, concurrency):
        return account

    def merged(flag: str, value: str | None, current: int | None) -> int | None:
        parsed = parse(value, flag)
        if parsed is None:
            return current
        return None if parsed == CLEAR else parsed

    limits = AccountLimits(
        rpm=merged("--rpm", rpm, account.rpm),
        tpm=merged("--tpm", tpm, account.tpm),
        max_concurrency=merged("--concurrency", concurrency, account.max_concurrency),
    )
    return await m.set_account_limits(account, limits)


def shown(account: Account) -> str:
    """The limits as the CLI reports them."""
    parts = [
        f"{name} {value}"
        for name, value in (
            ("rpm", account.rpm),
            ("tpm", account.tpm),
            ("concurrency", account.max_concurrency),
        )
        if value is not None
    ]
    return ", ".join(parts) if parts else "no rate limits"
