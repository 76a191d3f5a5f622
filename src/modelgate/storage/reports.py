"""Read-side views of the usage records, for the dashboard and the admin API: a filtered, paged
usage log, per-day totals by model, the keys that spent most, and per-key month activity.

Every engine implements ``UsageReports`` (checked by ``tests/storage/test_contract_reports.py``)
with the SQL built here, so both engines filter, order and page identically.

Invariant the queries rely on: a usage record's ``month`` is the UTC month of its ``created_at``
(both are the request's start, carried by its hold; the sweeper keeps the hold's). A date range
therefore also bounds ``month``, which lets the ``(account_id|key_id, month, created_at)`` indexes
narrow the scan; ``created_at`` stays the exact filter.

Paging is by keyset, newest first: ``(created_at, request_id)`` of the last record shown is the
cursor of the next page, so pages stay stable while new records arrive and cost the same at any
depth.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from modelgate.clock import month_of
from modelgate.storage.records import UsageRecord


@dataclass(frozen=True, slots=True)
class UsageFilter:
    """Which usage records: every field that is not None must match."""

    account_id: int | None = None
    key_id: str | None = None
    model: str | None = None
    endpoint: str | None = None
    status: str | None = None
    #: ``created_at >= since``
    since: float | None = None
    #: ``created_at < until``
    until: float | None = None
    #: Only the keys this person created (``key_owners``): a member's own keys.
    owner: str | None = None


@dataclass(frozen=True, slots=True)
class UsageCursor:
    """Where the next page starts: records strictly older than this one (ties by request id)."""

    created_at: float
    request_id: str


@dataclass(frozen=True, slots=True)
class UsagePage:
    records: list[UsageRecord]
    #: None on the last page.
    next: UsageCursor | None


@dataclass(frozen=True, slots=True)
class UsageFacets:
    """The distinct models, endpoints and statuses among records of a scope and date range."""

    models: tuple[str, ...]
    endpoints: tuple[str, ...]
    statuses: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DailyUsage:
    """One model's usage on one UTC day."""

    day: str
    model: str
    requests: int
    input_tokens: int
    output_tokens: int
    cache_tokens: int
    charged_uc: int


@dataclass(frozen=True, slots=True)
class KeySpend:
    key_id: str
    account_id: int
    #: The key's current name ("" when it has none).
    name: str
    requests: int
    tokens: int
    charged_uc: int


@dataclass(frozen=True, slots=True)
class KeyActivity:
    """A key's spend and holds in one month, and the start of its latest recorded request."""

    spent_uc: int
    reserved_uc: int
    last_used_at: float | None


class UsageReports(Protocol):
    async def usage_page(
        self, where: UsageFilter, *, limit: int, after: UsageCursor | None = None
    ) -> UsagePage:
        """Up to ``limit`` records newest first, starting after ``after``."""

    async def usage_count(self, where: UsageFilter) -> int: ...

    async def usage_facets(self, where: UsageFilter) -> UsageFacets:
        """Facets of the records in ``where``'s scope and dates (its model, endpoint and status
        filters are ignored, so a filter's own choices stay listed)."""

    async def usage_daily(
        self, month: str, *, account_id: int | None = None, key_id: str | None = None
    ) -> list[DailyUsage]:
        """Per UTC day and model, ordered by day then model."""

    async def top_keys(self, month: str, *, account_id: int | None = None, limit: int = 5) -> list[KeySpend]:
        """Keys by spend in ``month``, highest first (ties: more requests, then key id)."""

    async def key_activity(
        self, month: str, account_id: int | None = None, key_ids: list[str] | None = None
    ) -> dict[str, KeyActivity]:
        """Every key of the account (or every key), or only ``key_ids`` when given (a page of
        keys), with its ``month`` spend and last use."""


class Params:
    """Collects query arguments and hands out the engine's placeholder for each.

    Call it in the order the placeholders appear in the SQL text: SQLite's ``?`` are positional.
    """

    def __init__(self, placeholder: Callable[[int], str]) -> None:
        self.values: list[Any] = []
        self._placeholder = placeholder

    def __call__(self, value: Any) -> str:
        self.values.append(value)
        return self._placeholder(len(self.values))


def qmark(_: int) -> str:
    return "?"


def dollar(n: int) -> str:
    return f"${n}"


def owned_keys(person_id: str, p: Params, column: str = "key_id") -> str:
    """The condition that ``column`` names a key ``person_id`` created (``key_owners``): a
    member's own keys, on both engines."""
    return f"{column} IN (SELECT key_id FROM key_owners WHERE person_id = {p(person_id)})"


def usage_where(where: UsageFilter, p: Params, *, facets: bool = False) -> str:
    """The SQL condition of ``where`` (``TRUE`` for none); ``facets`` leaves out the faceted columns."""
    terms: list[str] = []
    if where.account_id is not None:
        terms.append(f"account_id = {p(where.account_id)}")
    if where.key_id is not None:
        terms.append(f"key_id = {p(where.key_id)}")
    if where.owner is not None:
        terms.append(owned_keys(where.owner, p))
    if where.since is not None:
        terms.append(f"month >= {p(month_of(where.since))}")
        terms.append(f"created_at >= {p(where.since)}")
    if where.until is not None:
        terms.append(f"month <= {p(month_of(where.until))}")
        terms.append(f"created_at < {p(where.until)}")
    if not facets:
        for column in ("model", "endpoint", "status"):
            value = getattr(where, column)
            if value is not None:
                terms.append(f"{column} = {p(value)}")
    return " AND ".join(terms) or "1 = 1"


def page_sql(columns: str, where: UsageFilter, limit: int, after: UsageCursor | None, p: Params) -> str:
    """One page of records, newest first; asks for one record more than ``limit`` to know whether
    another page follows."""
    condition = usage_where(where, p)
    if after is not None:
        older = p(after.created_at)
        tie = p(after.created_at)
        condition += (
            f" AND (created_at < {older} OR (created_at = {tie} AND request_id < {p(after.request_id)}))"
        )
    return (
        f"SELECT {columns} FROM usage_records WHERE {condition} "
        f"ORDER BY created_at DESC, request_id DESC LIMIT {p(limit + 1)}"
    )


def paged(records: list[UsageRecord], limit: int) -> UsagePage:
    if len(records) <= limit:
        return UsagePage(records, None)
    shown = records[:limit]
    return UsagePage(shown, UsageCursor(shown[-1].created_at, shown[-1].request_id))


def facets_sql(where: UsageFilter, p: Params) -> str:
    return (
        "SELECT model, endpoint, status FROM usage_records "
        f"WHERE {usage_where(where, p, facets=True)} GROUP BY model, endpoint, status"
    )


def facets_of(rows: list[tuple[str, str, str]]) -> UsageFacets:
    return UsageFacets(
        models=tuple(sorted({r[0] for r in rows})),
        endpoints=tuple(sorted({r[1] for r in rows})),
        statuses=tuple(sorted({r[2] for r in rows})),
    )


def daily_sql(day_expression: str, month: str, account_id: int | None, key_id: str | None, p: Params) -> str:
    """``day_expression`` turns ``created_at`` into ``YYYY-MM-DD`` (UTC) in the engine's dialect."""
    # Placeholders are taken in the order they appear in the text (SQLite's are positional).
    in_month = f"month = {p(month)}"
    where = usage_where(UsageFilter(account_id=account_id, key_id=key_id), p)
    return (
        f"SELECT {day_expression} AS usage_day, model, COUNT(*), COALESCE(SUM(input_tokens), 0), "
        "COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cache_creation_tokens + cache_read_tokens), 0), "
        f"COALESCE(SUM(charged_uc), 0) FROM usage_records WHERE {in_month} AND {where} "
        "GROUP BY usage_day, model ORDER BY usage_day, model"
    )


def daily_of(rows: list[Any]) -> list[DailyUsage]:
    return [DailyUsage(str(r[0]), str(r[1]), *(int(v) for v in r[2:7])) for r in rows]


def top_keys_sql(month: str, account_id: int | None, limit: int, p: Params) -> str:
    in_month = f"u.month = {p(month)}"
    scope = "" if account_id is None else f" AND u.account_id = {p(account_id)}"
    return (
        "SELECT u.key_id, u.account_id, COALESCE(MAX(k.name), ''), COUNT(*), "
        "COALESCE(SUM(u.input_tokens + u.output_tokens + u.cache_creation_tokens + u.cache_read_tokens), 0), "
        "COALESCE(SUM(u.charged_uc), 0) "
        "FROM usage_records u LEFT JOIN api_keys k ON k.id = u.key_id "
        f"WHERE {in_month}{scope} GROUP BY u.key_id, u.account_id "
        f"ORDER BY SUM(u.charged_uc) DESC, COUNT(*) DESC, u.key_id LIMIT {p(limit)}"
    )


def top_keys_of(rows: list[Any]) -> list[KeySpend]:
    return [KeySpend(r[0], int(r[1]), str(r[2]), int(r[3]), int(r[4]), int(r[5])) for r in rows]


def key_activity_sql(month: str, account_id: int | None, p: Params, key_ids: list[str] | None = None) -> str:
    """Spend and holds of ``month``; last use is the latest start in the key's latest month with
    records. Both inner lookups are index seeks on ``usage_key_month (key_id, month, created_at)``."""
    in_month = f"s.month = {p(month)}"
    terms = [] if account_id is None else [f"k.account_id = {p(account_id)}"]
    if key_ids is not None:
        terms.append(f"k.id IN ({', '.join(p(k) for k in key_ids) or 'NULL'})")
    scope = f" WHERE {' AND '.join(terms)}" if terms else ""
    return (
        "SELECT k.id, COALESCE(s.spent_uc, 0), COALESCE(s.reserved_uc, 0), "
        "(SELECT MAX(u.created_at) FROM usage_records u WHERE u.key_id = k.id AND u.month = "
        "(SELECT MAX(m.month) FROM usage_records m WHERE m.key_id = k.id)) "
        f"FROM api_keys k LEFT JOIN key_month_spend s ON s.key_id = k.id AND {in_month}{scope}"
    )


def key_activity_of(rows: list[Any]) -> dict[str, KeyActivity]:
    return {r[0]: KeyActivity(int(r[1]), int(r[2]), None if r[3] is None else float(r[3])) for r in rows}
