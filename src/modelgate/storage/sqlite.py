"""SQLite implementation of ``Store``: the embedded single-machine default.

One ``SqliteDatabase`` (``storage.sqlite_database``: connections, where operations run, write
transactions, checkpoints, migrations) and one repository per protocol over it, composed by
``ComposedStore``.
"""

from __future__ import annotations

from pathlib import Path

from modelgate.storage.composed import ComposedStore
from modelgate.storage.sqlite_database import SqliteDatabase
from modelgate.storage.sqlite_reports import SqliteReports
from modelgate.storage.sqlite_repositories import SqliteAccounts, SqliteKeys, SqliteLedger, SqliteUsage
from modelgate.storage.sqlite_responses import SqliteResponses
from modelgate.storage.sqlite_tokens import SqliteAdminTokens


class SqliteStore(ComposedStore):
    def __init__(self, path: Path) -> None:
        self.path = path
        self.database = SqliteDatabase(path)
        super().__init__(
            self.database,
            accounts=SqliteAccounts(self.database),
            keys=SqliteKeys(self.database),
            admin_tokens=SqliteAdminTokens(self.database),
            ledger=SqliteLedger(self.database),
            usage=SqliteUsage(self.database),
            reports=SqliteReports(self.database),
            responses=SqliteResponses(self.database),
        )
