"""SQLite: the embedded single-machine default.

One ``SqliteDatabase`` (``storage.sqlite_database``: connections, transactions, threads,
migrations) and a repository per protocol composed over it. A reservation row lives only while
its request is in flight: settle and release delete it, and the usage record is the permanent
trace.
"""

from __future__ import annotations

from pathlib import Path

from modelgate.storage.repositories import Repositories
from modelgate.storage.sqlite_accounts import SqliteAccounts
from modelgate.storage.sqlite_audit import SqliteAudit
from modelgate.storage.sqlite_database import SqliteDatabase
from modelgate.storage.sqlite_keys import SqliteKeys
from modelgate.storage.sqlite_ledger import SqliteLedger
from modelgate.storage.sqlite_people import SqlitePeople
from modelgate.storage.sqlite_reports import SqliteReports
from modelgate.storage.sqlite_responses import SqliteResponses
from modelgate.storage.sqlite_tokens import SqliteAdminTokens
from modelgate.storage.sqlite_usage import SqliteUsage


def sqlite_repositories(path: Path) -> Repositories:
    """Every SQLite repository over one database file (``database.file_probe``: the file checks
    ``database_min_free_bytes`` is applied to)."""
    database = SqliteDatabase(path)
    return Repositories(
        database,
        accounts=SqliteAccounts(database),
        keys=SqliteKeys(database),
        tokens=SqliteAdminTokens(database),
        ledger=SqliteLedger(database),
        usage=SqliteUsage(database),
        reports=SqliteReports(database),
        responses=SqliteResponses(database),
        people=SqlitePeople(database),
        audit=SqliteAudit(database),
    )
