"""Admin token endpoints: list, issue and revoke.

Operators list, issue and revoke any token. An account owner lists and revokes its own account's
tokens (to retire a leaked one); issuing stays with operators, as does ``POST
/accounts/{id}/tokens``. Another account's token ids answer 404 exactly like missing ones.
Revocation is read by every instance on the next admin request (``admin.auth``).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from modelgate.admin import schemas
from modelgate.admin.auth import Principal
from modelgate.admin.context import AdminContext
from modelgate.admin.http import json_response, parse_body, path_int, query_int
from modelgate.management import IssuedToken


class TokenEndpoints:
    def __init__(self, context: AdminContext) -> None:
        self.context = context

    def _issued(self, issued: IssuedToken, principal: Principal) -> Response:
        view = schemas.token_view(issued.record, self.context.now(), principal.token_id)
        return json_response({**view, "token": issued.secret}, 201)

    async def list(self, request: Request, principal: Principal) -> Response:
        """``GET /tokens``: the caller's account's tokens, or (operator) all or one account's."""
        principal.require_owner()
        account_id = query_int(request, "account_id")
        if account_id is None:
            account_id = principal.account_id
        if account_id is not None:
            account_id = (await self.context.account(principal, account_id)).id
        tokens = await self.context.services.tokens.list_admin_tokens(account_id)
        now = self.context.now()
        return json_response({"data": [schemas.token_view(t, now, principal.token_id) for t in tokens]})

    async def create(self, request: Request, principal: Principal) -> Response:
        """``POST /tokens``: operator only; ``account_id`` null issues an operator token."""
        body = await parse_body(request, schemas.TokenCreate)
        account = None
        if body.account_id is not None:
            account = await self.context.account(principal, body.account_id)
        principal.require_operator()
        issued = await self.context.management.issue_admin_token(
            account, name=body.name, expires_in=body.expires_in_seconds, created_by=principal.token_id
        )
        return self._issued(issued, principal)

    async def create_for_account(self, request: Request, principal: Principal) -> Response:
        """``POST /accounts/{id}/tokens``: an account token for the account in the path."""
        account = await self.context.account(principal, path_int(request, "account_id", "account"))
        principal.require_operator()
        body = await parse_body(request, schemas.AccountTokenCreate)
        issued = await self.context.management.issue_admin_token(
            account, name=body.name, expires_in=body.expires_in_seconds, created_by=principal.token_id
        )
        return self._issued(issued, principal)

    async def revoke(self, request: Request, principal: Principal) -> Response:
        """``POST /tokens/{token_id}/revoke``: idempotent; the caller may revoke its own token."""
        token = await self.context.token(principal, request.path_params["token_id"])
        principal.require_owner()
        await parse_body(request, schemas.Empty)
        revoked = await self.context.management.revoke_admin_token(token)
        return json_response(schemas.token_view(revoked, self.context.now(), principal.token_id))
