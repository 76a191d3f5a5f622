"""Durable state behind one interface; the engine is chosen by the database URL."""

from __future__ import annotations

from pathlib import Path

from modelgate.storage.base import DEFAULT_BATCH_WAIT_SECONDS, DEFAULT_POOL_SIZE, StorageError, Store
from modelgate.storage.repositories import Repositories


def open_store(
    url: str, *, pool_size: int = DEFAULT_POOL_SIZE, batch_wait: float = DEFAULT_BATCH_WAIT_SECONDS
) -> Repositories:
    """``sqlite:///path/to/file.db`` (relative paths allowed) or ``postgresql://…``, with at most
    ``pool_size`` connections open and batches of writes waiting up to ``batch_wait`` seconds for
    company under load (PostgreSQL; ``database_pool_size``, ``database_batch_wait_seconds``)."""
    if url.startswith("sqlite:///"):
        from modelgate.storage.sqlite import sqlite_repositories

        return sqlite_repositories(Path(url.removeprefix("sqlite:///")))
    if url.startswith(("postgresql://", "postgres://")):
        from modelgate.storage.postgres import postgres_repositories

        return postgres_repositories(url, pool_max_size=pool_size, batch_wait=batch_wait)
    raise StorageError(
        f"database_url: unsupported scheme in {url.split('://', 1)[0]!r} (use sqlite:/// or postgresql://)"
    )


__all__ = ["Repositories", "StorageError", "Store", "open_store"]
