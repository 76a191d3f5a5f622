"""Reports from the usage rollups (migrations sqlite 0013, postgresql 0018), SQL shared by both engines.

``usage_rollups`` holds one row per key, UTC day, model, endpoint and status;
``usage_account_rollups`` the same per account; ``usage_key_month_rollups`` one row per key and
month (top keys). All three are kept by the ledger once per batch, in the transaction that
inserts the batch's records (``storage.rollup_fold``; a trigger per record until sqlite 0016,
postgresql 0021), so a sum over them equals a scan of the records. A report therefore reads
days x models (x endpoints x statuses) rows: the account table when the scope is an account or
everything, the key table for one key, and one row per active key for the top keys.

The rollups know whole UTC days only. A filter whose ``since``/``until`` are not midnights (the
admin API only ever sends midnights) cannot be answered from them: ``answers`` says so, and the
caller scans the records instead.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from modelgate.clock import month_of
from modelgate.storage.records import UsageSummary
from modelgate.storage.reports import (
    DailyUsage,
    KeySpend,
    Params,
    UsageFacets,
    UsageFilter,
    daily_of,
    facets_of,
    owned_keys,
    top_keys_of,
)

_DAY_SECONDS = 86_400
#: The measures as summed in a query: requests, the token kinds, searches, money.
_SUMS = (
    "COALESCE(SUM(requests), 0), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), "
    "COALESCE(SUM(cache_creation_tokens), 0), COALESCE(SUM(cache_read_tokens), 0), "
    "COALESCE(SUM(charged_uc), 0), COALESCE(SUM(web_search_requests), 0)"
)


def _day(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d")


def answers(where: UsageFilter) -> bool:
    """Whether the rollups answer ``where`` exactly: its date bounds, if any, are UTC midnights."""
    return all(bound is None or bound % _DAY_SECONDS == 0 for bound in (where.since, where.until))


def _scope(account_id: int | None, key_id: str | None, p: Params) -> tuple[str, list[str]]:
    """The table that answers a scope, and the scope's conditions on it."""
    if key_id is not None:
        terms = [f"key_id = {p(key_id)}"]
        if account_id is not None:
            terms.append(f"account_id = {p(account_id)}")
        return "usage_rollups", terms
    if account_id is not None:
        return "usage_account_rollups", [f"account_id = {p(account_id)}"]
    return "usage_account_rollups", []


def _filtered(where: UsageFilter, p: Params, *, facets: bool = False) -> tuple[str, str]:
    """Table and condition of a day-aligned filter (``answers``); ``facets`` leaves out the
    faceted columns, as ``reports.usage_where`` does."""
    table, terms = _scope(where.account_id, where.key_id, p)
    if where.owner is not None:  # a member's own keys: summed from the per-key rollups
        table = "usage_rollups"
        terms.append(owned_keys(where.owner, p))
    if where.since is not None:
        terms.append(f"month >= {p(month_of(where.since))}")
        terms.append(f"day >= {p(_day(where.since))}")
    if where.until is not None:
        terms.append(f"month <= {p(month_of(where.until))}")
        terms.append(f"day < {p(_day(where.until))}")
    if not facets:
        for column in ("model", "endpoint", "status"):
            value = getattr(where, column)
            if value is not None:
                terms.append(f"{column} = {p(value)}")
    return table, " AND ".join(terms) or "1 = 1"


def count_sql(where: UsageFilter, p: Params) -> str:
    table, condition = _filtered(where, p)
    return f"SELECT COALESCE(SUM(requests), 0) FROM {table} WHERE {condition}"


def facets_sql(where: UsageFilter, p: Params) -> str:
    table, condition = _filtered(where, p, facets=True)
    return f"SELECT model, endpoint, status FROM {table} WHERE {condition} GROUP BY model, endpoint, status"


def facets(rows: list[Any]) -> UsageFacets:
    return facets_of(rows)


def summary_sql(month: str, account_id: int | None, key_id: str | None, p: Params) -> str:
    """Per model, the month's sums (one row per model; ``summary_of`` adds them up)."""
    table, terms = _scope(account_id, key_id, p)
    condition = " AND ".join([*terms, f"month = {p(month)}"])
    return f"SELECT model, {_SUMS} FROM {table} WHERE {condition} GROUP BY model ORDER BY model"


def summary_of(month: str, rows: list[Any]) -> UsageSummary:
    totals = [0] * 7
    by_model: dict[str, int] = {}
    for row in rows:
        values = [int(v) for v in row[1:8]]
        totals = [a + b for a, b in zip(totals, values, strict=True)]
        by_model[str(row[0])] = values[5]
    requests, input_tokens, output_tokens, cache_creation, cache_read, charged, searches = totals
    return UsageSummary(
        month,
        requests,
        input_tokens,
        output_tokens,
        cache_creation,
        cache_read,
        charged,
        by_model=by_model,
        web_search_requests=searches,
    )


def daily_sql(month: str, account_id: int | None, key_id: str | None, p: Params) -> str:
    table, terms = _scope(account_id, key_id, p)
    condition = " AND ".join([*terms, f"month = {p(month)}"])
    return (
        "SELECT day, model, COALESCE(SUM(requests), 0), COALESCE(SUM(input_tokens), 0), "
        "COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cache_creation_tokens + cache_read_tokens), 0), "
        f"COALESCE(SUM(charged_uc), 0) FROM {table} WHERE {condition} GROUP BY day, model ORDER BY day, model"
    )


def daily(rows: list[Any]) -> list[DailyUsage]:
    return daily_of(rows)


def top_keys_sql(month: str, account_id: int | None, limit: int, p: Params) -> str:
    """The month's spenders from the key-month rollups (one row per key active in the month); the
    key names are joined to the ``limit`` rows kept, not to every row ranked."""
    scope = f"month = {p(month)}"
    if account_id is not None:
        scope += f" AND account_id = {p(account_id)}"
    order = "t.charged_uc DESC, t.requests DESC, t.key_id"
    return (
        "SELECT t.key_id, t.account_id, COALESCE(k.name, ''), t.requests, t.tokens, t.charged_uc FROM "
        f"(SELECT key_id, account_id, requests, tokens, charged_uc FROM usage_key_month_rollups WHERE {scope} "
        f"ORDER BY charged_uc DESC, requests DESC, key_id LIMIT {p(limit)}) t "
        f"LEFT JOIN api_keys k ON k.id = t.key_id ORDER BY {order}"
    )


def top_keys(rows: list[Any]) -> list[KeySpend]:
    return top_keys_of(rows)


#: Recompute both rollups from the records (``modelgate usage rebuild-rollups``); ``{day}`` is the
#: engine's expression of a record's UTC day. Run in one transaction that keeps writers out.
_MEASURES = (
    "requests, input_tokens, output_tokens, cache_creation_tokens, cache_read_tokens, "
    "cache_write_1h_tokens, web_search_requests, charged_uc"
)
_AGGREGATES = (
    "COUNT(*), SUM(input_tokens), SUM(output_tokens), SUM(cache_creation_tokens), SUM(cache_read_tokens), "
    "SUM(cache_write_1h_tokens), SUM(web_search_requests), SUM(charged_uc)"
)


def rebuild_statements(day: str) -> list[str]:
    return [
        "DELETE FROM usage_rollups",
        "DELETE FROM usage_account_rollups",
        "DELETE FROM usage_key_month_rollups",
        f"INSERT INTO usage_rollups (key_id, day, model, endpoint, status, account_id, month, {_MEASURES}) "
        f"SELECT key_id, {day}, model, endpoint, status, MIN(account_id), MIN(month), {_AGGREGATES} "
        "FROM usage_records GROUP BY 1, 2, 3, 4, 5",
        f"INSERT INTO usage_account_rollups (account_id, day, model, endpoint, status, month, {_MEASURES}) "
        f"SELECT account_id, {day}, model, endpoint, status, MIN(month), {_AGGREGATES} "
        "FROM usage_records GROUP BY 1, 2, 3, 4, 5",
        "INSERT INTO usage_key_month_rollups (key_id, month, account_id, requests, tokens, charged_uc) "
        "SELECT key_id, month, MIN(account_id), COUNT(*), "
        "SUM(input_tokens + output_tokens + cache_creation_tokens + cache_read_tokens), SUM(charged_uc) "
        "FROM usage_records GROUP BY 1, 2",
    ]
