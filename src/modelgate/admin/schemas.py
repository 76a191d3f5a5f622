"""Admin API request bodies (pydantic, unknown fields refused) and the JSON views of records.

Money is shown twice, like everywhere else: exact integer micro-credits (``*_uc``) and a credits
string (``format_credits``). Requests take either form (exactly one). Secrets appear only in the
responses that create them.

Unknown fields are a 400 (``extra="forbid"``): a body that tries to set ``account_id``, ``group``,
``state``, ``digest`` or a spend on a key is refused as a whole and changes nothing.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from modelgate.addresses import MAX_NETWORK_TEXT, MAX_NETWORKS
from modelgate.catalogue import Model
from modelgate.management import MAX_TOKEN_LIFETIME, MIN_TOKEN_LIFETIME, format_credits, groups_of_family
from modelgate.storage.base import MAX_UC, Account, AdminToken, KeyRecord, UsageRecord, UsageSummary
from modelgate.storage.reports import DailyUsage, KeyActivity, KeySpend

MAX_RPM = 1_000_000
#: The largest token or concurrency limit (``management.MAX_LIMIT``).
MAX_LIMIT = 2**31 - 1
MAX_GRACE_SECONDS = 90 * 86400
Name = Annotated[str, StringConstraints(max_length=100)]
# ASCII digits only (\d would admit other scripts' digits); amounts are bounded by MAX_UC.
Credits = Annotated[str, StringConstraints(max_length=32, pattern=r"^\s*[0-9]+(\.[0-9]{1,6})?\s*$")]
Micro = Annotated[int, Field(ge=0, le=MAX_UC)]
ModelName = Annotated[str, StringConstraints(min_length=1, max_length=100)]
Expiry = Annotated[str, StringConstraints(max_length=64)]
AddressRanges = Annotated[
    list[Annotated[str, StringConstraints(max_length=MAX_NETWORK_TEXT)]], Field(max_length=MAX_NETWORKS)
]
#: Spend caps by window (``storage.spend_windows``): credits or µc per window, null removes one.
WindowName = Literal["5h", "day", "week", "month"]
CapsCredits = dict[WindowName, Credits | None]
CapsMicro = dict[WindowName, Micro | None]
_CAPS_DOC = (
    'Spend caps by window ("5h" rolling, "day" UTC, "week" UTC ISO, "month" UTC) in credits; '
    "null removes one, absent windows stay."
)
#: Ids every engine can store (SQLite and PostgreSQL integers are 64-bit).
AccountId = Annotated[int, Field(ge=1, le=2**63 - 1)]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class AccountCreate(Body):
    """A new account; the opening balance defaults to 0."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    credits: Credits | None = Field(default=None, description='Opening balance in credits, e.g. "50".')
    credits_uc: Micro | None = Field(default=None, description="Opening balance in micro-credits.")


class AccountRename(Body):
    """A change to an account (operators only): a new name (1 to 100 characters, not another
    account's) and/or whether its balance is hidden from its keys' holders (``GET /v1/key``)."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=100)] | None = None
    hide_balance: bool | None = Field(
        default=None, description="true: GET /v1/key does not show the account's balance to key holders."
    )
    caps: CapsCredits | None = Field(
        default=None, description=_CAPS_DOC + " All the account's keys together."
    )
    caps_uc: CapsMicro | None = Field(default=None, description="The same in micro-credits.")
    #: The account's rate limits, shared by all its keys together; ``null`` removes one.
    rpm: Annotated[int, Field(ge=1, le=MAX_RPM)] | None = Field(
        default=None, description="Requests per minute of all the account's keys together; null: no limit."
    )
    tpm: Annotated[int, Field(ge=1, le=MAX_LIMIT)] | None = Field(
        default=None, description="Input + output tokens per rolling minute of all its keys; null: no limit."
    )
    max_concurrency: Annotated[int, Field(ge=1, le=MAX_LIMIT)] | None = Field(
        default=None, description="Requests in flight at once for all its keys; null: no limit."
    )


class TopUp(Body):
    """Credits added to an account's balance: give ``amount`` or ``amount_uc``."""

    amount: Credits | None = Field(default=None, description='Credits, e.g. "25.5".')
    amount_uc: Micro | None = Field(default=None, description="Micro-credits.")
    note: Annotated[str, StringConstraints(max_length=500)] = ""


class KeyCreate(Body):
    """A new key. ``account_id`` is required for operators; account tokens may omit it."""

    account_id: AccountId | None = None
    group: Annotated[str, Field(description="Basic, Pro (aria-* models) or Nova (nova-* models).")]
    name: Name = ""
    rpm: Annotated[int, Field(ge=1, le=MAX_RPM)] | None = Field(
        default=None, description="Requests per minute; default from the server configuration."
    )
    allowed_models: Annotated[list[ModelName], Field(max_length=100)] | None = Field(
        default=None, description="Model ids or aliases; null or empty: every model of the group."
    )
    monthly_cap: Credits | None = Field(default=None, description="Credits per UTC month.")
    monthly_cap_uc: Micro | None = Field(default=None, description="Micro-credits per UTC month.")
    tpm: Annotated[int, Field(ge=1, le=MAX_LIMIT)] | None = Field(
        default=None, description="Input + output tokens per rolling minute; null: no limit."
    )
    max_concurrency: Annotated[int, Field(ge=1, le=MAX_LIMIT)] | None = Field(
        default=None, description="Requests in flight at once; null: no limit."
    )
    expires_at: Expiry | None = Field(
        default=None,
        description="RFC 3339 date-time (with Z or an offset) from which the key is refused; null: never.",
    )
    allowed_ips: AddressRanges | None = Field(
        default=None, description="CIDRs the key may be used from; null or empty: from anywhere."
    )
    caps: CapsCredits | None = Field(default=None, description=_CAPS_DOC + ' The month is "monthly_cap".')
    caps_uc: CapsMicro | None = Field(default=None, description="The same in micro-credits.")


class KeyUpdate(Body):
    """A partial update of a key's controls: absent fields stay as they are.

    ``allowed_models: null`` (or ``[]``) lifts the model restriction; ``monthly_cap: null`` (or
    ``monthly_cap_uc: null``) removes the cap. Nothing else about a key can be changed here.
    """

    name: Name | None = None
    rpm: Annotated[int, Field(ge=1, le=MAX_RPM)] | None = None
    allowed_models: Annotated[list[ModelName], Field(max_length=100)] | None = None
    monthly_cap: Credits | None = None
    monthly_cap_uc: Micro | None = None
    #: ``null`` removes the limit (an operator only: a key's owner may only lower it).
    tpm: Annotated[int, Field(ge=1, le=MAX_LIMIT)] | None = None
    max_concurrency: Annotated[int, Field(ge=1, le=MAX_LIMIT)] | None = None
    #: null: the key never expires.
    expires_at: Expiry | None = None
    #: null or []: the key may be used from anywhere.
    allowed_ips: AddressRanges | None = None
    #: 5h, day, week (the month is ``monthly_cap``); an owner or member may only lower them.
    caps: CapsCredits | None = Field(default=None, description=_CAPS_DOC + ' The month is "monthly_cap".')
    caps_uc: CapsMicro | None = Field(default=None, description="The same in micro-credits.")


class KeyRotate(Body):
    grace_seconds: Annotated[float, Field(ge=0, le=MAX_GRACE_SECONDS)] | None = Field(
        default=None,
        description="Seconds the old secret keeps working (0: stops at once); default from configuration.",
    )


class Empty(Body):
    """No fields (the body may be omitted)."""


Lifetime = Annotated[int, Field(ge=MIN_TOKEN_LIFETIME, le=MAX_TOKEN_LIFETIME)]


class AccountTokenCreate(Body):
    """An account-scoped admin token for the account in the path (the body may be omitted)."""

    name: Name = Field(default="", description="A label shown in token listings.")
    expires_in_seconds: Lifetime | None = Field(
        default=None, description="Refused this many seconds after issue; null: never expires."
    )


class TokenCreate(AccountTokenCreate):
    """An admin token: operator-scoped when ``account_id`` is null, otherwise for that account."""

    account_id: AccountId | None = Field(
        default=None, description="null: an operator token (operators only)."
    )


REQUEST_MODELS: tuple[type[BaseModel], ...] = (
    AccountCreate,
    AccountRename,
    TopUp,
    KeyCreate,
    KeyUpdate,
    KeyRotate,
    Empty,
    AccountTokenCreate,
    TokenCreate,
)


def when(ts: float | None) -> str | None:
    """RFC 3339 UTC timestamps (second precision). The same text as
    ``datetime.fromtimestamp(ts, UTC).strftime(...)`` (which rounds to the microsecond first, as
    ``round(ts, 6)`` does) at a fifth of its cost: a page of usage records formats two per record,
    on the event loop."""
    return None if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(round(ts, 6)))


def money(name: str, micro: int | None) -> dict[str, Any]:
    return {f"{name}_uc": micro, name: None if micro is None else format_credits(micro)}


def account_view(account: Account) -> dict[str, Any]:
    return {
        "id": account.id,
        "name": account.name,
        **money("balance", account.balance_uc),
        **money("reserved", account.reserved_uc),
        **money("available", account.available_uc),
        "created_at": when(account.created_at),
        "hide_balance": account.hide_balance,
        **caps_view(account.window_caps),
        "rpm": account.rpm,
        "tpm": account.tpm,
        "max_concurrency": account.max_concurrency,
    }


def caps_view(caps: tuple[int | None, ...]) -> dict[str, Any]:
    """Spend caps by window (``5h``, ``day``, ``week``, ``month``), as credits and as µc."""
    windows = ("5h", "day", "week", "month")
    return {
        "caps": {w: None if c is None else format_credits(c) for w, c in zip(windows, caps, strict=True)},
        "caps_uc": dict(zip(windows, caps, strict=True)),
    }


def key_view(key: KeyRecord, month: str, activity: KeyActivity, now: float) -> dict[str, Any]:
    """A key with its spend, holds and free cap in ``month``; the previous secret after a rotation
    counts as active until ``previous_secret_valid_until``."""
    spent_uc, reserved_uc = activity.spent_uc, activity.reserved_uc
    cap = key.monthly_cap_uc
    previous_until = key.previous_expires_at
    return {
        "id": key.id,
        "account_id": key.account_id,
        "name": key.name,
        "group": key.group,
        "display": f"{key.prefix}…{key.last4}",
        "state": key.state,
        "rpm": key.rpm,
        "allowed_models": list(key.allowed_models) if key.allowed_models is not None else None,
        **money("monthly_cap", key.monthly_cap_uc),
        "month": month,
        **money("spent_this_month", spent_uc),
        **money("reserved_this_month", reserved_uc),
        **money("cap_remaining", None if cap is None else max(0, cap - spent_uc - reserved_uc)),
        "last_used_at": when(activity.last_used_at),
        "created_at": when(key.created_at),
        "rotated_at": when(key.rotated_at),
        "revoked_at": when(key.revoked_at),
        "previous_secret_valid_until": when(previous_until),
        # A revoked key's old secret is refused like its new one, whatever its grace said.
        "previous_secret_active": key.state == "active"
        and previous_until is not None
        and now < previous_until,
        "tpm": key.tpm,
        "max_concurrency": key.max_concurrency,
        "expires_at": when(key.expires_at),
        "expired": key.expires_at is not None and now >= key.expires_at,
        "allowed_ips": list(key.allowed_ips) if key.allowed_ips else None,
        **caps_view(key.window_caps),
    }


def token_state(token: AdminToken, now: float) -> str:
    if token.revoked_at is not None:
        return "revoked"
    if token.expires_at is not None and now >= token.expires_at:
        return "expired"
    return "active"


def token_view(token: AdminToken, now: float, caller_token_id: str | None = None) -> dict[str, Any]:
    """What may be shown of an admin token: never its secret or digest."""
    return {
        "id": token.id,
        "name": token.name,
        "scope": "operator" if token.account_id is None else "account",
        "account_id": token.account_id,
        "display": f"{token.prefix}…{token.last4}" if token.prefix else None,
        "state": token_state(token, now),
        "current": token.id == caller_token_id,
        "created_at": when(token.created_at),
        "created_by": token.created_by,
        "expires_at": when(token.expires_at),
        "revoked_at": when(token.revoked_at),
        "last_used_at": when(token.last_used_at),
    }


def daily_view(day: DailyUsage) -> dict[str, Any]:
    return {
        "day": day.day,
        "model": day.model,
        "requests": day.requests,
        "input_tokens": day.input_tokens,
        "output_tokens": day.output_tokens,
        "cache_tokens": day.cache_tokens,
        **money("charged", day.charged_uc),
    }


def top_key_view(spend: KeySpend) -> dict[str, Any]:
    return {
        "key_id": spend.key_id,
        "account_id": spend.account_id,
        "name": spend.name,
        "requests": spend.requests,
        "tokens": spend.tokens,
        **money("charged", spend.charged_uc),
    }


def model_view(model: Model) -> dict[str, Any]:
    return {
        "id": model.id,
        "display_name": model.display_name,
        "family": model.family,
        "groups": groups_of_family(model.family),
    }


def usage_record_view(record: UsageRecord) -> dict[str, Any]:
    return {
        "request_id": record.request_id,
        "key_id": record.key_id,
        "account_id": record.account_id,
        "endpoint": record.endpoint,
        "model": record.model,
        "status": record.status,
        "created_at": when(record.created_at),
        "finished_at": when(record.finished_at),
        "input_tokens": record.input_tokens,
        "output_tokens": record.output_tokens,
        "cache_creation_tokens": record.cache_creation_tokens,
        "cache_read_tokens": record.cache_read_tokens,
        # The part of cache_creation_tokens written to the 1-hour cache, and server web searches.
        "cache_write_1h_tokens": record.cache_write_1h_tokens,
        "web_search_requests": record.web_search_requests,
        **money("charged", record.charged_uc),
        # What the upstream's usage cost beyond the hold and could not be charged (docs/billing.md).
        "shortfall_uc": record.shortfall_uc,
    }


def usage_summary_view(summary: UsageSummary) -> dict[str, Any]:
    return {
        "requests": summary.requests,
        "input_tokens": summary.input_tokens,
        "output_tokens": summary.output_tokens,
        "cache_creation_tokens": summary.cache_creation_tokens,
        "cache_read_tokens": summary.cache_read_tokens,
        "web_search_requests": summary.web_search_requests,
        **money("charged", summary.charged_uc),
        "by_model": [{"model": m, **money("charged", uc)} for m, uc in summary.by_model.items()],
    }
