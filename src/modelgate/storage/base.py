"""The interfaces every engine implements (SQLite and PostgreSQL); the records they speak in are
in ``storage.records`` (re-exported here).

Each narrow protocol (``AccountStore``, ``KeyStore``, ``AdminTokenStore``, ``LedgerStore``,
``UsageStore``, ``UsageReports`` in ``storage.reports`` and ``ResponseStore`` in
``storage.responses``) is one repository per engine, composed over that engine's database object
(``storage.sqlite_database``, ``storage.postgres_database``). Consumers take the repository they
use from ``Services``; ``storage.open_store`` builds them for the engine of the database URL
(``storage.repositories``). ``Store`` is the sum of the protocols, the type of the whole-store test
helper the contract suite runs against. Money is integer micro-credits (µc) everywhere.

Ledger invariants (checked by the contract and property tests):
- ``account.balance_uc >= account.reserved_uc >= 0``: a reservation never spends money that is
  not there, so the balance never goes negative.
- For a key and month with a cap: ``spent_uc + reserved_uc <= cap``.
- ``balance_uc == Σ top-ups − Σ usage.charged_uc`` for every account.
- A reservation is settled or released at most once; settling twice changes nothing.
- Every reservation ends in exactly one usage record (settle and release both write it).

Ledger semantics every engine reproduces exactly (the PostgreSQL engine included; nothing about
money lives in Redis or in process memory, so N gateway instances sharing one database are exact):

- ``reserve`` is one transaction that reads the account's free balance (``balance - reserved``)
  and the key's free cap for ``request.month`` (``cap - spent - reserved``; no cap: unbounded),
  grants ``min(amount, free balance, free cap)`` when that is at least ``minimum``, and adds the
  grant to both ``accounts.reserved_uc`` and ``key_month_spend.reserved_uc`` (creating the month
  row on first use). Concurrent reservations must serialise on the account and key-month rows
  (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: ``SELECT … FOR UPDATE`` of the account row, then the
  key-month row, in that order, or conditional ``UPDATE … WHERE balance_uc - reserved_uc >= $x``).
  Refusal reason: ``monthly_cap`` when the key's free cap is the binding constraint (free cap
  below the minimum and not above the free balance), otherwise ``balance``.
- ``settle``/``release`` are one transaction each, conditional on the reservation still being
  pending: a reservation row exists only while its request is in flight, and finishing claims it
  with ``DELETE FROM reservations WHERE request_id = $1 RETURNING …`` (zero rows means it already
  happened: return ``applied=False`` and change nothing). The reservation row is authoritative
  for key, account and **month**: a request that began before midnight UTC and ended after it is
  charged to the month it was reserved in, so a cap check and its charge always concern the same
  month. The charge is ``min(usage.charged_uc, amount)`` (0 for release); the usage record is
  written with that charge and the reservation's key, account, month, endpoint, model and start
  time, in the same transaction. Settle, a replayed settle and the expiry sweeper of any number
  of processes may race: exactly one applies.
- Expiry: a reservation still pending after ``expires_at`` belongs to a request whose process
  crashed or lost it. ``billing.sweeper`` lists them with ``expired_reservations`` and releases
  each (charge 0, usage status ``"abandoned"``, the endpoint and model the hold was made for), so
  its hold stops blocking the balance and the cap. Releasing is the same conditional step as
  above, so sweepers may run in every instance at once.
- ``Settlement.balance_uc`` and ``Reservation.balance_after_uc`` are the balance *available*
  (``balance_uc - reserved_uc``) after the step; the cap figures are ``cap - spent - reserved``
  of the reservation's month (None: no cap). They feed the response headers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from modelgate.storage.audit import AuditDraft, AuditStore
from modelgate.storage.records import (
    GROUPS,
    MAX_UC,
    NEVER_EXPIRES,
    Account,
    AccountCaps,
    AccountLimits,
    AdminToken,
    AmountTooLarge,
    Conflict,
    Group,
    KeyControls,
    KeyRecord,
    KeyState,
    NewKey,
    Refusal,
    Reservation,
    ReserveRequest,
    Settlement,
    StorageError,
    UsageRecord,
    UsageSummary,
    decide_charge,
    decide_hold,
)
from modelgate.storage.reports import UsageReports
from modelgate.storage.responses import ResponseStore
from modelgate.storage.spend_windows import Window, WindowUse

__all__ = [
    "DEFAULT_BATCH_WAIT_SECONDS",
    "DEFAULT_POOL_SIZE",
    "GROUPS",
    "MAX_UC",
    "NEVER_EXPIRES",
    "Account",
    "AccountCaps",
    "AccountLimits",
    "AccountStore",
    "AdminToken",
    "AdminTokenStore",
    "AmountTooLarge",
    "Conflict",
    "ConnectionUse",
    "Group",
    "KeyControls",
    "KeyRecord",
    "KeyState",
    "KeyStore",
    "LedgerObserver",
    "LedgerStore",
    "NewKey",
    "Refusal",
    "Reservation",
    "ReserveRequest",
    "Settlement",
    "StorageError",
    "Store",
    "UsageRecord",
    "UsageStore",
    "UsageSummary",
    "decide_charge",
    "decide_hold",
]


class AccountStore(Protocol):
    """Accounts and their shared balance."""

    async def create_account(
        self, name: str, balance_uc: int, now: float, *, audit: AuditDraft[Account] | None = None
    ) -> Account: ...
    async def get_account(self, account_id: int) -> Account | None: ...
    async def find_account(self, name: str) -> Account | None: ...
    async def list_accounts(self) -> list[Account]: ...
    async def rename_account(
        self, account_id: int, name: str, *, audit: AuditDraft[Account] | None = None
    ) -> Account | None:
        """The account under its new name (None: no such account); a taken name is ``Conflict``."""
        ...

    async def top_up(
        self,
        account_id: int,
        amount_uc: int,
        note: str,
        now: float,
        *,
        audit: AuditDraft[Account] | None = None,
    ) -> Account: ...
    async def adjust(
        self,
        account_id: int,
        amount_uc: int,
        note: str,
        now: float,
        *,
        audit: AuditDraft[Account] | None = None,
    ) -> Account:
        """A ledger adjustment of either sign; a debit that would take the balance below what
        requests in flight hold is ``Conflict``."""
        ...

    async def set_low_balance(
        self, account_id: int, threshold_uc: int | None, *, audit: AuditDraft[Account] | None = None
    ) -> Account | None:
        """The account's ``balance.low`` alert threshold (None: the configured default)."""
        ...

    async def topups_total(self, account_id: int) -> int: ...
    async def set_hide_balance(
        self, account_id: int, hide: bool, *, audit: AuditDraft[Account] | None = None
    ) -> Account | None:
        """Whether the account's balance is hidden from its keys' holders (None: no such account)."""
        ...

    async def set_account_caps(
        self, account_id: int, caps: AccountCaps, *, audit: AuditDraft[Account] | None = None
    ) -> Account | None:
        """Change the account's spend caps by window (None: no such account)."""
        ...

    async def set_account_limits(
        self, account_id: int, limits: AccountLimits, *, audit: AuditDraft[Account] | None = None
    ) -> Account | None:
        """The account's rate limits, all three at once (None: no such account)."""
        ...

    async def limited_accounts(self) -> list[Account]:
        """The accounts with at least one rate limit set (the gateway's account limits view)."""
        ...


class KeyStore(Protocol):
    """API key records (digests only; the secrets are never stored)."""

    async def create_key(
        self, key: NewKey, now: float, *, audit: AuditDraft[KeyRecord] | None = None
    ) -> KeyRecord: ...
    async def get_key(self, key_id: str) -> KeyRecord | None: ...
    async def list_keys(self, account_id: int | None = None) -> list[KeyRecord]: ...
    async def update_key(
        self, key_id: str, controls: KeyControls, now: float, *, audit: AuditDraft[KeyRecord] | None = None
    ) -> KeyRecord | None: ...
    async def rotate_key(
        self,
        key_id: str,
        digest: bytes,
        prefix: str,
        last4: str,
        grace_seconds: float,
        now: float,
        *,
        audit: AuditDraft[KeyRecord] | None = None,
    ) -> KeyRecord | None: ...
    async def revoke_key(
        self, key_id: str, now: float, *, audit: AuditDraft[KeyRecord] | None = None
    ) -> KeyRecord | None:
        """Disable the key; revoking a disabled key changes nothing and writes no audit entry."""
        ...

    async def key_page(
        self,
        account_id: int | None,
        *,
        limit: int,
        after: tuple[float, str] | None = None,
        search: str = "",
        owner: str | None = None,
    ) -> list[KeyRecord]:
        """Up to ``limit`` keys in ``(created_at, id)`` order after ``after``, of one account or all;
        ``search`` (when not empty) keeps those whose name, id or display prefix contains it, in
        any case; ``owner`` (a person id) those that person created."""
        ...

    async def keys_changed_since(self, version: int, limit: int | None = None) -> list[KeyRecord]:
        """Keys whose version is above ``version`` (all keys for 0), ordered by version; at most
        ``limit`` of them (the lowest versions) when given."""
        ...


class AdminTokenStore(Protocol):
    """Admin tokens for the admin API and the dashboard (digests only)."""

    async def create_admin_token(
        self,
        token_id: str,
        digest: bytes,
        account_id: int | None,
        now: float,
        *,
        name: str = "",
        prefix: str = "",
        last4: str = "",
        created_by: str | None = None,
        expires_at: float | None = None,
        audit: AuditDraft[AdminToken] | None = None,
    ) -> None: ...
    async def find_admin_token(self, digest: bytes) -> AdminToken | None:
        """The token with this digest, revoked and expired ones included (the caller decides)."""
        ...

    async def get_admin_token(self, token_id: str) -> AdminToken | None: ...
    async def list_admin_tokens(self, account_id: int | None = None) -> list[AdminToken]:
        """Oldest first; with ``account_id`` only that account's tokens, otherwise all of them."""
        ...

    async def revoke_admin_token(
        self, token_id: str, now: float, *, audit: AuditDraft[AdminToken] | None = None
    ) -> AdminToken | None:
        """Revoke once (a second call keeps the first ``revoked_at`` and writes no audit entry);
        None when unknown."""
        ...

    async def touch_admin_token(self, token_id: str, now: float, resolution: float) -> bool:
        """Set ``last_used_at = now`` unless it is already within ``resolution`` seconds of
        ``now``: one conditional write, so instances racing to touch a token write at most once
        per interval. True when this call wrote."""
        ...

    async def count_admin_tokens(self) -> int: ...

    async def holds_credentials(self) -> bool:
        """Whether any API key or admin token is stored (their digests need the same secret)."""
        ...

    async def secret_fingerprint(self) -> str | None:
        """The recorded fingerprint of the HMAC secret (``modelgate.secret_file``), if any."""
        ...

    async def record_secret_fingerprint(self, fingerprint: str, now: float) -> None:
        """Record (or replace) the fingerprint of the HMAC secret."""
        ...


class LedgerStore(Protocol):
    """Reserve, settle and release (the semantics in this module's docstring)."""

    async def reserve(self, request: ReserveRequest) -> Reservation | Refusal:
        """Atomically hold min(amount, affordable) against balance and cap, if >= minimum."""
        ...

    async def settle(self, usage: UsageRecord) -> Settlement:
        """Charge ``usage.charged_uc`` and release the hold; idempotent. Beyond the hold only what
        is free is charged (``decide_charge``) and the rest is recorded as ``shortfall_uc``.

        Conditional on the reservation being ``pending``; key, account and month come from the
        reservation (the passed record's fields are overwritten with them and with the charge).
        No reservation, or not pending: nothing changes, no record is written, ``applied=False``.
        """
        ...

    async def release(self, usage: UsageRecord) -> Settlement:
        """Charge nothing and free the hold; idempotent (writes the usage record with 0 µc).

        Same conditions as ``settle``; used on failures before upstream work and by the sweeper.
        """
        ...

    async def expired_reservations(self, now: float, limit: int = 100) -> list[tuple[str, str, int, str]]:
        """(request_id, key_id, account_id, month) of pending reservations with ``expires_at < now``,
        oldest expiry first. A read only: the release that follows is what must be conditional."""
        ...

    async def pending_reservation_page(self, after: str, limit: int) -> list[tuple[str, str, int, str]]:
        """(request_id, key_id, account_id, month) of up to ``limit`` pending reservations whose
        request id sorts after ``after``, in request id order (keyset paging: the sweeper lists
        every pending reservation a page at a time). A read only."""
        ...

    async def month_spend(self, key_id: str, month: str) -> tuple[int, int]:
        """(spent_uc, reserved_uc) of a key in a month."""
        ...

    async def window_use(self, subject: str, window: Window, now: float) -> WindowUse:
        """Spent and held in one spend window of a subject (``storage.spend_windows``) at ``now``."""
        ...

    async def pending_reservations(self) -> int: ...

    async def reservation_stats(self) -> tuple[int, float | None]:
        """(pending reservations, ``created_at`` of the oldest or None): database-wide."""
        ...

    def observe_ledger(self, observer: LedgerObserver | None) -> None:
        """Report every ledger write transaction to ``observer`` (metrics)."""
        ...


class LedgerObserver(Protocol):
    def ledger_committed(self, seconds: float, operations: int, waited: float = 0.0) -> None:
        """A ledger write transaction of ``operations`` reserves/settles/releases committed (or
        failed) after ``seconds``, having waited ``waited`` seconds for company before it left
        (PostgreSQL under load, ``database_batch_wait_seconds``). May be called from a store's
        worker thread."""
        ...


class UsageStore(Protocol):
    """Usage records: one per request, written by settle or release."""

    async def usage_summary(
        self, month: str, *, account_id: int | None = None, key_id: str | None = None
    ) -> UsageSummary: ...
    async def usage_records(
        self, month: str, *, account_id: int | None = None, key_id: str | None = None, limit: int = 100
    ) -> list[UsageRecord]: ...
    async def rebuild_rollups(self) -> int:
        """Recompute the usage rollups from the records there are (one transaction that keeps
        ledger writes out meanwhile); the number of key rollup rows written."""
        ...

    async def delete_usage_before(self, cutoff: float, limit: int) -> int:
        """Delete up to ``limit`` usage records that started before ``cutoff``, oldest first (the
        rollups keep their sums); the number deleted."""
        ...


#: Connections a store with a pool (PostgreSQL) opens at most by default (``database_pool_size``).
DEFAULT_POOL_SIZE = 20
#: How long a batch of ledger writes may wait for company under load, by default
#: (``database_batch_wait_seconds``; ``storage.postgres_batches``).
DEFAULT_BATCH_WAIT_SECONDS = 0.001


@dataclass(frozen=True, slots=True)
class ConnectionUse:
    """A store's connection pool now (``Store.connections``)."""

    #: Connections checked out (the batchers' kept ones included).
    in_use: int
    #: Open connections waiting in the pool.
    idle: int
    #: The most the pool opens (``database_pool_size``).
    limit: int


class Store(
    AccountStore,
    KeyStore,
    AdminTokenStore,
    LedgerStore,
    UsageStore,
    UsageReports,
    ResponseStore,
    AuditStore,
    Protocol,
):
    """Everything durable, as one engine implements it. Consumers ask for the narrow protocols
    above; implementations must pass ``tests/storage/test_contract.py``."""

    async def migrate(self) -> None: ...
    async def close(self) -> None: ...
    async def ping(self) -> None:
        """Raise StorageError when the database cannot answer."""
        ...

    def connections(self) -> ConnectionUse | None:
        """The connection pool's use now; None for an engine without a pool (SQLite)."""
        ...
