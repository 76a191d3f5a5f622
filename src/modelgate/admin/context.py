"""What every admin endpoint needs: the services, visibility-checked lookups and key views.

Visibility rule (see ``admin.auth``): an id outside the caller's account is answered exactly like
a missing one, so every lookup of an account, key or token by id goes through here.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from modelgate.admin import query, schemas
from modelgate.admin.auth import Principal
from modelgate.admin.http import forbidden, not_found, query_int
from modelgate.clock import month_of
from modelgate.config import Settings
from modelgate.management import Management, NotFoundError
from modelgate.services import Services
from modelgate.storage.base import Account, AdminToken, KeyRecord
from modelgate.storage.reports import KeyActivity

_IDLE = KeyActivity(0, 0, None)


#: Up to this many keys, their activity is asked for by id; beyond, for the whole scope.
KEY_ACTIVITY_BY_ID = 500


class AdminContext:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.accounts = services.accounts
        self.reports = services.reports
        self.clock = services.clock

    @property
    def settings(self) -> Settings:
        """The running configuration: what a reload (SIGHUP) installed, at each use."""
        return self.services.settings

    @property
    def management(self) -> Management:
        """Built per use (a few attribute copies), so it follows the catalogue and
        ``keys.default_rpm`` a configuration reload installs (``server.reload``)."""
        services = self.services
        return Management(
            services.accounts,
            services.key_records,
            services.tokens,
            services.catalogue,
            services.digester,
            services.clock,
            services.settings.keys.default_rpm,
        )

    def now(self) -> float:
        return self.clock.time()

    def month(self, request: Request) -> str:
        return query.month(request, month_of(self.now()))

    async def account(self, principal: Principal, account_id: int) -> Account:
        principal.check_account(account_id)
        account = await self.accounts.get_account(account_id)
        if account is None:
            raise not_found("account", account_id)
        return account

    async def key(self, principal: Principal, key_id: str) -> KeyRecord:
        try:
            record = await self.management.key(key_id, account_id=principal.account_id)
        except NotFoundError:
            raise not_found("key", key_id) from None
        if principal.is_member and not await self.owns(principal, record.id):
            raise not_found("key", key_id)  # a member sees only their own keys
        return record

    async def owns(self, principal: Principal, key_id: str) -> bool:
        person = principal.person
        return person is not None and await self.services.people.key_owner(key_id) == person.id

    async def own_keys(self, principal: Principal) -> list[KeyRecord]:
        """The keys a signed-in person owns in their account (a member's are few: read by id)."""
        person, account_id = principal.person, principal.account_id
        if person is None or account_id is None:
            return []
        found: list[KeyRecord] = []
        for key_id in await self.services.people.owned_keys(person.id, account_id):
            record = await self.services.key_records.get_key(key_id)
            if record is not None and record.account_id == account_id:
                found.append(record)
        return found

    @staticmethod
    def member_owner(principal: Principal) -> str | None:
        """The owner filter of a member's listings (their person id): a member sees only the keys
        they created, and the usage of those; None for everyone else (no filter)."""
        if not principal.is_member:
            return None
        person = principal.person
        if person is None:  # a member is always a signed-in person; never widen to the account
            raise forbidden("a member's listings need their sign-in")
        return person.id

    async def token(self, principal: Principal, token_id: str) -> AdminToken:
        try:
            return await self.management.admin_token(token_id, account_id=principal.account_id)
        except NotFoundError:
            raise not_found("token", token_id) from None

    async def scope(self, principal: Principal, request: Request) -> tuple[int | None, str | None]:
        """``account_id`` and ``key_id`` from the query, checked against what the caller may see;
        an account token is always scoped to its own account. With both, the key must belong to
        the account (otherwise it is not found there)."""
        account_id = query_int(request, "account_id")
        key_id = query.text(request, "key_id")
        if account_id is None:
            account_id = principal.account_id
        if account_id is not None:
            account_id = (await self.account(principal, account_id)).id
        if key_id is not None:
            key = await self.key(principal, key_id)
            if account_id is not None and key.account_id != account_id:
                raise not_found("key", key_id)
            key_id = key.id
        return account_id, key_id

    async def key_views(
        self, records: list[KeyRecord], month: str, account_id: int | None
    ) -> list[dict[str, Any]]:
        # A page of keys asks only for its own keys' activity (each an index seek or two).
        page = [k.id for k in records] if len(records) <= KEY_ACTIVITY_BY_ID else None
        activity = await self.reports.key_activity(month, account_id, page)
        now = self.now()
        return [schemas.key_view(k, month, activity.get(k.id, _IDLE), now) for k in records]

    async def key_view(self, record: KeyRecord, month: str, secret: str | None = None) -> dict[str, Any]:
        (view,) = await self.key_views([record], month, record.account_id)
        return view if secret is None else {**view, "secret": secret}
