"""The admin REST API under ``/admin/api``: accounts, top-ups, admin tokens, keys, models and usage.

Operators (``mg-op-`` tokens) see everything; account tokens (``mg-acct-``) see only their own
account, and anything else is a 404 exactly like a missing id (see ``admin.auth``). Key changes are
applied to this server's key view at once, and reach other instances through their refresh poll.
Usage endpoints live in ``admin.usage``, token endpoints in ``admin.tokens``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from modelgate.admin import query, schemas
from modelgate.admin.audit import AuditEndpoints, request_actor
from modelgate.admin.auth import Principal, authenticate
from modelgate.admin.context import AdminContext
from modelgate.admin.http import (
    AdminError,
    Route,
    bad_request,
    conflict,
    json_response,
    parse_body,
    path_int,
    query_int,
    route,
)
from modelgate.admin.key_limits import (
    account_limit_changes,
    held_limit_changes,
    member_lowers_only,
    member_new_key_rpm,
)
from modelgate.admin.key_pages import key_page_query, next_cursor
from modelgate.admin.key_windows import KeyWindowEndpoints
from modelgate.admin.ledger import LedgerEndpoints
from modelgate.admin.members import MemberEndpoints
from modelgate.admin.openapi import openapi_document
from modelgate.admin.sessions import Sessions
from modelgate.admin.spend_caps import cap_changes, key_cap_changes
from modelgate.admin.sso import SsoEndpoints
from modelgate.admin.tokens import TokenEndpoints
from modelgate.admin.upstream_routes import upstream_routes
from modelgate.admin.usage import UsageEndpoints
from modelgate.admin.usage_quality import QualityEndpoints
from modelgate.audit.actor import acting
from modelgate.clock import month_of
from modelgate.management import (
    ConflictError,
    Management,
    ManagementError,
    NotFoundError,
    parse_credits,
    parse_expiry,
)
from modelgate.services import Services
from modelgate.storage.base import Conflict, KeyRecord
from modelgate.storage.spend_windows import KEY_WINDOWS

PREFIX = "/admin/api"
MAX_ACCOUNTS = 1000
AuthedHandler = Callable[[Request, Principal], Awaitable[Response]]


def _amount(credits: str | None, micro: int | None, field: str, *, required: bool) -> int | None:
    if credits is not None and micro is not None:
        raise bad_request(f"{field}: give either {field} or {field}_uc, not both")
    if credits is not None:
        try:
            return parse_credits(credits, field)
        except ManagementError as exc:
            raise bad_request(str(exc)) from None
    if micro is None and required:
        raise bad_request(f"{field}: required (or {field}_uc)")
    return micro


class AdminAPI:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.context = AdminContext(services)
        self.accounts = services.accounts
        self.key_records = services.key_records
        self.usage = UsageEndpoints(self.context)
        self.tokens = TokenEndpoints(self.context)
        self.quality = QualityEndpoints(self.context, self.usage)
        self.sessions = Sessions(
            services.people, services.digester, services.clock, lambda: services.settings.sso
        )
        self.sso = SsoEndpoints(self.context, self.sessions)
        self.members = MemberEndpoints(self.context, self.sessions)
        self.audit = AuditEndpoints(self.context)
        self.ledger = LedgerEndpoints(self.context)

    @property
    def management(self) -> Management:
        return self.context.management  # follows a configuration reload

    # plumbing -----------------------------------------------------------------------------

    def authed(self, handler: AuthedHandler) -> Authed:
        """``handler`` behind the admin authentication guard (``server.app`` runs the guard)."""
        return Authed(self, handler)

    async def authenticate(self, request: Request) -> Principal:
        """The guard: the admin token, or the signed-in session (its CSRF token on writes)."""
        return await authenticate(
            request,
            self.services.tokens,
            self.services.digester,
            self.services.clock,
            self.services.settings.admin.token_last_used_resolution_seconds,
            self.sessions,
        )

    async def serve(self, request: Request, principal: Principal, handler: AuthedHandler) -> Response:
        """The handler, for the authenticated ``principal``. A refusal is raised for the route
        table's boundary to render (``http.render_error``); management's own errors become the
        admin refusals they mean, and every answer of a rotated session carries its new id."""
        # Every write reached from here records this caller (a token's id, or the signed-in
        # person by name), request and client (audit.actor).
        with acting(request_actor(request, principal.actor)) as actor:
            try:
                response = await handler(request, principal)
            except AdminError as error:
                self._renew(principal, error)
                raise
            except NotFoundError as exc:  # pragma: no cover - lookups below raise their own 404s
                raise self._renew(principal, AdminError(404, "not_found_error", str(exc))) from None
            except (ConflictError, Conflict) as exc:
                raise self._renew(principal, conflict(str(exc))) from None
            except ManagementError as exc:
                raise self._renew(principal, bad_request(str(exc))) from None
            response.headers["x-request-id"] = actor.request_id
        if principal.renewed_session is not None and principal.session is not None:
            # Whatever the answer, it carries the session's new id (the old one ends soon),
            # unless the handler set the cookie itself (sign-out clears it).
            self.sessions.renew_cookie(response, principal.renewed_session, principal.session.expires_at)
        return response

    def _renew(self, principal: Principal, error: AdminError) -> AdminError:
        """``error`` carrying the rotated session's new cookie (refusals too: the old id ends)."""
        if principal.renewed_session is not None and principal.session is not None:
            carrier = Response()
            self.sessions.renew_cookie(carrier, principal.renewed_session, principal.session.expires_at)
            error.headers["set-cookie"] = carrier.headers["set-cookie"]
        return error

    def _applied(self, record: KeyRecord) -> KeyRecord:
        self.services.keys.apply(record)
        return record

    # who am I -----------------------------------------------------------------------------

    async def me(self, request: Request, principal: Principal) -> Response:
        account = None
        if principal.account_id is not None:
            account = schemas.account_view(await self.context.account(principal, principal.account_id))
        now = self.context.now()
        return json_response(
            {
                "token_id": principal.token_id,
                "scope": "operator" if principal.is_operator else "account",
                "actor": principal.actor,
                "role": principal.session_role,
                "account": account,
                "now": schemas.when(now),
                "month": month_of(now),
            }
        )

    # accounts -----------------------------------------------------------------------------

    async def accounts_list(self, request: Request, principal: Principal) -> Response:
        """Accounts by id; ``q`` keeps those whose name contains it (any case) or whose id it is."""
        principal.require_operator()
        search = query.text(request, "q")
        accounts = await self.accounts.list_accounts()
        if search is not None:
            needle = search.strip().casefold()
            accounts = [a for a in accounts if needle in a.name.casefold() or needle == str(a.id)]
        limit = query.bounded_int(request, "limit", MAX_ACCOUNTS, 1, MAX_ACCOUNTS)
        return json_response(
            {"data": [schemas.account_view(a) for a in accounts[:limit]], "total": len(accounts)}
        )

    async def accounts_create(self, request: Request, principal: Principal) -> Response:
        principal.require_operator()
        body = await parse_body(request, schemas.AccountCreate)
        opening = _amount(body.credits, body.credits_uc, "credits", required=False) or 0
        account = await self.management.create_account(body.name, opening)
        return json_response(schemas.account_view(account), 201)

    async def account_get(self, request: Request, principal: Principal) -> Response:
        account = await self.context.account(principal, path_int(request, "account_id", "account"))
        return json_response(schemas.account_view(account))

    async def account_rename(self, request: Request, principal: Principal) -> Response:
        """``PATCH /accounts/{id}``: a new name, ``hide_balance`` and/or the account's rate limits
        (operators only; keys, tokens and usage stay)."""
        account = await self.context.account(principal, path_int(request, "account_id", "account"))
        principal.require_operator()
        body = await parse_body(request, schemas.AccountRename)
        caps = cap_changes(body.caps, body.caps_uc)
        limits = account_limit_changes(account, body)
        if body.name is None and body.hide_balance is None and not caps and limits is None:
            raise bad_request("give name, hide_balance, caps and/or rpm, tpm, max_concurrency")
        if body.name is not None:
            account = await self.management.rename_account(account, body.name)
        if body.hide_balance is not None:
            account = await self.management.set_hide_balance(account, body.hide_balance)
        if caps:
            account = await self.management.set_account_caps(account, caps)
        if limits is not None:
            account = await self.management.set_account_limits(account, limits)
            self.services.account_limits.changed(account)
        return json_response(schemas.account_view(account))

    async def topup_create(self, request: Request, principal: Principal) -> Response:
        account = await self.context.account(principal, path_int(request, "account_id", "account"))
        principal.require_operator()
        body = await parse_body(request, schemas.TopUp)
        amount = _amount(body.amount, body.amount_uc, "amount", required=True) or 0
        updated = await self.management.add_credits(account, amount, body.note)
        return json_response(schemas.account_view(updated))

    # keys ---------------------------------------------------------------------------------

    async def keys_list(self, request: Request, principal: Principal) -> Response:
        account_id = query_int(request, "account_id")
        if account_id is None:
            account_id = principal.account_id
        if account_id is not None:
            account_id = (await self.context.account(principal, account_id)).id
        month = self.context.month(request)
        page = key_page_query(request)
        # A member pages over their own keys only: neither the page, its cursor nor whether
        # there is more depends on a key they cannot see.
        records = await self.key_records.key_page(
            account_id,
            limit=page.limit + 1,
            after=page.after,
            search=page.search,
            owner=self.context.member_owner(principal),
        )
        return json_response(
            {
                "month": month,
                "data": await self.context.key_views(records[: page.limit], month, account_id),
                "next_cursor": next_cursor(records, page.limit),
            }
        )

    async def key_create(self, request: Request, principal: Principal) -> Response:
        body = await parse_body(request, schemas.KeyCreate)
        account_id = body.account_id if body.account_id is not None else principal.account_id
        if account_id is None:
            raise bad_request("account_id: required with an operator token")
        account = await self.context.account(principal, account_id)
        cap = _amount(body.monthly_cap, body.monthly_cap_uc, "monthly_cap", required=False)
        if principal.is_member:
            member_new_key_rpm(body.rpm, self.services.settings.keys.default_rpm)
        issued = await self.management.create_key(
            account,
            body.group,
            name=body.name,
            rpm=body.rpm,
            models=body.allowed_models,
            monthly_cap_uc=cap,
            tpm=body.tpm,
            max_concurrency=body.max_concurrency,
            expires_at=None if body.expires_at is None else parse_expiry(body.expires_at),
            allowed_ips=body.allowed_ips,
            caps=cap_changes(body.caps, body.caps_uc, KEY_WINDOWS),
        )
        record = self._applied(issued.record)
        if principal.person is not None:  # a person's key: theirs to manage even as a member
            await self.services.people.set_key_owner(record.id, principal.person.id, account.id)
        return json_response(
            await self.context.key_view(record, self.context.month(request), issued.secret), 201
        )

    async def key_get(self, request: Request, principal: Principal) -> Response:
        record = await self.context.key(principal, request.path_params["key_id"])
        return json_response(await self.context.key_view(record, self.context.month(request)))

    async def key_update(self, request: Request, principal: Principal) -> Response:
        record = await self.context.key(principal, request.path_params["key_id"])
        body = await parse_body(request, schemas.KeyUpdate)
        given = body.model_fields_set
        if {"monthly_cap", "monthly_cap_uc"} <= given:
            raise bad_request("monthly_cap: give either monthly_cap or monthly_cap_uc, not both")
        cap_given = bool({"monthly_cap", "monthly_cap_uc"} & given)
        cap = _amount(body.monthly_cap, body.monthly_cap_uc, "monthly_cap", required=False)
        models = body.allowed_models if body.allowed_models is not None else []
        if "name" in given and body.name is None:
            raise bad_request("name: must be a string")
        if "rpm" in given and body.rpm is None:
            raise bad_request("rpm: must be an integer")
        if principal.is_member:
            member_lowers_only(record, body.rpm, cap_given, cap)
        account_limits = self.services.account_limits.get(record.account_id)
        limits = held_limit_changes(record, body, given, principal.is_operator, account_limits)
        caps = key_cap_changes(record, body.caps, body.caps_uc, principal.is_operator)
        updated = await self.management.update_key(
            record,
            name=body.name,
            rpm=body.rpm,
            models=models if "allowed_models" in given else None,
            monthly_cap_uc=cap,
            clear_cap=cap_given and cap is None,
            tpm=limits.get("tpm"),
            max_concurrency=limits.get("max_concurrency"),
            expires_at=None if body.expires_at is None else parse_expiry(body.expires_at),
            clear_expiry="expires_at" in given and body.expires_at is None,
            allowed_ips=(body.allowed_ips or []) if "allowed_ips" in given else None,
            caps=caps,
        )
        return json_response(await self.context.key_view(self._applied(updated), self.context.month(request)))

    async def key_rotate(self, request: Request, principal: Principal) -> Response:
        record = await self.context.key(principal, request.path_params["key_id"])
        body = await parse_body(request, schemas.KeyRotate)
        grace = body.grace_seconds
        if grace is None:
            grace = self.services.settings.keys.rotation_grace_seconds
        issued = await self.management.rotate_key(record, grace)
        record = self._applied(issued.record)
        return json_response(await self.context.key_view(record, self.context.month(request), issued.secret))

    async def key_revoke(self, request: Request, principal: Principal) -> Response:
        record = await self.context.key(principal, request.path_params["key_id"])
        await parse_body(request, schemas.Empty)
        revoked = self._applied(await self.management.revoke_key(record))
        return json_response(await self.context.key_view(revoked, self.context.month(request)))

    # models -----------------------------------------------------------------------------

    async def models(self, request: Request, principal: Principal) -> Response:
        """The catalogue's canonical models and the key groups that may use each."""
        models = self.services.catalogue.models.values()
        return json_response({"data": [schemas.model_view(m) for m in models]})

    # routes -------------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        """Every admin endpoint; any other path under ``PREFIX`` is ``unknown``."""
        a = self.authed
        document = openapi_document()

        async def openapi(request: Request) -> Response:
            return json_response(document)

        return [
            route(f"{PREFIX}/openapi.json", {"GET": openapi}),
            route(f"{PREFIX}/me", {"GET": a(self.me)}),
            route(f"{PREFIX}/sso", {"GET": self.sso.status}),
            route(f"{PREFIX}/sso/login", {"GET": self.sso.login}),
            route(f"{PREFIX}/sso/callback", {"GET": self.sso.callback}),
            route(f"{PREFIX}/sso/session", {"GET": a(self.sso.session)}),
            route(f"{PREFIX}/sso/logout", {"POST": a(self.sso.logout)}),
            route(f"{PREFIX}/accounts/{{account_id}}/members", {"GET": a(self.members.list)}),
            route(
                f"{PREFIX}/accounts/{{account_id}}/members/{{person_id}}",
                {"PATCH": a(self.members.update), "DELETE": a(self.members.remove)},
            ),
            route(
                f"{PREFIX}/invites",
                {"GET": a(self.members.invites_list), "POST": a(self.members.invite_create)},
            ),
            route(f"{PREFIX}/invites/{{invite_id}}", {"DELETE": a(self.members.invite_revoke)}),
            route(f"{PREFIX}/accounts", {"GET": a(self.accounts_list), "POST": a(self.accounts_create)}),
            route(
                f"{PREFIX}/accounts/{{account_id}}",
                {"GET": a(self.account_get), "PATCH": a(self.account_rename)},
            ),
            route(f"{PREFIX}/accounts/{{account_id}}/topups", {"POST": a(self.topup_create)}),
            route(f"{PREFIX}/accounts/{{account_id}}/tokens", {"POST": a(self.tokens.create_for_account)}),
            route(f"{PREFIX}/tokens", {"GET": a(self.tokens.list), "POST": a(self.tokens.create)}),
            route(f"{PREFIX}/tokens/{{token_id}}/revoke", {"POST": a(self.tokens.revoke)}),
            route(f"{PREFIX}/keys", {"GET": a(self.keys_list), "POST": a(self.key_create)}),
            route(f"{PREFIX}/keys/{{key_id}}", {"GET": a(self.key_get), "PATCH": a(self.key_update)}),
            route(f"{PREFIX}/keys/{{key_id}}/rotate", {"POST": a(self.key_rotate)}),
            route(f"{PREFIX}/keys/{{key_id}}/revoke", {"POST": a(self.key_revoke)}),
            route(f"{PREFIX}/models", {"GET": a(self.models)}),
            route(f"{PREFIX}/usage", {"GET": a(self.usage.summary)}),
            route(f"{PREFIX}/usage/records", {"GET": a(self.usage.records)}),
            route(f"{PREFIX}/usage/records.csv", {"GET": a(self.usage.records_csv)}),
            route(f"{PREFIX}/usage/daily", {"GET": a(self.usage.daily)}),
            route(f"{PREFIX}/usage/top-keys", {"GET": a(self.usage.top_keys)}),
            route(f"{PREFIX}/usage/quality", {"GET": a(self.quality.daily)}),
            *upstream_routes(self.services, PREFIX, a),
            *self.audit.routes(PREFIX, a),
            *self.ledger.routes(PREFIX, a),
            *KeyWindowEndpoints(self.context).routes(PREFIX, a),
        ]


async def unknown(request: Request) -> Response:
    """Any other path under ``PREFIX``: the admin API's 404."""
    raise AdminError(404, "not_found_error", f"no admin endpoint {request.method} {request.url.path}")


#: The methods a path under ``PREFIX`` that no endpoint serves answers with ``unknown``.
UNKNOWN_METHODS = frozenset({"GET", "POST", "PATCH", "PUT", "DELETE"})


@dataclass(frozen=True, slots=True)
class Authed:
    """An admin handler behind the authentication guard; ``server.app`` runs
    ``api.authenticate`` as a guard, then ``api.serve`` with the principal it found. Called
    directly (outside the route table), it runs both."""

    api: AdminAPI
    handler: AuthedHandler

    async def __call__(self, request: Request) -> Response:
        return await self.api.serve(request, await self.api.authenticate(request), self.handler)
