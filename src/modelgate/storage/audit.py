"""The audit log and the account ledger as stored: records, the drafts a write completes inside its
own transaction, and the ``AuditStore`` protocol both engines implement.

An audited write (``AccountStore.top_up``, ``KeyStore.update_key``, …) takes an ``AuditDraft``
and appends the entry in the same transaction as the change: a change without its entry, or an
entry without its change, cannot be committed. The log is append-only: nothing in the code
updates or deletes an entry, and both engines refuse it with a trigger.

The ledger is the ``topups`` table: top-ups (positive) and adjustments (either sign) with their
note and actor. ``balance_uc == Σ ledger amounts − Σ usage.charged_uc`` for every account.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar

R = TypeVar("R")
#: A JSON object describing a record: no secret, no digest (``audit.describe`` builds them).
State = dict[str, Any]
LedgerKind = Literal["topup", "adjustment"]


@dataclass(frozen=True, slots=True)
class AuditEntry:
    at: float
    #: The admin token id, ``cli``, or (later) a person.
    actor: str
    #: ``account.create``, ``account.topup``, ``key.rotate``, … (docs/people.md lists them).
    action: str
    #: What changed, as ``kind:id`` (``account:3``, ``key:key_…``, ``token:tok_…``).
    target: str
    #: The account the target belongs to (None: an operator-wide change); account tokens see
    #: exactly the entries of their own account.
    account_id: int | None
    before: State | None
    after: State | None
    request_id: str = ""
    client: str = ""
    #: Assigned by the database (0 until written); increasing, the keyset of the log's pages.
    id: int = 0


@dataclass(frozen=True, slots=True)
class Subject:
    """What a record is in the log: its target, its account, and its state as shown."""

    target: str
    account_id: int | None
    state: State


@dataclass(frozen=True, slots=True)
class AuditDraft(Generic[R]):
    """An entry waiting for the record its write produces: the write calls ``entry`` with the
    record as committed, inside its transaction."""

    at: float
    actor: str
    action: str
    describe: Callable[[R], Subject]
    #: The state before the change (None for a creation).
    before: State | None = None
    #: Facts of the change itself, merged into ``after`` (a top-up's amount and note).
    detail: Mapping[str, Any] = field(default_factory=dict)
    request_id: str = ""
    client: str = ""

    def entry(self, record: R) -> AuditEntry:
        subject = self.describe(record)
        return AuditEntry(
            at=self.at,
            actor=self.actor,
            action=self.action,
            target=subject.target,
            account_id=subject.account_id,
            before=self.before,
            after={**subject.state, **self.detail},
            request_id=self.request_id,
            client=self.client,
        )


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """Which entries: every field that is not None must match."""

    account_id: int | None = None
    action: str | None = None
    actor: str | None = None
    target: str | None = None
    #: ``at >= since``
    since: float | None = None
    #: ``at < until``
    until: float | None = None


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    id: int
    account_id: int
    kind: LedgerKind
    #: Positive for a top-up; either sign for an adjustment.
    amount_uc: int
    note: str
    actor: str
    created_at: float


@dataclass(frozen=True, slots=True)
class StatementFigures:
    """One account's movements, in µc: everything before ``since`` and everything within
    ``[since, until)``. Ledger entries count by their time, usage by its ``month`` (the month its
    hold was made in: ``month_of(created_at)``)."""

    top_ups_before_uc: int
    adjustments_before_uc: int
    usage_before_uc: int
    top_ups_uc: int
    adjustments_uc: int
    usage_uc: int
    requests: int
    #: The account's balance and holds, read in the same snapshot as the sums above.
    balance_uc: int = 0
    reserved_uc: int = 0


class AuditStore(Protocol):
    async def append_audit(self, entry: AuditEntry) -> int:
        """Append one entry on its own (a write with no record of its own to change); its id."""
        ...

    async def audit_page(
        self, where: AuditFilter, *, limit: int, before_id: int | None = None
    ) -> list[AuditEntry]:
        """Newest first: up to ``limit`` entries with ``id < before_id`` (keyset paging)."""
        ...

    async def ledger_page(
        self, account_id: int, *, limit: int, before_id: int | None = None
    ) -> list[LedgerEntry]:
        """An account's top-ups and adjustments, newest first, ``id < before_id``."""
        ...

    async def statement_figures(
        self, account_id: int, since: float, until: float, month: str
    ) -> StatementFigures:
        """The account's movements before and within a month (``month`` is ``since``'s)."""
        ...

    async def claim_alert(self, event: str, subject: str, window: str, now: float) -> bool:
        """Record that the alert ``(event, subject, window)`` is sent; True for the first claim
        only, whichever process or instance asks (the alerts' deduplication)."""
        ...
