"""Account and key management shared by the CLI, the admin API and the dashboard.

Every operation validates its input against the catalogue and the key rules and returns plain
records; secrets are returned only by the calls that create them (shown once).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from modelgate.audit import describe
from modelgate.audit.actor import draft
from modelgate.catalogue import Catalogue
from modelgate.clock import Clock
from modelgate.keys import (
    Digester,
    admin_token_display,
    display_of,
    new_admin_token,
    new_api_key,
    new_key_id,
    random_base62,
)
from modelgate.management_values import (
    FAMILY,
    MAX_LIMIT,
    MAX_TOKEN_LIFETIME,
    MIN_TOKEN_LIFETIME,
    ConflictError,
    ManagementError,
    NotFoundError,
    bounded_micro,
    check_limit,
    checked_caps,
    checked_expiry,
    format_credits,
    groups_of_family,
    key_caps,
    networks,
    parse_credits,
    parse_expiry,
    parse_lifetime,
)
from modelgate.storage.audit import AuditDraft
from modelgate.storage.base import (
    GROUPS,
    Account,
    AccountLimits,
    AccountStore,
    AdminToken,
    AdminTokenStore,
    AmountTooLarge,
    Group,
    KeyControls,
    KeyRecord,
    KeyStore,
    NewKey,
)
from modelgate.storage.records import NEVER_EXPIRES, AccountCaps
from modelgate.storage.spend_windows import WINDOWS, Window

# The input checks live in ``management_values``; callers import them from here as well.
__all__ = [
    "MAX_LIMIT",
    "MAX_TOKEN_LIFETIME",
    "MIN_TOKEN_LIFETIME",
    "ConflictError",
    "IssuedKey",
    "IssuedToken",
    "Management",
    "ManagementError",
    "NotFoundError",
    "bounded_micro",
    "format_credits",
    "groups_of_family",
    "parse_credits",
    "parse_expiry",
    "parse_lifetime",
]


@dataclass(frozen=True, slots=True)
class IssuedKey:
    record: KeyRecord
    secret: str


@dataclass(frozen=True, slots=True)
class IssuedToken:
    record: AdminToken
    secret: str


class Management:
    """Account, key and admin-token changes over the three repositories they touch (nothing
    else of the database: ``Services`` and the CLI hand these in)."""

    def __init__(
        self,
        accounts: AccountStore,
        keys: KeyStore,
        tokens: AdminTokenStore,
        catalogue: Catalogue,
        digester: Digester,
        clock: Clock,
        default_rpm: int,
    ) -> None:
        self.accounts = accounts
        self.keys = keys
        self.tokens = tokens
        self.catalogue = catalogue
        self.digester = digester
        self.clock = clock
        self.default_rpm = default_rpm

    # accounts -----------------------------------------------------------------------------

    async def create_account(self, name: str, credits_uc: int = 0) -> Account:
        name = name.strip()
        if not name or len(name) > 100:
            raise ManagementError("name: 1 to 100 characters")
        if await self.accounts.find_account(name) is not None:
            raise ConflictError(f"name: an account named {name!r} already exists")
        bounded_micro(credits_uc, "credits")
        now = self.clock.time()
        return await self.accounts.create_account(
            name, credits_uc, now, audit=draft("account.create", describe.account, now)
        )

    async def rename_account(self, account: Account, name: str) -> Account:
        """The same rules as a new account's name: 1 to 100 characters, not another's."""
        name = name.strip()
        if not name or len(name) > 100:
            raise ManagementError("name: 1 to 100 characters")
        other = await self.accounts.find_account(name)
        if other is not None and other.id != account.id:
            raise ConflictError(f"name: an account named {name!r} already exists")
        return await self._account_change(
            account, lambda audit: self.accounts.rename_account(account.id, name, audit=audit)
        )

    async def _account_change(
        self, account: Account, write: Callable[[AuditDraft[Account]], Awaitable[Account | None]]
    ) -> Account:
        """One change to ``account``, written with its ``account.update`` audit entry; a
        NotFoundError when the account is gone."""
        updated = await write(draft("account.update", describe.account, self.clock.time(), before=account))
        if updated is None:
            raise NotFoundError(f"account {account.id} not found")
        return updated

    async def account(self, name_or_id: str | int) -> Account:
        account = None
        if isinstance(name_or_id, int) or (
            isinstance(name_or_id, str)
            and name_or_id.isascii()
            and name_or_id.isdigit()
            and len(name_or_id) < 19
        ):
            account = await self.accounts.get_account(int(name_or_id))
        if account is None and isinstance(name_or_id, str):
            account = await self.accounts.find_account(name_or_id)
        if account is None:
            raise NotFoundError(f"account {name_or_id} not found")
        return account

    async def add_credits(self, account: Account, amount_uc: int, note: str = "") -> Account:
        if amount_uc <= 0:
            raise ManagementError("amount: must be positive")
        bounded_micro(amount_uc, "amount")
        now = self.clock.time()
        audit = draft(
            "account.topup",
            describe.account,
            now,
            before=account,
            detail={"amount_uc": amount_uc, "note": note},
        )
        try:
            return await self.accounts.top_up(account.id, amount_uc, note, now, audit=audit)
        except AmountTooLarge as exc:
            raise ManagementError(f"amount: {exc}") from None

    async def adjust_credits(self, account: Account, amount_uc: int, note: str) -> Account:
        """A correction of either sign (a refund, a charge made outside the gateway); the note
        saying why is required. A debit never takes the balance below what is held."""
        if amount_uc == 0:
            raise ManagementError("amount: must not be zero")
        bounded_micro(abs(amount_uc), "amount")
        if not note.strip():
            raise ManagementError("note: an adjustment needs a note saying why")
        now = self.clock.time()
        audit = draft(
            "account.adjust",
            describe.account,
            now,
            before=account,
            detail={"amount_uc": amount_uc, "note": note},
        )
        try:
            return await self.accounts.adjust(account.id, amount_uc, note, now, audit=audit)
        except AmountTooLarge as exc:
            raise ManagementError(f"amount: {exc}") from None

    async def set_low_balance(self, account: Account, threshold_uc: int | None) -> Account:
        """The account's ``balance.low`` alert threshold (None: the configured default)."""
        if threshold_uc is not None:
            bounded_micro(threshold_uc, "low_balance")
        return await self._account_change(
            account, lambda audit: self.accounts.set_low_balance(account.id, threshold_uc, audit=audit)
        )

    # keys ---------------------------------------------------------------------------------

    def _canonical_models(self, group: Group, models: list[str] | None) -> tuple[str, ...] | None:
        if not models:
            return None
        out: list[str] = []
        for name in models:
            model = self.catalogue.resolve(name.strip())
            if model is None:
                raise ManagementError(f"models: unknown model {name!r}")
            if model.family != FAMILY[group]:
                raise ManagementError(f"models: {model.id} is not a model of group {group}")
            if model.id not in out:
                out.append(model.id)
        return tuple(out)

    async def set_hide_balance(self, account: Account, hide: bool) -> Account:
        """Whether the account's balance is hidden from its keys' holders (``GET /v1/key``)."""
        return await self._account_change(
            account, lambda audit: self.accounts.set_hide_balance(account.id, hide, audit=audit)
        )

    async def set_account_caps(self, account: Account, caps: Mapping[Window, int]) -> Account:
        """Change the account's spend caps (by window, µc; ``-1`` removes one); an operator's
        action. The caps apply to all the account's keys together."""
        checked = checked_caps(caps, WINDOWS, clearable=True)
        return await self._account_change(
            account,
            lambda audit: self.accounts.set_account_caps(
                account.id,
                AccountCaps(
                    cap_5h_uc=checked.get("5h"),
                    cap_day_uc=checked.get("day"),
                    cap_week_uc=checked.get("week"),
                    monthly_cap_uc=checked.get("month"),
                ),
                audit=audit,
            ),
        )

    async def set_account_limits(self, account: Account, limits: AccountLimits) -> Account:
        """The account's rate limits, shared by all its keys (None: no such limit); operators only
        (the callers check). ``limits`` replaces all three."""
        check_limit(limits.rpm, "rpm")
        check_limit(limits.tpm, "tpm")
        check_limit(limits.max_concurrency, "max_concurrency")
        return await self._account_change(
            account, lambda audit: self.accounts.set_account_limits(account.id, limits, audit=audit)
        )

    async def create_key(
        self,
        account: Account,
        group: str,
        *,
        name: str = "",
        rpm: int | None = None,
        models: list[str] | None = None,
        monthly_cap_uc: int | None = None,
        tpm: int | None = None,
        max_concurrency: int | None = None,
        expires_at: float | None = None,
        allowed_ips: list[str] | None = None,
        caps: Mapping[Window, int] | None = None,
    ) -> IssuedKey:
        """``caps``: spend caps by window beside the month's (``5h``, ``day``, ``week``), in µc."""
        typed_group = next((g for g in GROUPS if g == group), None)
        if typed_group is None:
            raise ManagementError(f"group: must be one of {', '.join(GROUPS)}")
        if rpm is not None and rpm < 1:
            raise ManagementError("rpm: must be at least 1")
        if monthly_cap_uc is not None:
            bounded_micro(monthly_cap_uc, "monthly_cap")
        check_limit(tpm, "tpm")
        check_limit(max_concurrency, "max_concurrency")
        secret = new_api_key()
        display = display_of(secret)
        now = self.clock.time()
        record = await self.keys.create_key(
            NewKey(
                id=new_key_id(),
                account_id=account.id,
                name=name,
                group=typed_group,
                rpm=rpm or self.default_rpm,
                allowed_models=self._canonical_models(typed_group, models),
                monthly_cap_uc=monthly_cap_uc,
                digest=self.digester.digest(secret),
                prefix=display.prefix,
                last4=display.last4,
                tpm=tpm,
                max_concurrency=max_concurrency,
                expires_at=checked_expiry(expires_at),
                allowed_ips=networks(allowed_ips) or None,
                **key_caps(caps, clearable=False),
            ),
            now,
            audit=draft("key.create", describe.key, now),
        )
        return IssuedKey(record, secret)

    async def key(self, key_id: str, *, account_id: int | None = None) -> KeyRecord:
        record = await self.keys.get_key(key_id)
        if record is None or (account_id is not None and record.account_id != account_id):
            raise NotFoundError(f"key {key_id} not found")
        return record

    async def update_key(
        self,
        record: KeyRecord,
        *,
        name: str | None = None,
        rpm: int | None = None,
        models: list[str] | None = None,
        monthly_cap_uc: int | None = None,
        clear_cap: bool = False,
        tpm: int | None = None,
        max_concurrency: int | None = None,
        expires_at: float | None = None,
        clear_expiry: bool = False,
        allowed_ips: list[str] | None = None,
        caps: Mapping[Window, int] | None = None,
    ) -> KeyRecord:
        """``tpm``, ``max_concurrency`` and each of ``caps`` (by window: ``5h``, ``day``, ``week``;
        µc): a new limit, ``-1`` to remove it, ``None`` (absent) to keep it;
        ``clear_expiry`` makes the key never expire and ``allowed_ips=[]`` lets it be used from
        anywhere."""
        if rpm is not None and rpm < 1:
            raise ManagementError("rpm: must be at least 1")
        check_limit(None if tpm == -1 else tpm, "tpm")
        check_limit(None if max_concurrency == -1 else max_concurrency, "max_concurrency")
        if monthly_cap_uc is not None:
            bounded_micro(monthly_cap_uc, "monthly_cap")
        allowed = None
        if models is not None:
            allowed = self._canonical_models(record.group, models) or ()
        cap = -1 if clear_cap else monthly_cap_uc
        now = self.clock.time()
        updated = await self.keys.update_key(
            record.id,
            KeyControls(
                name=name,
                rpm=rpm,
                allowed_models=allowed,
                monthly_cap_uc=cap,
                tpm=tpm,
                max_concurrency=max_concurrency,
                expires_at=NEVER_EXPIRES if clear_expiry else checked_expiry(expires_at),
                allowed_ips=None if allowed_ips is None else networks(allowed_ips),
                **key_caps(caps, clearable=True),
            ),
            now,
            audit=draft("key.update", describe.key, now, before=record),
        )
        if updated is None:
            raise NotFoundError(f"key {record.id} not found")
        return updated

    async def rotate_key(self, record: KeyRecord, grace_seconds: float) -> IssuedKey:
        if grace_seconds < 0:
            raise ManagementError("grace: must not be negative")
        if record.state != "active":
            raise ConflictError(f"key {record.id} is revoked and cannot be rotated")
        secret = new_api_key()
        display = display_of(secret)
        updated = await self.keys.rotate_key(
            record.id,
            self.digester.digest(secret),
            display.prefix,
            display.last4,
            grace_seconds,
            self.clock.time(),
            audit=draft(
                "key.rotate",
                describe.key,
                self.clock.time(),
                before=record,
                detail={"grace_seconds": grace_seconds},
            ),
        )
        if updated is None:
            raise NotFoundError(f"key {record.id} not found")
        return IssuedKey(updated, secret)

    async def revoke_key(self, record: KeyRecord) -> KeyRecord:
        now = self.clock.time()
        updated = await self.keys.revoke_key(
            record.id, now, audit=draft("key.revoke", describe.key, now, before=record)
        )
        if updated is None:
            raise NotFoundError(f"key {record.id} not found")
        return updated

    # admin tokens -------------------------------------------------------------------------

    async def create_admin_token(self, account: Account | None) -> str:
        """A token that never expires (operator when ``account`` is None); the secret only."""
        return (await self.issue_admin_token(account)).secret

    async def issue_admin_token(
        self,
        account: Account | None,
        *,
        name: str = "",
        expires_in: float | None = None,
        created_by: str | None = None,
    ) -> IssuedToken:
        """An operator token (``account`` None) or one that sees only ``account``; optionally
        refused ``expires_in`` seconds from now. The secret is in the result only."""
        name = name.strip()
        if len(name) > 100:
            raise ManagementError("name: at most 100 characters")
        if expires_in is not None and not MIN_TOKEN_LIFETIME <= expires_in <= MAX_TOKEN_LIFETIME:
            raise ManagementError(
                f"expires: between {MIN_TOKEN_LIFETIME:g} seconds and {MAX_TOKEN_LIFETIME // 86400} days"
            )
        now = self.clock.time()
        token = new_admin_token(operator=account is None)
        display = admin_token_display(token)
        token_id = "tok_" + random_base62(12)
        await self.tokens.create_admin_token(
            token_id,
            self.digester.digest(token),
            account.id if account else None,
            now,
            name=name,
            prefix=display.prefix,
            last4=display.last4,
            created_by=created_by,
            expires_at=None if expires_in is None else now + expires_in,
            audit=draft("token.create", describe.token, now),
        )
        record = await self.tokens.get_admin_token(token_id)
        assert record is not None  # just written
        return IssuedToken(record, token)

    async def admin_token(self, token_id: str, *, account_id: int | None = None) -> AdminToken:
        """A token by id; with ``account_id``, only a token of that account (others: not found)."""
        record = await self.tokens.get_admin_token(token_id)
        if record is None or (account_id is not None and record.account_id != account_id):
            raise NotFoundError(f"token {token_id} not found")
        return record

    async def revoke_admin_token(self, record: AdminToken) -> AdminToken:
        """Refused by every instance from the next request on; revoking twice changes nothing."""
        now = self.clock.time()
        revoked = await self.tokens.revoke_admin_token(
            record.id, now, audit=draft("token.revoke", describe.token, now, before=record)
        )
        if revoked is None:
            raise NotFoundError(f"token {record.id} not found")
        return revoked
