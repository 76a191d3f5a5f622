"""SQLite implementation of ``Store``: the embedded single-machine default.

One ``SqliteDatabase`` (connections, threads, transactions) and one repository per protocol over
it, composed into a ``Store``. Ledger writes of one loop turn share a transaction
(``group_commit``). Writes use ``BEGIN IMMEDIATE``, which takes SQLite's write lock up front: the
read-check-update inside a reservation is serialised against every other writer, the CLI
included (WAL mode lets readers run alongside). A reservation row lives only while its request is
in flight: settle and release delete it, and the usage record is the permanent trace.
"""

from __future__ import annotations

from pathlib import Path

from modelgate.storage.composed import ComposedStore
from modelgate.storage.file_probe import FileProbe
from modelgate.storage.sqlite_accounts import SqliteAccounts, SqliteKeys
from modelgate.storage.sqlite_database import SqliteDatabase
from modelgate.storage.sqlite_ledger import SqliteLedger
from modelgate.storage.sqlite_reports import SqliteReports
from modelgate.storage.sqlite_responses import SqliteResponses
from modelgate.storage.sqlite_tokens import SqliteAdminTokens


class SqliteStore(ComposedStore):
    """The SQLite repositories over one ``SqliteDatabase`` (one file)."""

    def __init__(self, path: Path) -> None:
        self.database = SqliteDatabase(path)
        reports = SqliteReports(self.database)
        super().__init__(
            self.database,
            accounts=SqliteAccounts(self.database),
            keys=SqliteKeys(self.database),
            admin_tokens=SqliteAdminTokens(self.database),
            ledger=SqliteLedger(self.database),
            usage=reports,
            reports=reports,
            responses=SqliteResponses(self.database),
        )

    @property
    def path(self) -> Path:
        return self.database.path

    @property
    def file_probe(self) -> FileProbe:
        """Refuses writes to a deleted or replaced file, and holds on a full disk (file_probe)."""
        return self.database.file_probe
