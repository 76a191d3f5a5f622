"""PostgreSQL: the shared database of several gateway instances.

One ``PostgresDatabase`` (``storage.postgres_database``) and a repository per protocol composed
over it.

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
- Key versions are ordered by an advisory lock (``storage.postgres_keys``); migrations run under
  another (``storage.postgres_database``).
"""

from __future__ import annotations

from modelgate.storage.base import DEFAULT_BATCH_WAIT_SECONDS, DEFAULT_POOL_SIZE
from modelgate.storage.postgres_accounts import PostgresAccounts
from modelgate.storage.postgres_audit import PostgresAudit
from modelgate.storage.postgres_database import PostgresDatabase
from modelgate.storage.postgres_keys import PostgresKeys
from modelgate.storage.postgres_people import PostgresPeople
from modelgate.storage.postgres_reports import PostgresReports
from modelgate.storage.postgres_reservations import PostgresLedger
from modelgate.storage.postgres_responses import PostgresResponses
from modelgate.storage.postgres_tokens import PostgresAdminTokens
from modelgate.storage.postgres_usage import PostgresUsage
from modelgate.storage.repositories import Repositories


def postgres_repositories(
    url: str,
    *,
    pool_max_size: int = DEFAULT_POOL_SIZE,
    batch_wait: float = DEFAULT_BATCH_WAIT_SECONDS,
) -> Repositories:
    """Every PostgreSQL repository over one pool."""
    database = PostgresDatabase(url, pool_max_size=pool_max_size, batch_wait=batch_wait)
    return Repositories(
        database,
        accounts=PostgresAccounts(database),
        keys=PostgresKeys(database),
        tokens=PostgresAdminTokens(database),
        ledger=PostgresLedger(database),
        usage=PostgresUsage(database),
        reports=PostgresReports(database),
        responses=PostgresResponses(database),
        people=PostgresPeople(database),
        audit=PostgresAudit(database),
    )
