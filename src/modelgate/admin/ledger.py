"""An account's money, as its owner and the operator read it: the ledger (top-ups and
adjustments with their notes and actors), adjustments, the monthly statement, and the
``balance.low`` alert threshold.

Statement of a UTC month M (docs/people.md):
``closing_uc = opening_uc + top_ups_uc - usage_uc + adjustments_uc``, where ledger entries count
in the month they were made and usage in the month its request started (its hold's month);
``opening_uc`` is the same sum over everything before M. For the current month ``closing_uc``
equals the account's ``balance_uc`` to the micro-credit (one snapshot); money held by requests
in flight is not in it (``held_uc`` says how much; ``available_uc = closing_uc - held_uc``). A
past month's figures are final once its last holds ended (at most
``billing.reservation_ttl_seconds`` into the next month).

Visibility as everywhere: another account's id is the same 404 as a missing one.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import StringConstraints
from starlette.requests import Request
from starlette.responses import Response

from modelgate.admin import query, schemas
from modelgate.admin.auth import Principal
from modelgate.admin.context import AdminContext
from modelgate.admin.csv_export import csv_response, wants_csv
from modelgate.admin.http import (
    Handler,
    Route,
    bad_request,
    json_response,
    parse_body,
    path_int,
    query_int,
    route,
)
from modelgate.clock import month_of
from modelgate.management import ManagementError, format_credits, parse_credits
from modelgate.storage.audit import LedgerEntry, StatementFigures
from modelgate.storage.records import MAX_UC

DEFAULT_ENTRIES = 50
MAX_ENTRIES = 500
LEDGER_COLUMNS = ("id", "created_at", "kind", "amount_uc", "amount", "note", "actor")
STATEMENT_COLUMNS = ("account_id", "month", "line", "amount_uc", "amount")


class Adjustment(schemas.Body):
    """A correction of either sign, with the reason: give ``amount`` (credits, ``-`` for a debit)
    or ``amount_uc``."""

    amount: Annotated[str, StringConstraints(max_length=40)] | None = None
    amount_uc: int | None = None
    note: Annotated[str, StringConstraints(min_length=1, max_length=500)]


class LowBalance(schemas.Body):
    """The ``balance.low`` alert threshold: ``low_balance`` (credits) or ``low_balance_uc``;
    both null: back to the configured default (``alerts.low_balance_uc``)."""

    low_balance: Annotated[str, StringConstraints(max_length=40)] | None = None
    low_balance_uc: int | None = None


def _signed_amount(body: Adjustment) -> int:
    if (body.amount is None) == (body.amount_uc is None):
        raise bad_request("amount: give either amount or amount_uc")
    if body.amount_uc is not None:
        if abs(body.amount_uc) > MAX_UC:
            raise bad_request(f"amount_uc: at most {MAX_UC} either way")
        return body.amount_uc
    assert body.amount is not None
    text = body.amount.strip()
    negative = text.startswith("-")
    try:
        micro = parse_credits(text.removeprefix("-"), "amount")
    except ManagementError as exc:
        raise bad_request(str(exc)) from None
    return -micro if negative else micro


def ledger_view(entry: LedgerEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "created_at": schemas.when(entry.created_at),
        "kind": entry.kind,
        **schemas.money("amount", entry.amount_uc),
        "note": entry.note,
        "actor": entry.actor,
    }


def _signed_credits(micro: int) -> str:
    return ("-" if micro < 0 else "") + format_credits(abs(micro))


def month_bounds(month: str) -> tuple[float, float]:
    year, number = int(month[:4]), int(month[5:])
    start = datetime(year, number, 1, tzinfo=UTC)
    end = datetime(year + number // 12, number % 12 + 1, 1, tzinfo=UTC)
    return start.timestamp(), end.timestamp()


def statement_lines(f: StatementFigures) -> dict[str, int]:
    opening = f.top_ups_before_uc + f.adjustments_before_uc - f.usage_before_uc
    closing = opening + f.top_ups_uc - f.usage_uc + f.adjustments_uc
    return {
        "opening_uc": opening,
        "top_ups_uc": f.top_ups_uc,
        "usage_uc": f.usage_uc,
        "adjustments_uc": f.adjustments_uc,
        "closing_uc": closing,
    }


class LedgerEndpoints:
    def __init__(self, context: AdminContext) -> None:
        self.context = context
        self.store = context.services.audit

    async def ledger(self, request: Request, principal: Principal) -> Response:
        """``GET /accounts/{id}/ledger``: top-ups and adjustments, newest first (keyset pages)."""
        account = await self.context.account(principal, path_int(request, "account_id", "account"))
        principal.require_owner()  # owners and operators: a member sees no account money
        before = query_int(request, "cursor")
        if wants_csv(request):
            most = self.context.settings.admin.csv_max_rows
            entries = await self.store.ledger_page(account.id, limit=most + 1, before_id=before)
            if len(entries) > most:
                raise bad_request(f"more than admin.csv_max_rows ({most}) entries")
            rows = [
                (
                    e.id,
                    schemas.when(e.created_at),
                    e.kind,
                    e.amount_uc,
                    _signed_credits(e.amount_uc),
                    e.note,
                    e.actor,
                )
                for e in entries
            ]
            return csv_response(LEDGER_COLUMNS, rows, f"ledger-{account.id}.csv")
        limit = query.bounded_int(request, "limit", DEFAULT_ENTRIES, 1, MAX_ENTRIES)
        entries = await self.store.ledger_page(account.id, limit=limit + 1, before_id=before)
        page, more = entries[:limit], len(entries) > limit
        return json_response(
            {
                "account_id": account.id,
                "data": [ledger_view(e) for e in page],
                "next_cursor": str(page[-1].id) if more and page else None,
            }
        )

    async def adjust(self, request: Request, principal: Principal) -> Response:
        """``POST /accounts/{id}/adjustments`` (operator): a signed correction with its note."""
        account = await self.context.account(principal, path_int(request, "account_id", "account"))
        principal.require_operator()
        body = await parse_body(request, Adjustment)
        updated = await self.context.management.adjust_credits(account, _signed_amount(body), body.note)
        return json_response(schemas.account_view(updated))

    async def statement(self, request: Request, principal: Principal) -> Response:
        """``GET /accounts/{id}/statement?month=YYYY-MM``: opening, movements and closing."""
        account = await self.context.account(principal, path_int(request, "account_id", "account"))
        principal.require_owner()  # owners and operators: a member sees no account money
        current = month_of(self.context.now())
        month = query.month(request, current)
        if month > current:
            raise bad_request(f"month: {month} has not started yet")
        if int(month[:4]) < query.FIRST_YEAR:
            raise bad_request(f"month: a year from {query.FIRST_YEAR}")
        since, until = month_bounds(month)
        figures = await self.store.statement_figures(account.id, since, until, month)
        lines = statement_lines(figures)
        if wants_csv(request):
            rows = [
                (account.id, month, name.removesuffix("_uc"), v, _signed_credits(v))
                for name, v in lines.items()
            ]
            return csv_response(STATEMENT_COLUMNS, rows, f"statement-{account.id}-{month}.csv")
        view: dict[str, Any] = {"account_id": account.id, "month": month, "requests": figures.requests}
        for name, value in lines.items():
            view.update(schemas.money(name.removesuffix("_uc"), value))
            view[name.removesuffix("_uc")] = _signed_credits(value)
        view["current"] = month == current
        if month == current:
            # Same snapshot as the sums: closing_uc == balance_uc exactly.
            view.update(schemas.money("balance", figures.balance_uc))
            view.update(schemas.money("held", figures.reserved_uc))
            view.update(schemas.money("available", figures.balance_uc - figures.reserved_uc))
        return json_response(view)

    async def alerts_get(self, request: Request, principal: Principal) -> Response:
        account = await self.context.account(principal, path_int(request, "account_id", "account"))
        return json_response(self._alerts_view(account.id, account.low_balance_uc))

    async def alerts_put(self, request: Request, principal: Principal) -> Response:
        """``PUT /accounts/{id}/alerts`` (operator): the account's ``balance.low`` threshold."""
        account = await self.context.account(principal, path_int(request, "account_id", "account"))
        principal.require_operator()
        body = await parse_body(request, LowBalance)
        if body.low_balance is not None and body.low_balance_uc is not None:
            raise bad_request("low_balance: give either low_balance or low_balance_uc, not both")
        threshold = body.low_balance_uc
        if body.low_balance is not None:
            try:
                threshold = parse_credits(body.low_balance, "low_balance")
            except ManagementError as exc:
                raise bad_request(str(exc)) from None
        updated = await self.context.management.set_low_balance(account, threshold)
        monitor = self.context.services.alerts
        if monitor is not None:  # this process at once; the others at their next scan
            if threshold is None:
                monitor.thresholds.pop(updated.id, None)
            else:
                monitor.thresholds[updated.id] = threshold
        return json_response(self._alerts_view(updated.id, updated.low_balance_uc))

    def _alerts_view(self, account_id: int, own: int | None) -> dict[str, Any]:
        default = self.context.settings.alerts.low_balance_uc
        return {
            "account_id": account_id,
            **schemas.money("low_balance", own),
            **schemas.money("effective_low_balance", own if own is not None else default),
        }

    def routes(self, prefix: str, authed: Callable[[Any], Handler]) -> list[Route]:
        base = f"{prefix}/accounts/{{account_id}}"
        return [
            route(f"{base}/ledger", {"GET": authed(self.ledger)}),
            route(f"{base}/adjustments", {"POST": authed(self.adjust)}),
            route(f"{base}/statement", {"GET": authed(self.statement)}),
            route(f"{base}/alerts", {"GET": authed(self.alerts_get), "PUT": authed(self.alerts_put)}),
        ]
