"""The records the storage protocols speak in: accounts, keys, admin tokens, holds, usage, and the
errors and money rules every engine shares (``storage.base`` has the ledger invariants).

A module of its own, importing nothing else from storage, so that the protocol modules
(``storage.base``, ``storage.reports``, ``storage.responses``) and the engines all import it
without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

Group = Literal["Basic", "Pro", "Nova"]
GROUPS: tuple[Group, ...] = ("Basic", "Pro", "Nova")
KeyState = Literal["active", "disabled"]
#: Why a hold was refused: the balance, or the cap of a window (``storage.spend_windows``).
RefusalReason = Literal["balance", "monthly_cap", "cap_5h", "cap_day", "cap_week"]


class StorageError(Exception):
    """The database could not do what was asked (unreachable, constraint broken)."""


class Conflict(StorageError):
    """A unique name or id already exists."""


class AmountTooLarge(StorageError):
    """The change would take a balance past ``MAX_UC``."""


#: The largest amount of micro-credits anything holds (2^53 - 1, exact in every JSON parser): a
#: balance, a cap, a top-up. Admin inputs above it are refused; the databases refuse it too.
MAX_UC = 2**53 - 1


@dataclass(frozen=True, slots=True)
class Account:
    id: int
    name: str
    balance_uc: int
    reserved_uc: int
    created_at: float
    #: Alerts: ``balance.low`` below this balance (None: ``alerts.low_balance_uc`` applies).
    low_balance_uc: int | None = None
    #: The account's balance is not shown to its keys' holders (``GET /v1/key``).
    hide_balance: bool = False
    #: Spend caps of all the account's keys together, per window (``storage.spend_windows``);
    #: None: no cap in that window.
    cap_5h_uc: int | None = None
    cap_day_uc: int | None = None
    cap_week_uc: int | None = None
    monthly_cap_uc: int | None = None

    #: Rate limits of all the account's keys together (None: no such limit; ``limits.key_limits``).
    rpm: int | None = None
    tpm: int | None = None
    max_concurrency: int | None = None

    @property
    def window_caps(self) -> tuple[int | None, int | None, int | None, int | None]:
        """The caps by window: ``5h``, ``day``, ``week``, ``month``."""
        return (self.cap_5h_uc, self.cap_day_uc, self.cap_week_uc, self.monthly_cap_uc)

    @property
    def available_uc(self) -> int:
        return self.balance_uc - self.reserved_uc


@dataclass(frozen=True, slots=True)
class AccountLimits:
    """An account's rate limits as stored (None: no such limit)."""

    rpm: int | None = None
    tpm: int | None = None
    max_concurrency: int | None = None


#: The SQL condition of an account with at least one rate limit set.
LIMITED = "(rpm IS NOT NULL OR tpm IS NOT NULL OR max_concurrency IS NOT NULL)"


@dataclass(frozen=True, slots=True)
class KeyRecord:
    id: str
    account_id: int
    name: str
    group: Group
    rpm: int
    #: None: every model of the group's family.
    allowed_models: tuple[str, ...] | None
    #: None: no monthly cap.
    monthly_cap_uc: int | None
    state: KeyState
    digest: bytes
    prefix: str
    last4: str
    created_at: float
    #: The secret replaced by the last rotation stays valid until ``previous_expires_at``.
    previous_digest: bytes | None = None
    previous_expires_at: float | None = None
    rotated_at: float | None = None
    revoked_at: float | None = None
    #: Increases on every change; the auth view polls for versions above what it has.
    version: int = 0
    #: Input + output tokens per rolling minute (None: no limit; ``limits.key_limits``).
    tpm: int | None = None
    #: Requests in flight at once (None: no limit).
    max_concurrency: int | None = None
    #: Refused from this instant on (None: never expires).
    expires_at: float | None = None
    #: CIDRs the key may be used from, as stored (normalised); None: from anywhere.
    allowed_ips: tuple[str, ...] | None = None
    #: Spend caps beside the month's, per window (``storage.spend_windows``); None: no cap.
    cap_5h_uc: int | None = None
    cap_day_uc: int | None = None
    cap_week_uc: int | None = None

    @property
    def window_caps(self) -> tuple[int | None, int | None, int | None, int | None]:
        """The caps by window: ``5h``, ``day``, ``week``, ``month``."""
        return (self.cap_5h_uc, self.cap_day_uc, self.cap_week_uc, self.monthly_cap_uc)


@dataclass(frozen=True, slots=True)
class NewKey:
    id: str
    account_id: int
    name: str
    group: Group
    rpm: int
    allowed_models: tuple[str, ...] | None
    monthly_cap_uc: int | None
    digest: bytes
    prefix: str
    last4: str
    tpm: int | None = None
    max_concurrency: int | None = None
    expires_at: float | None = None
    allowed_ips: tuple[str, ...] | None = None
    cap_5h_uc: int | None = None
    cap_day_uc: int | None = None
    cap_week_uc: int | None = None


@dataclass(frozen=True, slots=True)
class KeyControls:
    """A partial update of a key's controls; ``None`` fields are left as they are.

    ``allowed_models=()`` means "no restriction" and ``monthly_cap_uc=-1`` means "no cap", so that
    clearing is expressible; likewise ``expires_at=NEVER_EXPIRES`` ("never expires") and
    ``allowed_ips=()`` ("from anywhere").
    """

    name: str | None = None
    rpm: int | None = None
    allowed_models: tuple[str, ...] | None = None
    monthly_cap_uc: int | None = None
    #: ``-1``: no limit.
    tpm: int | None = None
    #: ``-1``: no limit.
    max_concurrency: int | None = None
    expires_at: float | None = None
    allowed_ips: tuple[str, ...] | None = None
    #: ``-1``: no cap in that window.
    cap_5h_uc: int | None = None
    cap_day_uc: int | None = None
    cap_week_uc: int | None = None


def window_cap_columns(controls: KeyControls) -> list[tuple[str, int | None]]:
    """(column, new value) of the window caps ``controls`` changes; ``-1`` in a field: no cap."""
    changes: list[tuple[str, int | None]] = [("cap_5h_uc", controls.cap_5h_uc)]
    changes += [("cap_day_uc", controls.cap_day_uc), ("cap_week_uc", controls.cap_week_uc)]
    return [(column, None if cap < 0 else cap) for column, cap in changes if cap is not None]


@dataclass(frozen=True, slots=True)
class AccountCaps:
    """A partial update of an account's spend caps by window; ``None``: unchanged, ``-1``: no cap."""

    cap_5h_uc: int | None = None
    cap_day_uc: int | None = None
    cap_week_uc: int | None = None
    monthly_cap_uc: int | None = None

    def columns(self) -> list[tuple[str, int | None]]:
        """(column, new value) of the caps this changes."""
        changes: list[tuple[str, int | None]] = [
            ("cap_5h_uc", self.cap_5h_uc),
            ("cap_day_uc", self.cap_day_uc),
        ]
        changes += [("cap_week_uc", self.cap_week_uc), ("monthly_cap_uc", self.monthly_cap_uc)]
        return [(column, None if cap < 0 else cap) for column, cap in changes if cap is not None]


#: ``KeyControls.expires_at`` that clears a key's expiry.
NEVER_EXPIRES = -1.0


@dataclass(frozen=True, slots=True)
class AdminToken:
    id: str
    #: None for an operator token; otherwise the only account the token may see.
    account_id: int | None
    created_at: float
    #: The stored HMAC digest, for the caller's constant-time comparison.
    digest: bytes = b""
    name: str = ""
    #: What may be shown of the token: its first characters and its last four ("" for tokens
    #: issued before migration 0003, which did not keep them).
    prefix: str = ""
    last4: str = ""
    #: The admin token that issued this one (None: the CLI or the first-start bootstrap).
    created_by: str | None = None
    #: Refused from this instant on (None: never expires).
    expires_at: float | None = None
    revoked_at: float | None = None
    #: Coarse: written at most once per ``touch_admin_token`` interval.
    last_used_at: float | None = None

    def usable_at(self, now: float) -> bool:
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)


@dataclass(frozen=True, slots=True)
class ReserveRequest:
    request_id: str
    key_id: str
    account_id: int
    month: str
    #: Worst-case cost of the request as asked.
    amount_uc: int
    #: The least that still lets it run (input plus one output token); below it: refuse.
    minimum_uc: int
    now: float
    expires_at: float
    #: Recorded with the hold, so that a hold released by the sweeper still says what it was for.
    endpoint: str = "unknown"
    model: str = "unknown"


@dataclass(frozen=True, slots=True)
class Reservation:
    request_id: str
    granted_uc: int
    #: What remains after this hold, for response headers.
    balance_after_uc: int
    cap_remaining_after_uc: int | None


@dataclass(frozen=True, slots=True)
class Refusal:
    #: ``monthly_cap`` for a key's or an account's month; ``cap_5h``, ``cap_day``, ``cap_week``
    #: for the other windows (``storage.spend_windows``).
    reason: RefusalReason
    available_uc: int


def decide_charge(cost: int, held: int, balance_free: int, cap_free: int | None) -> tuple[int, int]:
    """(charged, shortfall) of a settlement: the real cost; beyond the hold only what the account
    has free (``balance - reserved``) and the key's cap has free in the hold's month, so neither
    is ever overshot; what is left is the shortfall, recorded for the operator."""
    cost = max(cost, 0)
    if cost <= held:
        return cost, 0
    room = max(0, balance_free) if cap_free is None else max(0, min(balance_free, cap_free))
    charged = held + min(cost - held, room)
    return charged, cost - charged


def decide_hold(
    r: ReserveRequest,
    balance_free: int,
    cap: int | None,
    used: int,
    windows: Sequence[tuple[RefusalReason, int, int]] = (),
) -> Reservation | Refusal:
    """The reservation rule, applied by every engine to figures read under its lock: grant
    ``min(amount, free balance, free cap of every window)`` when that is at least ``minimum``;
    otherwise refuse, naming the cap when it is the binding constraint. ``used`` is the key's spent
    + held this month; ``windows`` the other caps in force as (reason, cap, spent + held in the
    period), in checking order (``storage.spend_windows.caps_in_force``). The binding cap is the
    one with least left, the first of them on a tie, then the key's month."""
    cap_free = None if cap is None else max(0, cap - used)
    tightest: tuple[RefusalReason, int] | None = None
    for reason, window_cap, window_used in windows:
        left = max(0, window_cap - window_used)
        if tightest is None or left < tightest[1]:
            tightest = (reason, left)
    if cap_free is not None and (tightest is None or cap_free < tightest[1]):
        tightest = ("monthly_cap", cap_free)
    affordable = balance_free if tightest is None else min(balance_free, tightest[1])
    if affordable < r.minimum_uc:
        if tightest is not None and tightest[1] <= balance_free:
            return Refusal(tightest[0], max(0, affordable))
        return Refusal("balance", max(0, affordable))
    granted = min(r.amount_uc, affordable)
    return Reservation(
        request_id=r.request_id,
        granted_uc=granted,
        balance_after_uc=balance_free - granted,
        cap_remaining_after_uc=None if cap_free is None else cap_free - granted,
    )


@dataclass(slots=True)
class UsageRecord:
    request_id: str
    key_id: str
    account_id: int
    endpoint: str
    model: str
    month: str
    status: str
    created_at: float
    finished_at: float
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_tokens: int = 0
    cache_read_tokens: int = 0
    charged_uc: int = 0
    #: What the upstream's usage cost beyond the hold and could not be charged (the account's
    #: free balance or the key's free cap ran out); 0 when the input bound held, as it should.
    shortfall_uc: int = 0
    #: The part of ``cache_creation_tokens`` written to the 1-hour cache (its own price), so the
    #: record alone recomputes ``charged_uc``.
    cache_write_1h_tokens: int = 0
    #: Server-side web searches the provider ran and charges per request.
    web_search_requests: int = 0


@dataclass(frozen=True, slots=True)
class Settlement:
    """Outcome of settle/release: ``applied`` is False when it had already happened.

    ``balance_uc`` is the available balance (not held by requests in flight) and
    ``cap_remaining_uc`` the key's free cap in the reservation's month, both after the step.
    """

    applied: bool
    charged_uc: int
    balance_uc: int
    cap_remaining_uc: int | None


@dataclass(frozen=True, slots=True)
class UsageSummary:
    month: str
    requests: int
    input_tokens: int
    output_tokens: int
    cache_creation_tokens: int
    cache_read_tokens: int
    charged_uc: int
    by_model: dict[str, int] = field(default_factory=dict)
    #: Server web searches the provider ran (billed per request).
    web_search_requests: int = 0
