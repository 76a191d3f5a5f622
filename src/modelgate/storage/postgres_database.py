"""The PostgreSQL database object: the asyncpg pool, connections and transactions, the
group-committed ledger (``storage.postgres_ledger``) and stored answers (``storage.postgres_saves``),
and the migrations. The repositories (``storage.postgres_*``) are composed over it, and
``storage.postgres.PostgresStore`` puts them together.

Migrations run under a session advisory lock, so instances starting together apply each file once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from importlib import resources
from typing import Any

import asyncpg

from modelgate.storage.base import DEFAULT_BATCH_WAIT_SECONDS, DEFAULT_POOL_SIZE, ConnectionUse
from modelgate.storage.postgres_batches import DATABASE_ERRORS, connection_lost
from modelgate.storage.postgres_ledger import LedgerBatches
from modelgate.storage.postgres_saves import ResponseSaves
from modelgate.storage.records import Conflict, StorageError

#: Advisory lock ids ("modelgat" in ASCII, then +1): migrations, and key-version ordering.
_LOCK_MIGRATIONS = 0x6D6F_6465_6C67_6174
_LOCK_KEY_VERSIONS = _LOCK_MIGRATIONS + 1
COMMAND_TIMEOUT_SECONDS = 15.0


async def _nothing_to_reset(conn: Any) -> None:
    """What a connection back in the pool needs beyond asyncpg's own clean-up (which rolls back an
    open transaction): nothing. The store leaves no session state behind (no LISTEN, SET or
    cursor; advisory locks are transaction-scoped, the migrations' session lock is released in a
    ``finally``), and asyncpg's default reset would cost a round trip on every release."""


class PostgresDatabase:
    """One PostgreSQL database: the pool, connections and transactions, the group-committed
    ledger and stored answers, and the migrations; the repositories run their SQL through it."""

    def __init__(
        self,
        url: str,
        *,
        pool_max_size: int = DEFAULT_POOL_SIZE,
        batch_wait: float = DEFAULT_BATCH_WAIT_SECONDS,
    ) -> None:
        self.url = url
        self._pool_max_size = pool_max_size
        # The pool is made on first use, on the event loop that uses it (the store is built
        # before the server's loop runs).
        self._pool: Any = None
        self._pool_lock = asyncio.Lock()
        #: Reserves, settles and releases, group-committed (``storage.postgres_ledger``).
        self.ledger_batches = LedgerBatches(self.get_pool, wait=batch_wait)
        #: Stored Responses answers, group-committed (``storage.postgres_saves``).
        self.saves = ResponseSaves(self.get_pool, wait=batch_wait)

    # plumbing -----------------------------------------------------------------------------

    async def get_pool(self) -> Any:
        if self._pool is None:
            async with self._pool_lock:
                if self._pool is None:
                    self._pool = await asyncpg.create_pool(
                        self.url,
                        min_size=1,
                        max_size=self._pool_max_size,
                        command_timeout=COMMAND_TIMEOUT_SECONDS,
                        reset=_nothing_to_reset,
                    )
        return self._pool

    @asynccontextmanager
    async def conn(self) -> AsyncIterator[Any]:
        try:
            pool = await self.get_pool()
            async with pool.acquire() as conn:
                yield conn
        except asyncpg.IntegrityConstraintViolationError as exc:
            raise Conflict(str(exc)) from exc
        except DATABASE_ERRORS as exc:
            if self._pool is not None and connection_lost(exc):
                # The server ended its sessions (a restart): the pool's idle ones are stale too.
                await self._pool.expire_connections()
            raise StorageError(f"postgresql: {exc}") from exc

    @asynccontextmanager
    async def tx(self) -> AsyncIterator[Any]:
        async with self.conn() as conn, conn.transaction():
            yield conn

    async def migrate(self) -> None:
        folder = resources.files("modelgate").joinpath("storage/migrations/postgresql")
        files = sorted((e for e in folder.iterdir() if e.name.endswith(".sql")), key=lambda e: e.name)
        async with self.conn() as conn:
            await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_MIGRATIONS)
            try:
                await conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations "
                    "(version TEXT PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
                )
                done = {r[0] for r in await conn.fetch("SELECT version FROM schema_migrations")}
                for entry in files:
                    version = entry.name.removesuffix(".sql")
                    if version in done:
                        continue
                    async with conn.transaction():
                        await conn.execute(entry.read_text("utf-8"))
                        await conn.execute(
                            "INSERT INTO schema_migrations VALUES ($1, extract(epoch FROM now()))", version
                        )
            finally:
                await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_MIGRATIONS)

    async def close(self) -> None:
        if self._pool is not None:
            # The batchers hand back the connections they keep; the pool waits for all of them.
            await self.ledger_batches.aclose()
            await self.saves.aclose()
            pool, self._pool = self._pool, None
            await pool.close()

    async def ping(self) -> None:
        async with self.conn() as conn:
            await conn.fetchval("SELECT 1")

    def connections(self) -> ConnectionUse:
        pool = self._pool
        if pool is None:  # nothing asked yet: the pool opens on first use
            return ConnectionUse(in_use=0, idle=0, limit=self._pool_max_size)
        size, idle = pool.get_size(), pool.get_idle_size()
        return ConnectionUse(in_use=size - idle, idle=idle, limit=self._pool_max_size)


class PostgresRepository:
    """A repository's access to the database it is composed over."""

    def __init__(self, database: PostgresDatabase) -> None:
        self.database = database

    def _conn(self) -> AbstractAsyncContextManager[Any]:
        return self.database.conn()

    def _tx(self) -> AbstractAsyncContextManager[Any]:
        return self.database.tx()
