"""The runtime upstream store (``storage.upstream_entries``) of an open database, for its engine."""

from __future__ import annotations

from modelgate.storage.repositories import Database
from modelgate.storage.upstream_entries import UpstreamStore


def upstream_store(database: Database) -> UpstreamStore:
    """The repository over ``database`` (the one ``open_store`` made)."""
    from modelgate.storage.sqlite_database import SqliteDatabase

    if isinstance(database, SqliteDatabase):
        from modelgate.storage.sqlite_upstreams import SqliteUpstreams

        return SqliteUpstreams(database)
    from modelgate.storage.postgres_database import PostgresDatabase

    if isinstance(database, PostgresDatabase):
        from modelgate.storage.postgres_upstreams import PostgresUpstreams

        return PostgresUpstreams(database)
    raise TypeError(f"no upstream store for {type(database).__name__}")
