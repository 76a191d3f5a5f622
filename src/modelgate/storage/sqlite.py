"""SQLite implementation of ``Store``: the embedded single-machine default.

Operations run on the event loop's own connection (see ``SqliteStore``); ledger writes of one
loop turn share a transaction (``group_commit``). Writes use ``BEGIN IMMEDIATE``, which takes
SQLite's write lock up front: the read-check-update inside a reservation is serialised against
every other writer, the CLI included (WAL mode lets readers run alongside). A reservation row
lives only while its request is in flight: settle and release delete it, and the usage record
is the permanent trace.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import orjson

from modelgate.storage import rows
from modelgate.storage import sqlite_ledger as ledger_sql
from modelgate.storage.base import (
    MAX_UC,
    Account,
    AmountTooLarge,
    Conflict,
    KeyControls,
    KeyRecord,
    LedgerObserver,
    NewKey,
    Refusal,
    Reservation,
    ReserveRequest,
    Settlement,
    StorageError,
    UsageRecord,
    UsageSummary,
)
from modelgate.storage.file_probe import FileProbe
from modelgate.storage.group_commit import BUSY, GroupCommit
from modelgate.storage.sqlite_reports import SqliteReports
from modelgate.storage.sqlite_responses import SqliteResponses
from modelgate.storage.sqlite_tokens import SqliteAdminTokens

T = TypeVar("T")
#: Writes on the event loop between two checkpoints run by the worker thread.
CHECKPOINT_EVERY = 1000
log = logging.getLogger("modelgate.storage")

_KEY_COLUMNS = rows.KEY_COLUMNS
_USAGE_COLUMNS = rows.USAGE_COLUMNS
_account = rows.account_record
_usage = rows.usage_record


def _key(row: tuple[Any, ...]) -> KeyRecord:
    return rows.key_record(row, tuple(orjson.loads(row[5])) if row[5] is not None else None)


class SqliteStore(SqliteAdminTokens, SqliteReports, SqliteResponses):
    """Each thread that touches the store gets its own connection (``threading.local``).

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
        self._worker_ident: int | None = None
        self._connections: list[sqlite3.Connection] = []
        self._writes = 0
        self._checkpointing = False
        self._ledger = GroupCommit(self._write, self._run_on_worker)
        #: Refuses writes to a deleted or replaced file, and holds on a full disk (file_probe).
        self.file_probe = FileProbe(path)

    # plumbing -----------------------------------------------------------------------------

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
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

    async def _run_on_worker(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._on_worker, fn, ())

    def _on_worker(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        self._worker_ident = threading.get_ident()
        return fn(*args)

    def _db(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            waits = threading.get_ident() == self._worker_ident
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
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        self.file_probe.check_writable()
        db = self._db()
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
        if threading.get_ident() != self._worker_ident:
            self._count_write()

    def _count_write(self) -> None:
        """Every ``CHECKPOINT_EVERY`` writes made on the loop, a passive checkpoint on the worker
        (it neither blocks writers nor holds the GIL while SQLite copies pages)."""
        self._writes += 1
        if self._writes < CHECKPOINT_EVERY or self._checkpointing:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a synchronous caller): SQLite checkpoints on close
            return
        self._writes = 0
        self._checkpointing = True
        done = loop.run_in_executor(self._executor, self._checkpoint)
        done.add_done_callback(self._checkpointed)

    def _checkpoint(self) -> None:
        self._worker_ident = threading.get_ident()
        self._db().execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _checkpointed(self, done: asyncio.Future[None]) -> None:
        self._checkpointing = False
        if not done.cancelled() and done.exception() is not None:
            log.warning("sqlite checkpoint failed: %s", done.exception())

    async def migrate(self) -> None:
        await self._run(self._migrate)

    def _migrate(self) -> None:
        db = self._db()
        db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version TEXT PRIMARY KEY, applied_at REAL)")
        done = {row[0] for row in db.execute("SELECT version FROM schema_migrations")}
        folder = resources.files("modelgate").joinpath("storage/migrations/sqlite")
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            version = entry.name.removesuffix(".sql")
            if not entry.name.endswith(".sql") or version in done:
                continue
            with self._write() as tx:
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
        self.file_probe.check_room()
        await self._run(lambda: self._db().execute("SELECT 1").fetchone())

    def connections(self) -> None:
        return None  # one file, no pool

    # accounts -----------------------------------------------------------------------------

    async def create_account(self, name: str, balance_uc: int, now: float) -> Account:
        def op() -> Account:
            with self._write() as db:
                cur = db.execute(
                    "INSERT INTO accounts (name, balance_uc, created_at) VALUES (?, ?, ?)",
                    (name, balance_uc, now),
                )
                if balance_uc:
                    db.execute(
                        "INSERT INTO topups (account_id, amount_uc, note, created_at) VALUES (?, ?, 'initial', ?)",
                        (cur.lastrowid, balance_uc, now),
                    )
                return _account(
                    db.execute("SELECT * FROM accounts WHERE id = ?", (cur.lastrowid,)).fetchone()
                )

        return await self._run(op)

    async def get_account(self, account_id: int) -> Account | None:
        row = await self._run(
            lambda: self._db().execute("SELECT * FROM accounts WHERE id = ?", (account_id,)).fetchone()
        )
        return _account(row) if row else None

    async def find_account(self, name: str) -> Account | None:
        row = await self._run(
            lambda: self._db().execute("SELECT * FROM accounts WHERE name = ?", (name,)).fetchone()
        )
        return _account(row) if row else None

    async def list_accounts(self) -> list[Account]:
        rows = await self._run(lambda: self._db().execute("SELECT * FROM accounts ORDER BY id").fetchall())
        return [_account(r) for r in rows]

    async def top_up(self, account_id: int, amount_uc: int, note: str, now: float) -> Account:
        def op() -> Account:
            with self._write() as db:
                db.execute(
                    "INSERT INTO topups (account_id, amount_uc, note, created_at) VALUES (?, ?, ?, ?)",
                    (account_id, amount_uc, note, now),
                )
                updated = db.execute(
                    "UPDATE accounts SET balance_uc = balance_uc + ? WHERE id = ? AND balance_uc + ? <= ?",
                    (amount_uc, account_id, amount_uc, MAX_UC),
                ).rowcount
                if (
                    not updated
                    and db.execute("SELECT 1 FROM accounts WHERE id = ?", (account_id,)).fetchone()
                ):
                    raise AmountTooLarge(f"the balance would exceed the maximum of {MAX_UC} µc")
                return _account(db.execute("SELECT * FROM accounts WHERE id = ?", (account_id,)).fetchone())

        return await self._run(op)

    async def topups_total(self, account_id: int) -> int:
        row = await self._run(
            lambda: (
                self._db()
                .execute("SELECT COALESCE(SUM(amount_uc), 0) FROM topups WHERE account_id = ?", (account_id,))
                .fetchone()
            )
        )
        return int(row[0])

    # keys ---------------------------------------------------------------------------------

    @staticmethod
    def _next_version(db: sqlite3.Connection) -> int:
        return int(db.execute("SELECT COALESCE(MAX(version), 0) + 1 FROM api_keys").fetchone()[0])

    @staticmethod
    def _get_key(db: sqlite3.Connection, key_id: str) -> KeyRecord | None:
        row = db.execute(f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE id = ?", (key_id,)).fetchone()
        return _key(row) if row else None

    async def create_key(self, key: NewKey, now: float) -> KeyRecord:
        allowed = orjson.dumps(list(key.allowed_models)).decode() if key.allowed_models is not None else None

        def op() -> KeyRecord:
            with self._write() as db:
                db.execute(
                    "INSERT INTO api_keys (id, account_id, name, grp, rpm, allowed_models, monthly_cap_uc, "
                    "digest, prefix, last4, created_at, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        key.id,
                        key.account_id,
                        key.name,
                        key.group,
                        key.rpm,
                        allowed,
                        key.monthly_cap_uc,
                        key.digest,
                        key.prefix,
                        key.last4,
                        now,
                        self._next_version(db),
                    ),
                )
                record = self._get_key(db, key.id)
                assert record is not None
                return record

        return await self._run(op)

    async def get_key(self, key_id: str) -> KeyRecord | None:
        return await self._run(lambda: self._get_key(self._db(), key_id))

    async def list_keys(self, account_id: int | None = None) -> list[KeyRecord]:
        def op() -> list[KeyRecord]:
            if account_id is None:
                rows = self._db().execute(f"SELECT {_KEY_COLUMNS} FROM api_keys ORDER BY created_at, id")
            else:
                rows = self._db().execute(
                    f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE account_id = ? ORDER BY created_at, id",
                    (account_id,),
                )
            return [_key(r) for r in rows.fetchall()]

        return await self._run(op)

    async def update_key(self, key_id: str, controls: KeyControls, now: float) -> KeyRecord | None:
        sets: list[str] = []
        args: list[Any] = []
        if controls.name is not None:
            sets.append("name = ?")
            args.append(controls.name)
        if controls.rpm is not None:
            sets.append("rpm = ?")
            args.append(controls.rpm)
        if controls.allowed_models is not None:
            sets.append("allowed_models = ?")
            args.append(
                orjson.dumps(list(controls.allowed_models)).decode() if controls.allowed_models else None
            )
        if controls.monthly_cap_uc is not None:
            sets.append("monthly_cap_uc = ?")
            args.append(None if controls.monthly_cap_uc < 0 else controls.monthly_cap_uc)

        def op() -> KeyRecord | None:
            with self._write() as db:
                if self._get_key(db, key_id) is None:
                    return None
                db.execute(
                    f"UPDATE api_keys SET {', '.join([*sets, 'version = ?'])} WHERE id = ?",
                    (*args, self._next_version(db), key_id),
                )
                return self._get_key(db, key_id)

        return await self._run(op)

    async def rotate_key(
        self, key_id: str, digest: bytes, prefix: str, last4: str, grace_seconds: float, now: float
    ) -> KeyRecord | None:
        def op() -> KeyRecord | None:
            with self._write() as db:
                current = self._get_key(db, key_id)
                if current is None or current.state != "active":
                    return None
                # With no grace the old secret is dropped at once; otherwise it is kept as the
                # previous digest until it expires (one previous secret at a time).
                previous, expires = (
                    (current.digest, now + grace_seconds) if grace_seconds > 0 else (None, None)
                )
                db.execute(
                    "UPDATE api_keys SET digest = ?, prefix = ?, last4 = ?, previous_digest = ?, "
                    "previous_expires_at = ?, rotated_at = ?, version = ? WHERE id = ?",
                    (digest, prefix, last4, previous, expires, now, self._next_version(db), key_id),
                )
                return self._get_key(db, key_id)

        return await self._run(op)

    async def revoke_key(self, key_id: str, now: float) -> KeyRecord | None:
        def op() -> KeyRecord | None:
            with self._write() as db:
                current = self._get_key(db, key_id)
                if current is None:
                    return None
                if current.state != "disabled":
                    db.execute(
                        "UPDATE api_keys SET state = 'disabled', revoked_at = ?, version = ? WHERE id = ?",
                        (now, self._next_version(db), key_id),
                    )
                return self._get_key(db, key_id)

        return await self._run(op)

    async def keys_changed_since(self, version: int) -> list[KeyRecord]:
        rows = await self._run(
            lambda: (
                self._db()
                .execute(
                    f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE version > ? ORDER BY version", (version,)
                )
                .fetchall()
            )
        )
        return [_key(r) for r in rows]

    # ledger -------------------------------------------------------------------------------

    async def reserve(self, request: ReserveRequest) -> Reservation | Refusal:
        self.file_probe.check_room()
        return await self._ledger.run(lambda db: ledger_sql.reserve(db, request))

    async def settle(self, usage: UsageRecord) -> Settlement:
        return await self._ledger.run(lambda db: ledger_sql.finish(db, usage, charge=True))

    async def release(self, usage: UsageRecord) -> Settlement:
        return await self._ledger.run(lambda db: ledger_sql.finish(db, usage, charge=False))

    async def expired_reservations(self, now: float, limit: int = 100) -> list[tuple[str, str, int, str]]:
        rows = await self._run(
            lambda: (
                self._db()
                .execute(
                    "SELECT request_id, key_id, account_id, month FROM reservations "
                    "WHERE expires_at < ? ORDER BY expires_at LIMIT ?",
                    (now, limit),
                )
                .fetchall()
            )
        )
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    async def pending_reservation_page(self, after: str, limit: int) -> list[tuple[str, str, int, str]]:
        rows = await self._run(
            lambda: (
                self._db()
                .execute(
                    "SELECT request_id, key_id, account_id, month FROM reservations "
                    "WHERE request_id > ? ORDER BY request_id LIMIT ?",
                    (after, limit),
                )
                .fetchall()
            )
        )
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    async def month_spend(self, key_id: str, month: str) -> tuple[int, int]:
        row = await self._run(
            lambda: (
                self._db()
                .execute(
                    "SELECT spent_uc, reserved_uc FROM key_month_spend WHERE key_id = ? AND month = ?",
                    (key_id, month),
                )
                .fetchone()
            )
        )
        return (int(row[0]), int(row[1])) if row else (0, 0)

    async def pending_reservations(self) -> int:
        row = await self._run(lambda: self._db().execute("SELECT COUNT(*) FROM reservations").fetchone())
        return int(row[0])

    async def reservation_stats(self) -> tuple[int, float | None]:
        sql = "SELECT COUNT(*), MIN(created_at) FROM reservations"
        row = await self._run(lambda: self._db().execute(sql).fetchone())
        return int(row[0]), None if row[1] is None else float(row[1])

    async def _group_write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn`` in the next shared ledger transaction, on the loop (small stored answers)."""
        result: T = await self._ledger.run(fn)
        return result

    def observe_ledger(self, observer: LedgerObserver | None) -> None:
        self._ledger.observer = observer

    # usage --------------------------------------------------------------------------------

    @staticmethod
    def _usage_filter(month: str, account_id: int | None, key_id: str | None) -> tuple[str, list[Any]]:
        where: list[str] = ["month = ?"]
        args: list[Any] = [month]
        if account_id is not None:
            where.append("account_id = ?")
            args.append(account_id)
        if key_id is not None:
            where.append("key_id = ?")
            args.append(key_id)
        return " AND ".join(where), args

    async def usage_summary(
        self, month: str, *, account_id: int | None = None, key_id: str | None = None
    ) -> UsageSummary:
        where, args = self._usage_filter(month, account_id, key_id)

        def op() -> UsageSummary:
            db = self._db()
            total = db.execute(
                "SELECT COUNT(*), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), "
                "COALESCE(SUM(cache_creation_tokens), 0), COALESCE(SUM(cache_read_tokens), 0), "
                "COALESCE(SUM(charged_uc), 0), COALESCE(SUM(web_search_requests), 0) "
                f"FROM usage_records WHERE {where}",
                args,
            ).fetchone()
            by_model = db.execute(
                f"SELECT model, SUM(charged_uc) FROM usage_records WHERE {where} GROUP BY model ORDER BY model",
                args,
            ).fetchall()
            requests, input_tokens, output_tokens, cache_creation, cache_read, charged, searches = (
                int(v) for v in total
            )
            return UsageSummary(
                month,
                requests,
                input_tokens,
                output_tokens,
                cache_creation,
                cache_read,
                charged,
                by_model={m: int(c) for m, c in by_model},
                web_search_requests=searches,
            )

        return await self._run(op)

    async def usage_records(
        self, month: str, *, account_id: int | None = None, key_id: str | None = None, limit: int = 100
    ) -> list[UsageRecord]:
        where, args = self._usage_filter(month, account_id, key_id)
        rows = await self._run(
            lambda: (
                self._db()
                .execute(
                    f"SELECT {_USAGE_COLUMNS} FROM usage_records WHERE {where} ORDER BY created_at DESC LIMIT ?",
                    (*args, limit),
                )
                .fetchall()
            )
        )
        return [_usage(r) for r in rows]
