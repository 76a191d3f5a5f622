"""One engine's repositories over its database object, as ``storage.open_store`` builds them.

A bundle, not a facade: it forwards nothing. The app factory (``Services.build``), the CLI and the
supervisor's migration take it apart and hand each consumer the narrow protocol it uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from modelgate.storage.audit import AuditStore
from modelgate.storage.base import (
    AccountStore,
    AdminTokenStore,
    ConnectionUse,
    KeyStore,
    LedgerStore,
    UsageStore,
)
from modelgate.storage.people import PeopleStore
from modelgate.storage.reports import UsageReports
from modelgate.storage.responses import ResponseStore


class Database(Protocol):
    """What an engine's database object does beyond its repositories: the schema and the
    connections."""

    async def migrate(self) -> None: ...
    async def close(self) -> None: ...
    async def ping(self) -> None: ...
    def connections(self) -> ConnectionUse | None: ...


@dataclass(frozen=True, slots=True)
class Repositories:
    """Every repository of one database, and the database itself (each repository is composed
    over ``database``: closing it closes them all)."""

    database: Database
    accounts: AccountStore
    keys: KeyStore
    tokens: AdminTokenStore
    ledger: LedgerStore
    usage: UsageStore
    reports: UsageReports
    responses: ResponseStore
    #: People, sessions, members and invitations (``storage.people``).
    people: PeopleStore
    audit: AuditStore
