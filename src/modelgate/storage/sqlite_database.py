"""The SQLite database object: connections, transactions, the worker and reader threads, the
ledger's group commit and the migrations. The repositories (``storage.sqlite_*``) are composed
over it, and ``storage.sqlite.SqliteStore`` puts them together.

Operations run on the event loop's own connection (see ``SqliteDatabase``); ledger writes of one
loop turn share a transaction (``group_commit``). Writes use ``BEGIN IMMEDIATE``, which takes
SQLite's write lock up front: the read-check-update inside a reservation is serialised against
every other writer, the CLI included (WAL mode lets readers run alongside).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from modelgate.storage.file_probe import FileProbe
from modelgate.storage.group_commit import BUSY, GroupCommit
from modelgate.storage.records import Conflict, StorageError

T = TypeVar("T")
#: Writes on the event loop between two checkpoints run by the worker thread.
CHECKPOINT_EVERY = 1000
log = logging.getLogger("modelgate.storage")


class SqliteDatabase:
    """One SQLite file: its connections, transactions, threads and migrations; the repositories
    (``SqliteAccounts``, ``SqliteLedger``, …) run their SQL through it.

    Each thread that touches the database gets its own connection (``threading.local``).

    Operations run inline on the caller's thread (the event loop) on a connection that never
    waits for a lock (``busy_timeout=0``): a ledger transaction is tens of microseconds of work, far
    less than a hop to a worker thread and back. Only when another writer holds the database (the
    CLI, an admin command, a migration) does SQLite answer "busy", and the same operation is then
    run on the single worker thread, whose connection waits up to 10 s. Each operation is one
    transaction, so a refused inline attempt has changed nothing.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="modelgate-sqlite")
        self._local = threading.local()
        self.worker_ident: int | None = None
        self._connections: list[sqlite3.Connection] = []
        self.writes = 0
        self._checkpointing = False
        #: The ledger's shared transactions (``storage.group_commit``); small stored answers join them.
        self.group_commit = GroupCommit(self.write, self.run_on_worker)
        self._reader: ThreadPoolExecutor | None = None
        #: Refuses writes to a deleted or replaced file, and holds on a full disk (file_probe).
        self.file_probe = FileProbe(path)

    # plumbing -----------------------------------------------------------------------------

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            try:
                return fn(*args)
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode not in BUSY:
                    raise
            # Another writer holds the lock: wait for it off the event loop.
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, self._on_worker, fn, args)
        except sqlite3.IntegrityError as exc:
            raise Conflict(str(exc)) from exc
        except (sqlite3.Error, OSError) as exc:  # OSError: the database file or folder is gone
            raise StorageError(f"sqlite: {exc}") from exc

    async def run_on_worker(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._on_worker, fn, ())

    def _on_worker(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        self.worker_ident = threading.get_ident()
        return fn(*args)

    def db(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            waits = threading.get_ident() == self.worker_ident
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=0)
            # 1 KiB pages (for a new database; an existing one keeps its size): a commit writes
            # every page it touched to the WAL, and ledger rows are small, so smaller pages mean
            # a quarter of the WAL bytes per request, cheaper commits and shorter checkpoints.
            conn.execute("PRAGMA page_size=1024")
            conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a commit survives a process crash; only an OS crash or power loss
            # can drop the last transactions (docs/billing.md, "How the ledger is stored").
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(f"PRAGMA busy_timeout={10000 if waits else 0}")
            if not waits:
                # Checkpoints copy megabytes from the WAL into the database: never on the event
                # loop. The worker runs them (see _count_write) and keeps SQLite's own default.
                conn.execute("PRAGMA wal_autocheckpoint=0")
            self._local.conn = conn
            self._connections.append(conn)
            self.file_probe.opened()
        return conn

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        self.file_probe.check_writable()
        db = self.db()
        try:
            db.execute("BEGIN IMMEDIATE")
            yield db
            db.execute("COMMIT")
        except BaseException:
            # Whatever failed (the work, or a BEGIN or COMMIT cut by a full disk, an I/O error or
            # an interrupt, which can leave the transaction open, or SQLite may have rolled it
            # back already): no transaction stays open, or every later BEGIN here would fail.
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        if threading.get_ident() != self.worker_ident:
            self._count_write()

    def _count_write(self) -> None:
        """Every ``CHECKPOINT_EVERY`` writes made on the loop, a passive checkpoint on the worker
        (it neither blocks writers nor holds the GIL while SQLite copies pages)."""
        self.writes += 1
        if self.writes < CHECKPOINT_EVERY or self._checkpointing:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a synchronous caller): SQLite checkpoints on close
            return
        self.writes = 0
        self._checkpointing = True
        done = loop.run_in_executor(self._executor, self._checkpoint)
        done.add_done_callback(self._checkpointed)

    def _checkpoint(self) -> None:
        self.worker_ident = threading.get_ident()
        self.db().execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _checkpointed(self, done: asyncio.Future[None]) -> None:
        self._checkpointing = False
        if not done.cancelled() and done.exception() is not None:
            log.warning("sqlite checkpoint failed: %s", done.exception())

    async def migrate(self) -> None:
        await self.run(self._migrate)

    def _migrate(self) -> None:
        db = self.db()
        db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version TEXT PRIMARY KEY, applied_at REAL)")
        done = {row[0] for row in db.execute("SELECT version FROM schema_migrations")}
        folder = resources.files("modelgate").joinpath("storage/migrations/sqlite")
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            version = entry.name.removesuffix(".sql")
            if not entry.name.endswith(".sql") or version in done:
                continue
            with self.write() as tx:
                # Checked again under the write lock: another process (a worker of the same
                # instance, the CLI) may have applied it since the list above was read.
                if tx.execute("SELECT 1 FROM schema_migrations WHERE version = ?", (version,)).fetchone():
                    continue
                for statement in entry.read_text("utf-8").split(";\n"):
                    if statement.strip():
                        tx.execute(statement)
                tx.execute("INSERT INTO schema_migrations VALUES (?, unixepoch())", (version,))

    async def close(self) -> None:
        self._close_reader()
        self._executor.shutdown(wait=True)
        for conn in self._connections:
            conn.close()
        self._connections.clear()
        self._local = threading.local()

    async def ping(self) -> None:
        self.file_probe.check_room(fresh=True)
        await self.run(lambda: self.db().execute("SELECT 1").fetchone())

    def connections(self) -> None:
        return None  # one file, no pool

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn`` on the reader thread, with its own connection (WAL lets it read while the loop
        writes): for reports and stored objects, which can scan or return megabytes."""
        if self._reader is None:
            self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="modelgate-sqlite-reports")
        try:
            return await asyncio.get_running_loop().run_in_executor(self._reader, lambda: fn(self.db()))
        except (sqlite3.Error, OSError) as exc:
            raise StorageError(f"sqlite: {exc}") from exc

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader.shutdown(wait=True)
            self._reader = None

    async def group_write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn`` in the next shared ledger transaction, on the loop (small stored answers)."""
        result: T = await self.group_commit.run(fn)
        return result


class SqliteRepository:
    """A repository's access to the database it is composed over (the same calls for every
    SQLite repository, so their bodies read alike)."""

    def __init__(self, database: SqliteDatabase) -> None:
        self.database = database

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await self.database.run(fn, *args)

    async def _run_on_worker(self, fn: Callable[[], T]) -> T:
        return await self.database.run_on_worker(fn)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self.database.read(fn)

    async def _group_write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self.database.group_write(fn)

    def _db(self) -> sqlite3.Connection:
        return self.database.db()

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        return self.database.write()
