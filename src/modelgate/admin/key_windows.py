"""``GET /admin/api/keys/{key_id}/windows``: a key's spend windows as the dashboard's bars show
them: per window its cap, spent, held, remaining and when it resets, for the key's ``5h``,
``day``, ``week`` and ``month`` and for each window the key's account has a cap on (all its keys
together). Who may read it: whoever may read the key (another account's key answers 404 like a
missing one)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from modelgate.admin.auth import Principal
from modelgate.admin.context import AdminContext
from modelgate.admin.http import Handler, Route, json_response, route
from modelgate.billing.spend_view import account_windows, key_windows, month_window
from modelgate.clock import month_of


class KeyWindowEndpoints:
    def __init__(self, context: AdminContext) -> None:
        self.context = context

    async def windows(self, request: Request, principal: Principal) -> Response:
        record = await self.context.key(principal, request.path_params["key_id"])
        services = self.context.services
        ledger, now = services.ledger_store, self.context.now()
        spent, held = await ledger.month_spend(record.id, month_of(now))
        month = month_window(record, spent, held, now)
        account = await services.accounts.get_account(record.account_id)
        body: dict[str, Any] = {
            "key_id": record.id,
            "caps": {**await key_windows(ledger, record, now), "month": month},
            "account_caps": {} if account is None else await account_windows(ledger, account, now),
        }
        return json_response(body)

    def routes(self, prefix: str, authed: Callable[[Any], Handler]) -> list[Route]:
        return [route(f"{prefix}/keys/{{key_id}}/windows", {"GET": authed(self.windows)})]
