"""Every repository of one database in one object, for the tests that exercise them all (the
storage contract suite, the ledger's property tests, fault injection by subclassing): it only
forwards to the repositories ``storage.open_store`` builds. The gateway itself never holds such
an object; each of its consumers takes the narrow repository ``Services`` hands it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from modelgate.services import Services
from modelgate.storage.audit import (
    AuditDraft,
    AuditEntry,
    AuditFilter,
    LedgerEntry,
    StatementFigures,
)
from modelgate.storage.base import (
    DEFAULT_BATCH_WAIT_SECONDS,
    DEFAULT_POOL_SIZE,
    ConnectionUse,
    LedgerObserver,
)
from modelgate.storage.postgres import postgres_repositories
from modelgate.storage.postgres_database import PostgresDatabase
from modelgate.storage.records import (
    Account,
    AccountCaps,
    AccountLimits,
    AdminToken,
    KeyControls,
    KeyRecord,
    NewKey,
    Refusal,
    Reservation,
    ReserveRequest,
    Settlement,
    UsageRecord,
    UsageSummary,
)
from modelgate.storage.reports import (
    DailyUsage,
    KeyActivity,
    KeySpend,
    UsageCursor,
    UsageFacets,
    UsageFilter,
    UsagePage,
)
from modelgate.storage.repositories import Database, Repositories
from modelgate.storage.responses import (
    FoundItem,
    ItemPage,
    NewResponse,
    PageRequest,
    StoredConversation,
    StoredItem,
    StoredResponse,
)
from modelgate.storage.spend_windows import Window, WindowUse
from modelgate.storage.sqlite import sqlite_repositories
from modelgate.storage.sqlite_database import SqliteDatabase


class WholeStore:
    """Every repository of one database, and the database itself."""

    def __init__(self, repositories: Repositories) -> None:
        database: Database = repositories.database
        self.database = database
        self.accounts = repositories.accounts
        self.keys = repositories.keys
        self.tokens = repositories.tokens
        self.ledger = repositories.ledger
        self.usage = repositories.usage
        self.reports = repositories.reports
        self.responses = repositories.responses
        #: People, sessions, members and invitations (``storage.people``).
        self.people = repositories.people
        self.audit = repositories.audit

    # the database -------------------------------------------------------------------------

    async def migrate(self) -> None:
        await self.database.migrate()

    async def close(self) -> None:
        await self.database.close()

    async def ping(self) -> None:
        """Raise StorageError when the database cannot answer."""
        await self.database.ping()

    def connections(self) -> ConnectionUse | None:
        return self.database.connections()

    # AccountStore (accounts) ------------------------------------------------

    async def create_account(
        self, name: str, balance_uc: int, now: float, *, audit: AuditDraft[Account] | None = None
    ) -> Account:
        return await self.accounts.create_account(name, balance_uc, now, audit=audit)

    async def get_account(self, account_id: int) -> Account | None:
        return await self.accounts.get_account(account_id)

    async def find_account(self, name: str) -> Account | None:
        return await self.accounts.find_account(name)

    async def list_accounts(self) -> list[Account]:
        return await self.accounts.list_accounts()

    async def rename_account(
        self, account_id: int, name: str, *, audit: AuditDraft[Account] | None = None
    ) -> Account | None:
        return await self.accounts.rename_account(account_id, name, audit=audit)

    async def top_up(
        self,
        account_id: int,
        amount_uc: int,
        note: str,
        now: float,
        *,
        audit: AuditDraft[Account] | None = None,
    ) -> Account:
        return await self.accounts.top_up(account_id, amount_uc, note, now, audit=audit)

    async def adjust(
        self,
        account_id: int,
        amount_uc: int,
        note: str,
        now: float,
        *,
        audit: AuditDraft[Account] | None = None,
    ) -> Account:
        return await self.accounts.adjust(account_id, amount_uc, note, now, audit=audit)

    async def set_low_balance(
        self, account_id: int, threshold_uc: int | None, *, audit: AuditDraft[Account] | None = None
    ) -> Account | None:
        return await self.accounts.set_low_balance(account_id, threshold_uc, audit=audit)

    async def set_hide_balance(
        self, account_id: int, hide: bool, *, audit: AuditDraft[Account] | None = None
    ) -> Account | None:
        return await self.accounts.set_hide_balance(account_id, hide, audit=audit)

    async def set_account_caps(
        self, account_id: int, caps: AccountCaps, *, audit: AuditDraft[Account] | None = None
    ) -> Account | None:
        return await self.accounts.set_account_caps(account_id, caps, audit=audit)

    async def topups_total(self, account_id: int) -> int:
        return await self.accounts.topups_total(account_id)

    async def set_account_limits(
        self, account_id: int, limits: AccountLimits, *, audit: AuditDraft[Account] | None = None
    ) -> Account | None:
        return await self.accounts.set_account_limits(account_id, limits, audit=audit)

    async def limited_accounts(self) -> list[Account]:
        return await self.accounts.limited_accounts()

    # KeyStore (keys) --------------------------------------------------------

    async def create_key(
        self, key: NewKey, now: float, *, audit: AuditDraft[KeyRecord] | None = None
    ) -> KeyRecord:
        return await self.keys.create_key(key, now, audit=audit)

    async def get_key(self, key_id: str) -> KeyRecord | None:
        return await self.keys.get_key(key_id)

    async def list_keys(self, account_id: int | None = None) -> list[KeyRecord]:
        return await self.keys.list_keys(account_id)

    async def update_key(
        self, key_id: str, controls: KeyControls, now: float, *, audit: AuditDraft[KeyRecord] | None = None
    ) -> KeyRecord | None:
        return await self.keys.update_key(key_id, controls, now, audit=audit)

    async def rotate_key(
        self,
        key_id: str,
        digest: bytes,
        prefix: str,
        last4: str,
        grace_seconds: float,
        now: float,
        *,
        audit: AuditDraft[KeyRecord] | None = None,
    ) -> KeyRecord | None:
        return await self.keys.rotate_key(key_id, digest, prefix, last4, grace_seconds, now, audit=audit)

    async def revoke_key(
        self, key_id: str, now: float, *, audit: AuditDraft[KeyRecord] | None = None
    ) -> KeyRecord | None:
        return await self.keys.revoke_key(key_id, now, audit=audit)

    async def key_page(
        self,
        account_id: int | None,
        *,
        limit: int,
        after: tuple[float, str] | None = None,
        search: str = "",
        owner: str | None = None,
    ) -> list[KeyRecord]:
        return await self.keys.key_page(account_id, limit=limit, after=after, search=search, owner=owner)

    async def keys_changed_since(self, version: int, limit: int | None = None) -> list[KeyRecord]:
        return await self.keys.keys_changed_since(version, limit)

    # AdminTokenStore (tokens) -----------------------------------------------

    async def create_admin_token(
        self,
        token_id: str,
        digest: bytes,
        account_id: int | None,
        now: float,
        *,
        name: str = "",
        prefix: str = "",
        last4: str = "",
        created_by: str | None = None,
        expires_at: float | None = None,
        audit: AuditDraft[AdminToken] | None = None,
    ) -> None:
        await self.tokens.create_admin_token(
            token_id,
            digest,
            account_id,
            now,
            name=name,
            prefix=prefix,
            last4=last4,
            created_by=created_by,
            expires_at=expires_at,
            audit=audit,
        )

    async def find_admin_token(self, digest: bytes) -> AdminToken | None:
        return await self.tokens.find_admin_token(digest)

    async def get_admin_token(self, token_id: str) -> AdminToken | None:
        return await self.tokens.get_admin_token(token_id)

    async def list_admin_tokens(self, account_id: int | None = None) -> list[AdminToken]:
        return await self.tokens.list_admin_tokens(account_id)

    async def revoke_admin_token(
        self, token_id: str, now: float, *, audit: AuditDraft[AdminToken] | None = None
    ) -> AdminToken | None:
        return await self.tokens.revoke_admin_token(token_id, now, audit=audit)

    async def touch_admin_token(self, token_id: str, now: float, resolution: float) -> bool:
        return await self.tokens.touch_admin_token(token_id, now, resolution)

    async def count_admin_tokens(self) -> int:
        return await self.tokens.count_admin_tokens()

    async def holds_credentials(self) -> bool:
        return await self.tokens.holds_credentials()

    async def secret_fingerprint(self) -> str | None:
        return await self.tokens.secret_fingerprint()

    async def record_secret_fingerprint(self, fingerprint: str, now: float) -> None:
        await self.tokens.record_secret_fingerprint(fingerprint, now)

    # LedgerStore (ledger) ---------------------------------------------------

    async def reserve(self, request: ReserveRequest) -> Reservation | Refusal:
        return await self.ledger.reserve(request)

    async def settle(self, usage: UsageRecord) -> Settlement:
        return await self.ledger.settle(usage)

    async def release(self, usage: UsageRecord) -> Settlement:
        return await self.ledger.release(usage)

    async def expired_reservations(self, now: float, limit: int = 100) -> list[tuple[str, str, int, str]]:
        return await self.ledger.expired_reservations(now, limit)

    async def pending_reservation_page(self, after: str, limit: int) -> list[tuple[str, str, int, str]]:
        return await self.ledger.pending_reservation_page(after, limit)

    async def month_spend(self, key_id: str, month: str) -> tuple[int, int]:
        return await self.ledger.month_spend(key_id, month)

    async def window_use(self, subject: str, window: Window, now: float) -> WindowUse:
        return await self.ledger.window_use(subject, window, now)

    async def pending_reservations(self) -> int:
        return await self.ledger.pending_reservations()

    async def reservation_stats(self) -> tuple[int, float | None]:
        return await self.ledger.reservation_stats()

    def observe_ledger(self, observer: LedgerObserver | None) -> None:
        self.ledger.observe_ledger(observer)

    # UsageStore (usage) -----------------------------------------------------

    async def usage_summary(
        self, month: str, *, account_id: int | None = None, key_id: str | None = None
    ) -> UsageSummary:
        return await self.usage.usage_summary(month, account_id=account_id, key_id=key_id)

    async def usage_records(
        self, month: str, *, account_id: int | None = None, key_id: str | None = None, limit: int = 100
    ) -> list[UsageRecord]:
        return await self.usage.usage_records(month, account_id=account_id, key_id=key_id, limit=limit)

    async def rebuild_rollups(self) -> int:
        return await self.usage.rebuild_rollups()

    async def delete_usage_before(self, cutoff: float, limit: int) -> int:
        return await self.usage.delete_usage_before(cutoff, limit)

    # UsageReports (reports) -------------------------------------------------

    async def usage_page(
        self, where: UsageFilter, *, limit: int, after: UsageCursor | None = None
    ) -> UsagePage:
        return await self.reports.usage_page(where, limit=limit, after=after)

    async def usage_count(self, where: UsageFilter) -> int:
        return await self.reports.usage_count(where)

    async def usage_facets(self, where: UsageFilter) -> UsageFacets:
        return await self.reports.usage_facets(where)

    async def usage_daily(
        self, month: str, *, account_id: int | None = None, key_id: str | None = None
    ) -> list[DailyUsage]:
        return await self.reports.usage_daily(month, account_id=account_id, key_id=key_id)

    async def top_keys(self, month: str, *, account_id: int | None = None, limit: int = 5) -> list[KeySpend]:
        return await self.reports.top_keys(month, account_id=account_id, limit=limit)

    async def key_activity(
        self, month: str, account_id: int | None = None, key_ids: list[str] | None = None
    ) -> dict[str, KeyActivity]:
        return await self.reports.key_activity(month, account_id, key_ids)

    # ResponseStore (responses) ----------------------------------------------

    async def save_response(self, response: NewResponse, max_account_bytes: int) -> bool:
        return await self.responses.save_response(response, max_account_bytes)

    async def save_responses(
        self, responses: Sequence[NewResponse], max_account_bytes: int
    ) -> list[bool | Exception]:
        return await self.responses.save_responses(responses, max_account_bytes)

    async def get_response(self, account_id: int, response_id: str, now: float) -> StoredResponse | None:
        return await self.responses.get_response(account_id, response_id, now)

    async def response_chain(
        self, account_id: int, response_id: str, now: float, max_depth: int
    ) -> list[StoredResponse] | None:
        return await self.responses.response_chain(account_id, response_id, now, max_depth)

    async def delete_response(self, account_id: int, response_id: str) -> bool:
        return await self.responses.delete_response(account_id, response_id)

    async def find_item(self, account_id: int, item_id: str, now: float) -> FoundItem | None:
        return await self.responses.find_item(account_id, item_id, now)

    async def create_conversation(
        self,
        conversation: StoredConversation,
        items: Sequence[StoredItem],
        expires_at: float,
        max_account_bytes: int,
    ) -> bool:
        return await self.responses.create_conversation(conversation, items, expires_at, max_account_bytes)

    async def get_conversation(
        self, account_id: int, conversation_id: str, now: float
    ) -> StoredConversation | None:
        return await self.responses.get_conversation(account_id, conversation_id, now)

    async def update_conversation(
        self, account_id: int, conversation_id: str, metadata: bytes, now: float, max_account_bytes: int
    ) -> StoredConversation | Literal[False] | None:
        return await self.responses.update_conversation(
            account_id, conversation_id, metadata, now, max_account_bytes
        )

    async def delete_conversation(self, account_id: int, conversation_id: str) -> bool:
        return await self.responses.delete_conversation(account_id, conversation_id)

    async def add_conversation_items(
        self,
        account_id: int,
        conversation_id: str,
        items: Sequence[StoredItem],
        now: float,
        expires_at: float,
        max_account_bytes: int,
    ) -> bool | None:
        return await self.responses.add_conversation_items(
            account_id, conversation_id, items, now, expires_at, max_account_bytes
        )

    async def conversation_items(
        self, account_id: int, conversation_id: str, now: float
    ) -> list[StoredItem] | None:
        return await self.responses.conversation_items(account_id, conversation_id, now)

    async def conversation_items_page(
        self, account_id: int, conversation_id: str, now: float, page: PageRequest
    ) -> ItemPage | None:
        return await self.responses.conversation_items_page(account_id, conversation_id, now, page)

    async def conversation_item(
        self, account_id: int, conversation_id: str, item_id: str, now: float
    ) -> StoredItem | None:
        return await self.responses.conversation_item(account_id, conversation_id, item_id, now)

    async def response_input_items_page(
        self, account_id: int, response_id: str, now: float, max_depth: int, page: PageRequest
    ) -> ItemPage | None:
        return await self.responses.response_input_items_page(account_id, response_id, now, max_depth, page)

    async def delete_conversation_item(self, account_id: int, conversation_id: str, item_id: str) -> bool:
        return await self.responses.delete_conversation_item(account_id, conversation_id, item_id)

    async def sweep_state(self, now: float, limit: int) -> int:
        return await self.responses.sweep_state(now, limit)

    async def forget_account_state(self, account_id: int) -> int:
        return await self.responses.forget_account_state(account_id)

    async def state_bytes(self, account_id: int) -> int:
        return await self.responses.state_bytes(account_id)

    # AuditStore (audit) -----------------------------------------------------

    async def append_audit(self, entry: AuditEntry) -> int:
        return await self.audit.append_audit(entry)

    async def audit_page(
        self, where: AuditFilter, *, limit: int, before_id: int | None = None
    ) -> list[AuditEntry]:
        return await self.audit.audit_page(where, limit=limit, before_id=before_id)

    async def ledger_page(
        self, account_id: int, *, limit: int, before_id: int | None = None
    ) -> list[LedgerEntry]:
        return await self.audit.ledger_page(account_id, limit=limit, before_id=before_id)

    async def statement_figures(
        self, account_id: int, since: float, until: float, month: str
    ) -> StatementFigures:
        return await self.audit.statement_figures(account_id, since, until, month)

    async def claim_alert(self, event: str, subject: str, window: str, now: float) -> bool:
        return await self.audit.claim_alert(event, subject, window, now)


class SqliteStore(WholeStore):
    """Every SQLite repository over one database file."""

    database: SqliteDatabase

    def __init__(self, path: Path) -> None:
        super().__init__(sqlite_repositories(path))
        self.path = path
        #: The file checks (``database_min_free_bytes`` is applied to it).
        self.file_probe = self.database.file_probe


class PostgresStore(WholeStore):
    """Every PostgreSQL repository over one pool."""

    database: PostgresDatabase

    def __init__(
        self,
        url: str,
        *,
        pool_max_size: int = DEFAULT_POOL_SIZE,
        batch_wait: float = DEFAULT_BATCH_WAIT_SECONDS,
    ) -> None:
        super().__init__(postgres_repositories(url, pool_max_size=pool_max_size, batch_wait=batch_wait))
        self.url = url

    def connections(self) -> ConnectionUse:
        return self.database.connections()


def open_store(
    url: str, *, pool_size: int = DEFAULT_POOL_SIZE, batch_wait: float = DEFAULT_BATCH_WAIT_SECONDS
) -> WholeStore:
    """``storage.open_store`` as one object."""
    if url.startswith("sqlite:///"):
        return SqliteStore(Path(url.removeprefix("sqlite:///")))
    return PostgresStore(url, pool_max_size=pool_size, batch_wait=batch_wait)


def whole_store(services: Services) -> WholeStore:
    """The repositories a running gateway's ``Services`` hands out, in one object."""
    return WholeStore(
        Repositories(
            services.database,
            accounts=services.accounts,
            keys=services.key_records,
            tokens=services.tokens,
            ledger=services.ledger_store,
            usage=services.usage,
            reports=services.reports,
            responses=services.responses,
            people=services.people,
            audit=services.audit,
        )
    )
