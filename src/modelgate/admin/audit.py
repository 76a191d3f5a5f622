"""``GET /admin/api/audit``: the audit log, newest first, filtered, paged by keyset, as JSON or CSV.

Operators see every entry; an account token sees exactly the entries of its own account (another
account's entries, and operator-wide ones such as issuing an operator token, are invisible: a
filter naming them answers an empty page, an ``account_id`` of another account the same 404 as a
missing one). Nothing here changes or deletes an entry: the log is append-only.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from modelgate.admin import query, schemas
from modelgate.admin.auth import Principal
from modelgate.admin.context import AdminContext
from modelgate.admin.csv_export import csv_response, wants_csv
from modelgate.admin.http import Handler, Route, bad_request, json_response, query_int, route
from modelgate.audit.actor import Actor
from modelgate.storage.audit import AuditEntry, AuditFilter

DEFAULT_ENTRIES = 50
MAX_ENTRIES = 500
#: Entries fetched per query while building a CSV export.
CSV_BATCH = 1000
CSV_COLUMNS = (
    "id",
    "at",
    "actor",
    "action",
    "target",
    "account_id",
    "request_id",
    "client",
    "before",
    "after",
)
_ACTION = re.compile(r"[a-z_]{1,40}(\.[a-z_]{1,40}){0,3}")
_NAME = re.compile(r"[A-Za-z0-9._:@/+-]{1,200}")
#: An actor: a token id, ``cli``, or a person as recorded (``Name <email>``, any script).
_ACTOR = re.compile(r"[^\x00-\x1f\x7f]{1,200}")
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,100}")
_DATE_TIME = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?)?(Z|[+-][0-9]{2}:[0-9]{2})?"
)


def request_actor(request: Request, token_id: str) -> Actor:
    """The actor of an admin request: its token, a request id (the client's ``x-request-id``
    when it is a plain short id, else a new one) and the socket's client address."""
    given = request.headers.get("x-request-id", "")
    request_id = given if _REQUEST_ID.fullmatch(given) else "req_" + secrets.token_hex(12)
    client = request.client.host if request.client is not None else ""
    return Actor(token_id, request_id, client)


def moment(request: Request, name: str) -> float | None:
    """An RFC 3339 date-time (``2026-11-01T00:00:00Z``) or a UTC date (``2026-11-01``)."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if len(raw) > 40 or not _DATE_TIME.fullmatch(raw):
        raise bad_request(f"{name}: an RFC 3339 date-time (2026-11-01T00:00:00Z) or a date (2026-11-01)")
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise bad_request(f"{name}: not a valid date or time") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    if not query.FIRST_YEAR <= parsed.year <= query.LAST_YEAR:
        raise bad_request(f"{name}: a year from {query.FIRST_YEAR} to {query.LAST_YEAR}")
    return parsed.timestamp()


def _matching(request: Request, name: str, pattern: re.Pattern[str], what: str) -> str | None:
    raw = query.text(request, name, 200)
    if raw is not None and not pattern.fullmatch(raw):
        raise bad_request(f"{name}: {what}")
    return raw


def entry_view(entry: AuditEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "at": schemas.when(entry.at),
        "at_epoch": entry.at,
        "actor": entry.actor,
        "action": entry.action,
        "target": entry.target,
        "account_id": entry.account_id,
        "before": entry.before,
        "after": entry.after,
        "request_id": entry.request_id,
        "client": entry.client,
    }


def _csv_row(entry: AuditEntry) -> list[Any]:
    return [
        entry.id,
        schemas.when(entry.at),
        entry.actor,
        entry.action,
        entry.target,
        entry.account_id,
        entry.request_id,
        entry.client,
        "" if entry.before is None else orjson.dumps(entry.before, option=orjson.OPT_SORT_KEYS).decode(),
        "" if entry.after is None else orjson.dumps(entry.after, option=orjson.OPT_SORT_KEYS).decode(),
    ]


class AuditEndpoints:
    def __init__(self, context: AdminContext) -> None:
        self.context = context
        self.store = context.services.audit

    async def filter_of(self, request: Request, principal: Principal) -> AuditFilter:
        principal.require_owner()  # the log names every key, cap and person of the account
        account_id = query_int(request, "account_id")
        if account_id is None:
            account_id = principal.account_id
        if account_id is not None:
            account_id = (await self.context.account(principal, account_id)).id
        since, until = moment(request, "since"), moment(request, "until")
        if since is not None and until is not None and since > until:
            raise bad_request("since: must not be after until")
        return AuditFilter(
            account_id=account_id,
            action=_matching(request, "action", _ACTION, "an action such as key.rotate"),
            actor=_matching(request, "actor", _ACTOR, "a token id (tok_…), cli, or a person"),
            target=_matching(request, "target", _NAME, "kind:id, such as key:key_… or account:3"),
            since=since,
            until=until,
        )

    async def entries(self, request: Request, principal: Principal) -> Response:
        where = await self.filter_of(request, principal)
        before = query_int(request, "cursor")
        if wants_csv(request):
            return await self._csv(where, before)
        limit = query.bounded_int(request, "limit", DEFAULT_ENTRIES, 1, MAX_ENTRIES)
        entries = await self.store.audit_page(where, limit=limit + 1, before_id=before)
        page, more = entries[:limit], len(entries) > limit
        return json_response(
            {
                "data": [entry_view(e) for e in page],
                "next_cursor": str(page[-1].id) if more and page else None,
            }
        )

    async def _csv(self, where: AuditFilter, before: int | None) -> Response:
        most = self.context.settings.admin.csv_max_rows
        rows: list[list[Any]] = []
        while True:
            batch = await self.store.audit_page(
                where, limit=min(CSV_BATCH, most + 1 - len(rows)), before_id=before
            )
            rows += [_csv_row(e) for e in batch]
            if len(rows) > most:
                raise bad_request(f"more than admin.csv_max_rows ({most}) entries: narrow the filter")
            if not batch or len(batch) < CSV_BATCH:
                break
            before = batch[-1].id
        return csv_response(CSV_COLUMNS, rows, "audit.csv")

    def routes(self, prefix: str, authed: Callable[[Any], Handler]) -> list[Route]:
        return [route(f"{prefix}/audit", {"GET": authed(self.entries)})]
