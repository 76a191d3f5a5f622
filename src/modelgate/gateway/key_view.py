"""``GET /v1/key`` and ``GET /v1/key/usage``: what a key's holder may know about the key, asked
with the key itself (``x-api-key`` or ``Authorization: Bearer``, like the model routes).

Both are behind the guards of every API route with the key only (``guards.KEY_ONLY``): an
expired key, one used from outside its address ranges or a revoked one is refused as on a model
route, but no rate-limit unit is taken and nothing is held or charged. Errors come in the format
of the calling SDK family (Messages-shaped for ``x-api-key`` clients, OpenAI-shaped otherwise),
as on ``/v1/models``.

``GET /v1/key`` shape (money as exact ``*_uc`` micro-credits and a credits string, as in the
admin API): ``limits`` holds the key's rate limits by name (``account_limits`` the account's, shared
by all its keys; each null when unset), ``caps`` its spend windows by name
(``5h`` rolling, ``day`` the UTC day, ``week`` the UTC ISO week, ``month`` the UTC calendar
month), each with ``limit``, ``spent``, ``held`` (requests in flight), ``remaining`` and
``resets_at`` (for ``5h``: when its oldest spend leaves the window; a window other than the month
is counted only while a cap is set, so without one its figures are null); ``account_caps`` the
same for the caps the account has set (all its keys together; null when the account hides its
balance); ``balance`` is the account's available balance, or null with ``balance_hidden: true``
when the account hides it. ``GET /v1/key/usage`` pages through
this key's own usage records, newest first; nothing of another key is reachable from here.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from modelgate import errors
from modelgate.billing.spend_view import account_windows, key_windows, month_window
from modelgate.clock import month_of
from modelgate.formats import format_for_client
from modelgate.gateway import policy
from modelgate.gateway.guards import KEY_ONLY, guarded
from modelgate.gateway.replies import json_reply
from modelgate.management import format_credits
from modelgate.services import Services
from modelgate.storage.base import KeyRecord, UsageRecord
from modelgate.storage.reports import UsageCursor, UsageFilter

PATH = "/v1/key"
USAGE_PATH = "/v1/key/usage"
DEFAULT_PAGE = 50
MAX_PAGE = 200
NO_STORE = {"cache-control": "no-store"}
_CURSOR = re.compile(r"([0-9]{1,16}(?:\.[0-9]{1,20})?)~([A-Za-z0-9_-]{1,100})")


def _when(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _money(name: str, micro: int | None) -> dict[str, Any]:
    return {f"{name}_uc": micro, name: None if micro is None else format_credits(micro)}


async def key_info(services: Services, request: Request) -> Response:
    async def run(key: KeyRecord) -> Response:
        now = services.clock.time()
        ledger = services.ledger_store
        spent, held = await ledger.month_spend(key.id, month_of(now))
        account = await services.accounts.get_account(key.account_id)
        hidden = account is None or account.hide_balance
        body = {
            "object": "key",
            "id": key.id,
            "name": key.name,
            "account_id": key.account_id,
            "group": key.group,
            "display": f"{key.prefix}…{key.last4}",
            "state": key.state,
            "limits": {"rpm": key.rpm, "tpm": key.tpm, "max_concurrency": key.max_concurrency},
            "account_limits": None
            if account is None
            else {"rpm": account.rpm, "tpm": account.tpm, "max_concurrency": account.max_concurrency},
            "caps": {**await key_windows(ledger, key, now), "month": month_window(key, spent, held, now)},
            "account_caps": None
            if hidden or account is None
            else await account_windows(ledger, account, now),
            "allowed_models": list(key.allowed_models) if key.allowed_models is not None else None,
            "models": [m.id for m in policy.visible_models(services.catalogue, key)],
            "expires_at": _when(key.expires_at),
            "allowed_ips": list(key.allowed_ips) if key.allowed_ips else None,
            "balance": None if hidden or account is None else _money("available", account.available_uc),
            "balance_hidden": hidden,
            "created_at": _when(key.created_at),
            "now": _when(now),
        }
        return json_reply(body, headers=NO_STORE)

    return await guarded(services, format_for_client(request.headers), request, run, KEY_ONLY)


def _page_size(request: Request) -> int:
    raw = request.query_params.get("limit")
    if raw is None or raw == "":
        return DEFAULT_PAGE
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 4 or not 1 <= int(raw) <= MAX_PAGE:
        raise errors.InvalidRequest(f"limit: an integer from 1 to {MAX_PAGE}", param="limit")
    return int(raw)


def _cursor(request: Request) -> UsageCursor | None:
    raw = request.query_params.get("cursor")
    if raw is None or raw == "":
        return None
    match = _CURSOR.fullmatch(raw)
    if match is None:
        raise errors.InvalidRequest("cursor: use the next_cursor of the previous page", param="cursor")
    return UsageCursor(float(match[1]), match[2])


def _cursor_text(value: UsageCursor | None) -> str | None:
    # repr of a float reads back as exactly the same float
    return None if value is None else f"{value.created_at!r}~{value.request_id}"


def usage_view(record: UsageRecord) -> dict[str, Any]:
    return {
        "request_id": record.request_id,
        "endpoint": record.endpoint,
        "model": record.model,
        "status": record.status,
        "created_at": _when(record.created_at),
        "finished_at": _when(record.finished_at),
        "input_tokens": record.input_tokens,
        "output_tokens": record.output_tokens,
        "cache_creation_tokens": record.cache_creation_tokens,
        "cache_read_tokens": record.cache_read_tokens,
        "web_search_requests": record.web_search_requests,
        **_money("charged", record.charged_uc),
    }


async def key_usage(services: Services, request: Request) -> Response:
    async def run(key: KeyRecord) -> Response:
        limit = _page_size(request)
        after = _cursor(request)
        page = await services.reports.usage_page(UsageFilter(key_id=key.id), limit=limit, after=after)
        body = {
            "object": "list",
            "key_id": key.id,
            "data": [usage_view(r) for r in page.records],
            "has_more": page.next is not None,
            "next_cursor": _cursor_text(page.next),
        }
        return json_reply(body, headers=NO_STORE)

    return await guarded(services, format_for_client(request.headers), request, run, KEY_ONLY)
