"""PostgreSQL implementation of ``Store``: the shared database of several gateway instances.

One ``PostgresDatabase`` (``storage.postgres_database``: the pool, connections, transactions, the
batchers, migrations) and one repository per protocol over it, composed by ``ComposedStore``.

Every instance holds an asyncpg pool; every ledger operation is one transaction whose checks and
writes are serialised by row locks, so the invariants of ``storage.base`` hold across instances:

- Reserves, settles and releases are group-committed (``storage.postgres_ledger``): what the
  instance has ready together runs as one call of the ``modelgate_ledger`` function (migration
  0006), which locks the reservations being finished, then the accounts, then the key-months, each
  in sorted order, and applies the rules of ``storage.base`` to the locked rows. Instances
  reserving against the same account queue on its row; no batch can deadlock another. A
  settlement claims its reservation with ``DELETE … RETURNING``: of a settle, a replay and a
  sweeper on another instance exactly one sees the row. The returned row (key, account, month,
  amount, endpoint, model, start) is what gets charged and recorded.
- Key versions come from a sequence. A sequence alone hands out numbers in call order but
  transactions commit in any order: a poller that saw version 7 could miss a version 6 committed
  just after. Key writers therefore hold a transaction-scoped advisory lock from ``nextval`` to
  commit (PostgreSQL makes a commit visible before it releases locks), so versions become visible in
  increasing order and ``keys_changed_since`` never skips one. Key writes are rare (admin actions),
  so serialising them costs nothing on the request path.
- Migrations run under a session advisory lock, so instances starting together apply each file once.
"""

from __future__ import annotations

from modelgate.storage.base import DEFAULT_BATCH_WAIT_SECONDS, DEFAULT_POOL_SIZE, ConnectionUse
from modelgate.storage.composed import ComposedStore
from modelgate.storage.postgres_database import PostgresDatabase
from modelgate.storage.postgres_reports import PostgresReports
from modelgate.storage.postgres_repositories import (
    PostgresAccounts,
    PostgresKeys,
    PostgresLedger,
    PostgresUsage,
)
from modelgate.storage.postgres_responses import PostgresResponses
from modelgate.storage.postgres_tokens import PostgresAdminTokens


class PostgresStore(ComposedStore):
    def __init__(
        self,
        url: str,
        *,
        pool_max_size: int = DEFAULT_POOL_SIZE,
        batch_wait: float = DEFAULT_BATCH_WAIT_SECONDS,
    ) -> None:
        self.url = url
        self.database = PostgresDatabase(url, pool_max_size=pool_max_size, batch_wait=batch_wait)
        super().__init__(
            self.database,
            accounts=PostgresAccounts(self.database),
            keys=PostgresKeys(self.database),
            admin_tokens=PostgresAdminTokens(self.database),
            ledger=PostgresLedger(self.database),
            usage=PostgresUsage(self.database),
            reports=PostgresReports(self.database),
            responses=PostgresResponses(self.database),
        )

    def connections(self) -> ConnectionUse:
        """Always a figure here: PostgreSQL has a pool."""
        return self.database.connections()
