"""PostgreSQL implementation of ``Store``: the shared database of several gateway instances.

One ``PostgresDatabase`` (the pool, the write batchers) and one repository per protocol over it,
composed into a ``Store``. Every ledger operation is one transaction whose checks and writes are
serialised by row locks, so the invariants of ``storage.base`` hold across instances (the ledger:
``storage.postgres_ledger_store``; key versions: ``storage.postgres_accounts``; migrations:
``storage.postgres_database``).
"""

from __future__ import annotations

from modelgate.storage.base import DEFAULT_BATCH_WAIT_SECONDS, DEFAULT_POOL_SIZE, ConnectionUse
from modelgate.storage.composed import ComposedStore
from modelgate.storage.postgres_accounts import PostgresAccounts, PostgresKeys
from modelgate.storage.postgres_database import PostgresDatabase
from modelgate.storage.postgres_ledger_store import PostgresLedger
from modelgate.storage.postgres_reports import PostgresReports
from modelgate.storage.postgres_responses import PostgresResponses
from modelgate.storage.postgres_tokens import PostgresAdminTokens


class PostgresStore(ComposedStore):
    """The PostgreSQL repositories over one ``PostgresDatabase`` (one pool)."""

    def __init__(
        self,
        url: str,
        *,
        pool_max_size: int = DEFAULT_POOL_SIZE,
        batch_wait: float = DEFAULT_BATCH_WAIT_SECONDS,
    ) -> None:
        self.database = PostgresDatabase(url, pool_max_size=pool_max_size, batch_wait=batch_wait)
        reports = PostgresReports(self.database)
        super().__init__(
            self.database,
            accounts=PostgresAccounts(self.database),
            keys=PostgresKeys(self.database),
            admin_tokens=PostgresAdminTokens(self.database),
            ledger=PostgresLedger(self.database),
            usage=reports,
            reports=reports,
            responses=PostgresResponses(self.database),
        )

    @property
    def url(self) -> str:
        return self.database.url

    def connections(self) -> ConnectionUse:
        return self.database.connections()
