"""Group commit for SQLite ledger writes: the writes of one event-loop turn share a transaction.

A SQLite commit writes every page the transaction touched to the WAL (a reserve or a settle
touches several), and under load most of a ledger operation's cost is that commit. Concurrent
requests touch the same pages (their account, their key's month, the newest usage records), so
when several operations are submitted in the same turn of the event loop they run in one
``BEGIN IMMEDIATE … COMMIT`` right after that turn and those pages are written once.

Nothing is weakened: an operation that fails (a duplicate request id, a constraint) is rolled
back alone and only its caller sees the error; an operation's result is handed to its caller only
after the shared ``COMMIT`` succeeded; and one operation submitted alone (no concurrency) commits
on the next loop turn as before. A batch first runs without savepoints (two statements per
operation saved: a constraint failure is rare); when one of its operations fails a constraint, the
whole transaction is rolled back and the batch runs again with each operation inside its own
``SAVEPOINT`` (every operation is a function of the database alone, so running it again after a
rollback gives what it would have given the first time).

The usage rollups are kept here, once per batch: a settlement submitted with its usage record
(``run(..., record=usage)``) that applied is summed into the batch's ``UsageSums``, and each
distinct rollup row is upserted once just before the shared ``COMMIT`` (``storage.rollup_fold``),
so the records and their sums commit together or not at all.

When another process holds the write lock (another worker of ``server.workers``: each of their
transactions holds it for a fraction of a millisecond), the batch is tried again on the loop, at
the next turn and then every millisecond, and what is submitted meanwhile joins it, so a worker
that met the lock commits more at once next time. Only after ``LOOP_RETRY_SECONDS`` (a long
writer: the CLI, an admin command, a migration) does the batch go to the store's worker thread,
which waits for the lock. (Handing every conflict to the thread, whose SQLite busy handler sleeps
a millisecond and more, cost two workers on two cores a dozen context switches per request.)
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from modelgate.storage.base import Conflict, LedgerObserver, Settlement, StorageError, UsageRecord
from modelgate.storage.rollup_fold import UsageSums

T = TypeVar("T")
#: A ledger operation: runs inside an open write transaction and returns its outcome.
Operation = Callable[[sqlite3.Connection], Any]
#: A queued operation: the operation, its caller's future, and the usage record it writes if its
#: outcome is an applied ``Settlement`` (summed into the rollups).
Queued = tuple[Operation, "asyncio.Future[Any]", UsageRecord | None]
#: SQLite's "database is locked" answers (another connection holds the write lock).
BUSY = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
#: How long a batch that meets another process's write lock is retried on the loop before it
#: waits on the worker thread instead.
LOOP_RETRY_SECONDS = 0.05
#: The pause between those retries after the first (at the next loop turn).
RETRY_PAUSE_SECONDS = 0.001


class _ConstraintFailed(Exception):
    """An operation of a batch run without savepoints failed a constraint (the batch is run
    again with one savepoint per operation)."""


class GroupCommit:
    def __init__(
        self,
        transaction: Callable[[], AbstractContextManager[sqlite3.Connection]],
        on_worker: Callable[[Callable[[], list[Any]]], Awaitable[list[Any]]],
    ) -> None:
        self._transaction = transaction
        self._on_worker = on_worker
        self._queue: list[Queued] = []
        #: Loop time the batch now waiting for another process's lock first met it (None: not waiting).
        self._locked_since: float | None = None
        #: Told the time and size of every transaction (metrics); set by ``observe_ledger``.
        self.observer: LedgerObserver | None = None

    async def run(self, operation: Callable[[sqlite3.Connection], T], record: UsageRecord | None = None) -> T:
        """Run ``operation`` in the next shared transaction; returns once that has committed.
        ``record``: the usage record the operation writes when it returns an applied
        ``Settlement`` (as the operation leaves it: the stored fields), for the rollups."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()
        self._queue.append((operation, done, record))
        if len(self._queue) == 1:
            loop.call_soon(self._flush)
        # A caller cancelled before the flush takes its operation out of the batch (the flush skips
        # cancelled futures), so a cancellation never leaves a half-known write behind.
        return await done

    def _flush(self) -> None:
        batch = [queued for queued in self._queue if not queued[1].cancelled()]
        self._queue = []
        if not batch:
            return
        # Only a batch that meets the lock again keeps waiting (set below); any other end clears it.
        locked_since, self._locked_since = self._locked_since, None
        try:
            outcomes = self._apply(batch)
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode not in BUSY:
                self._fail(batch, exc)
                return
            loop = asyncio.get_running_loop()
            now = loop.time()
            if locked_since is None or now - locked_since < LOOP_RETRY_SECONDS:
                # Another process holds the lock for a moment: try again on the loop, with what
                # is submitted meanwhile (``run`` schedules nothing while the queue is not empty):
                # at the next turn the first time, then every RETRY_PAUSE_SECONDS.
                self._locked_since = now if locked_since is None else locked_since
                self._queue[:0] = batch
                loop.call_later(0 if locked_since is None else RETRY_PAUSE_SECONDS, self._flush)
                return
            # A long writer (the CLI, a migration) holds the lock: wait for it off the loop.
            retry = asyncio.ensure_future(self._on_worker(lambda: self._apply(batch)))
            retry.add_done_callback(lambda finished: self._deliver_retry(batch, finished))
            return
        except Exception as exc:  # a callback must resolve every future, whatever went wrong
            self._fail(batch, exc)
            return
        self._deliver(batch, outcomes)

    def _apply(self, batch: list[Queued]) -> list[Any]:
        began = time.perf_counter()
        refused = False  # the write lock was refused: no transaction happened, nothing to count
        try:
            try:
                return self._attempt(batch, isolated=False)
            except _ConstraintFailed:  # rolled back whole: again, each operation on its own
                return self._attempt(batch, isolated=True)
        except sqlite3.OperationalError as exc:
            refused = exc.sqlite_errorcode in BUSY  # the batch is tried again
            raise
        finally:
            if not refused and self.observer is not None:
                self.observer.ledger_committed(time.perf_counter() - began, len(batch))

    def _attempt(self, batch: list[Queued], *, isolated: bool) -> list[Any]:
        """One transaction of ``batch``. Not ``isolated``: no savepoints, and an operation that
        fails a constraint ends the attempt (``_ConstraintFailed``, the transaction rolled back).
        ``isolated``: each operation in its own savepoint, a failed one rolled back alone and
        answered ``Conflict``."""
        outcomes: list[Any] = []
        # Summed afresh on every attempt: a batch tried again starts over.
        sums = UsageSums()
        with self._transaction() as db:
            for operation, _, record in batch:
                if isolated:
                    db.execute("SAVEPOINT ledger_op")
                try:
                    outcome = operation(db)
                except sqlite3.IntegrityError as exc:
                    if not isolated:
                        raise _ConstraintFailed from exc
                    db.execute("ROLLBACK TO ledger_op")
                    outcome = Conflict(str(exc))
                else:
                    if record is not None and isinstance(outcome, Settlement) and outcome.applied:
                        sums.add(record)
                outcomes.append(outcome)
                if isolated:
                    db.execute("RELEASE ledger_op")
            sums.write(db)
        return outcomes

    def _deliver_retry(self, batch: list[Queued], finished: asyncio.Future[Any]) -> None:
        if finished.cancelled():
            self._fail(batch, StorageError("sqlite: the write was cancelled while waiting for the lock"))
        elif (exc := finished.exception()) is not None:
            self._fail(batch, exc)
        else:
            self._deliver(batch, finished.result())

    @staticmethod
    def _deliver(batch: list[Queued], outcomes: list[Any]) -> None:
        for (_, done, _), outcome in zip(batch, outcomes, strict=True):
            if done.cancelled():
                continue
            if isinstance(outcome, Exception):
                done.set_exception(outcome)
            else:
                done.set_result(outcome)

    @staticmethod
    def _fail(batch: list[Queued], exc: BaseException) -> None:
        # OSError: the database file or folder is gone. Anything else is a bug, passed on as is.
        error = StorageError(f"sqlite: {exc}") if isinstance(exc, sqlite3.Error | OSError) else exc
        for _, done, _ in batch:
            if not done.done():
                done.set_exception(error)
