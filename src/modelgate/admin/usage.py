"""Usage endpoints: the monthly summary, the filtered and paged usage log with its CSV export,
per-day totals by model, and the keys that spent most. Each JSON answer carries an ``ETag``, and a
poller that sends it back gets 304 while the answer is unchanged (``admin.conditional``).

Scope: an account token sees its own account; an operator sees one account (``account_id``),
one key (``key_id``) or everything; a member sees the records of their own keys (all of them, or
one with ``key_id``). Filters narrow within the scope.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from modelgate.admin import query, schemas
from modelgate.admin.auth import Principal
from modelgate.admin.conditional import RecentTags
from modelgate.admin.context import AdminContext
from modelgate.admin.http import NO_STORE, bad_request, query_int
from modelgate.management import format_credits
from modelgate.storage.base import UsageRecord
from modelgate.storage.reports import KeySpend, UsageCursor, UsageFilter

DEFAULT_RECORDS = 50
DAY_SECONDS = 86_400
MAX_RECORDS = 500
#: Records fetched per query while streaming a CSV export.
CSV_BATCH = 1000
CSV_COLUMNS = (
    "request_id",
    "created_at",
    "finished_at",
    "account_id",
    "key_id",
    "endpoint",
    "model",
    "status",
    "input_tokens",
    "output_tokens",
    "cache_creation_tokens",
    "cache_read_tokens",
    "cache_write_1h_tokens",
    "web_search_requests",
    "charged_uc",
    "charged",
)
#: A spreadsheet reads a cell starting with one of these as a formula (CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def _csv_row(record: UsageRecord) -> list[Any]:
    return [
        _cell(v)
        for v in (
            record.request_id,
            schemas.when(record.created_at),
            schemas.when(record.finished_at),
            record.account_id,
            record.key_id,
            record.endpoint,
            record.model,
            record.status,
            record.input_tokens,
            record.output_tokens,
            record.cache_creation_tokens,
            record.cache_read_tokens,
            record.cache_write_1h_tokens,
            record.web_search_requests,
            record.charged_uc,
            format_credits(record.charged_uc),
        )
    ]


class UsageEndpoints:
    def __init__(self, context: AdminContext) -> None:
        self.context = context
        self.usage = context.services.usage
        self.reports = context.services.reports
        self.recent = RecentTags(context.clock.steady, lambda: context.settings.admin.report_recheck_seconds)

    async def summary(self, request: Request, principal: Principal) -> Response:
        """``GET /usage``: the month's totals and the latest records of a key, an account or all."""
        if (unchanged := self.recent.unchanged(request, principal.token_id)) is not None:
            return unchanged
        month = self.context.month(request)
        key_id = request.query_params.get("key_id") or None
        account_id = query_int(request, "account_id")
        limit = query_int(request, "limit")
        limit = DEFAULT_RECORDS if limit is None else min(limit, MAX_RECORDS)
        if key_id is not None and account_id is not None:
            raise bad_request("give at most one of key_id and account_id")
        scope: dict[str, Any]
        if key_id is not None:
            key_id = (await self.context.key(principal, key_id)).id
            scope = {"type": "key", "id": key_id}
        elif account_id is not None or principal.account_id is not None:
            target = account_id if account_id is not None else principal.account_id
            assert target is not None
            account_id = (await self.context.account(principal, target)).id
            scope = {"type": "account", "id": account_id}
        else:
            scope = {"type": "all", "id": None}
        summary = await self.usage.usage_summary(month, account_id=account_id, key_id=key_id)
        owner = None if key_id is not None else self.context.member_owner(principal)
        if owner is not None:
            # The account's totals, but the latest records of the member's own keys only (others
            # name keys): filtered in the database, so there are ``limit`` of them when there are.
            since, until = _month_range(month)
            where = UsageFilter(account_id=account_id, since=since, until=until, owner=owner)
            records = (await self.reports.usage_page(where, limit=limit)).records if limit > 0 else []
        else:
            records = await self.usage.usage_records(month, account_id=account_id, key_id=key_id, limit=limit)
        return self.recent.answer(
            request,
            principal.token_id,
            {
                "month": month,
                "scope": scope,
                "summary": schemas.usage_summary_view(summary),
                "records": [schemas.usage_record_view(r) for r in records],
            },
        )

    async def filter_of(self, request: Request, principal: Principal) -> UsageFilter:
        account_id, key_id = await self.context.scope(principal, request)
        since, until = query.date_range(request)
        return UsageFilter(
            account_id=account_id,
            key_id=key_id,
            model=query.label(request, "model"),
            endpoint=query.label(request, "endpoint"),
            status=query.label(request, "status"),
            since=since,
            until=until,
            # A member without key_id: their own keys' records, never another's (with key_id,
            # ``scope`` has already refused a key that is not theirs).
            owner=None if key_id is not None else self.context.member_owner(principal),
        )

    def retained(self, where: UsageFilter) -> UsageFilter:
        """``where`` limited to the whole UTC days whose records ``usage.retention_days`` keeps: the
        counts come from the rollups, which keep deleted records' sums (the day the cut falls in
        is left out, so a count never includes a deleted record)."""
        days = self.context.settings.usage.retention_days
        if days <= 0:
            return where
        first_whole_day = math.ceil((self.context.now() - days * DAY_SECONDS) / DAY_SECONDS) * DAY_SECONDS
        if where.since is None or where.since < first_whole_day:
            return replace(where, since=float(first_whole_day))
        return where

    async def records(self, request: Request, principal: Principal) -> Response:
        """``GET /usage/records``: one page of the filtered log, newest first. The first page
        (no ``cursor``) also carries the number of matching records and the facets."""
        if (unchanged := self.recent.unchanged(request, principal.token_id)) is not None:
            return unchanged
        where = await self.filter_of(request, principal)
        limit = query.bounded_int(request, "limit", DEFAULT_RECORDS, 1, MAX_RECORDS)
        after = query.cursor(request)
        page = await self.reports.usage_page(where, limit=limit, after=after)
        body: dict[str, Any] = {
            "data": [schemas.usage_record_view(r) for r in page.records],
            "next_cursor": query.cursor_text(page.next),
        }
        if after is None:
            facets = await self.reports.usage_facets(where)
            body["total"] = await self.reports.usage_count(self.retained(where))
            body["facets"] = {
                "models": list(facets.models),
                "endpoints": list(facets.endpoints),
                "statuses": list(facets.statuses),
            }
        return self.recent.answer(request, principal.token_id, body)

    async def records_csv(self, request: Request, principal: Principal) -> Response:
        """``GET /usage/records.csv``: every record of the filter, streamed in batches (bounded
        memory); more than ``admin.csv_max_rows`` is refused before anything is sent."""
        where = await self.filter_of(request, principal)
        limit = self.context.settings.admin.csv_max_rows
        total = await self.reports.usage_count(self.retained(where))
        if total > limit:
            raise bad_request(
                f"{total} records match; a CSV export holds at most {limit} (admin.csv_max_rows): narrow the filter"
            )
        return StreamingResponse(
            self._csv(where),
            media_type="text/csv; charset=utf-8",
            headers={**NO_STORE, "content-disposition": f'attachment; filename="{_filename(request)}"'},
        )

    async def _csv(self, where: UsageFilter) -> AsyncIterator[str]:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\r\n")
        writer.writerow(CSV_COLUMNS)
        after: UsageCursor | None = None
        while True:
            page = await self.reports.usage_page(where, limit=CSV_BATCH, after=after)
            writer.writerows(_csv_row(r) for r in page.records)
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
            if page.next is None:
                return
            after = page.next

    async def daily(self, request: Request, principal: Principal) -> Response:
        """``GET /usage/daily``: per UTC day and model in a month, for the overview's charts."""
        if (unchanged := self.recent.unchanged(request, principal.token_id)) is not None:
            return unchanged
        month = self.context.month(request)
        account_id, key_id = await self.context.scope(principal, request)
        days = await self.reports.usage_daily(month, account_id=account_id, key_id=key_id)
        return self.recent.answer(
            request, principal.token_id, {"month": month, "data": [schemas.daily_view(d) for d in days]}
        )

    async def top_keys(self, request: Request, principal: Principal) -> Response:
        """``GET /usage/top-keys``: the keys that spent most in a month."""
        if (unchanged := self.recent.unchanged(request, principal.token_id)) is not None:
            return unchanged
        month = self.context.month(request)
        account_id, _ = await self.context.scope(principal, request)
        limit = query.bounded_int(request, "limit", 5, 1, 50)
        if principal.is_member:
            spenders = (await self._own_spend(principal, month))[:limit]
        else:
            spenders = await self.reports.top_keys(month, account_id=account_id, limit=limit)
        return self.recent.answer(
            request, principal.token_id, {"month": month, "data": [schemas.top_key_view(s) for s in spenders]}
        )

    async def _own_spend(self, principal: Principal, month: str) -> list[KeySpend]:
        """A member's own keys that spent in ``month``, in ``top_keys`` order (charged, requests,
        id): their keys are few, so each one's month is summed on its own."""
        found: list[KeySpend] = []
        for key in await self.context.own_keys(principal):
            total = await self.usage.usage_summary(month, account_id=key.account_id, key_id=key.id)
            if total.requests == 0 and total.charged_uc == 0:
                continue
            tokens = (
                total.input_tokens
                + total.output_tokens
                + total.cache_creation_tokens
                + total.cache_read_tokens
            )
            found.append(KeySpend(key.id, key.account_id, key.name, total.requests, tokens, total.charged_uc))
        found.sort(key=lambda s: (-s.charged_uc, -s.requests, s.key_id))
        return found


def _month_range(month: str) -> tuple[float, float]:
    """``[start, end)`` of a UTC month ``YYYY-MM`` (already validated), in seconds."""
    # Years 0000 and 9999 pass the pattern but not ``datetime``: no record is that old or new, so
    # the range of a year within bounds finds the same (nothing).
    year, number = min(max(int(month[:4]), 1), 9998), int(month[5:7])
    start = datetime(year, number, 1, tzinfo=UTC)
    end = datetime(year + number // 12, number % 12 + 1, 1, tzinfo=UTC)
    return start.timestamp(), end.timestamp()


def _filename(request: Request) -> str:
    """``modelgate-usage[-from][-to].csv`` from parameters already validated as dates."""
    parts = ["modelgate-usage"]
    for name in ("from", "to"):
        value = request.query_params.get(name)
        if value:
            parts.append(value)
    return "-".join(parts) + ".csv"
