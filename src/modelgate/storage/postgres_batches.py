"""The group-commit plumbing the PostgreSQL batchers share (``postgres_ledger``, ``postgres_saves``).

What is submitted in one turn of the event loop leaves together as one batch; while a batch is at
the database the next one gathers (one batch in flight: classic group commit, the busier the
instance the larger its batches). A caller cancelled before its batch leaves is taken out of it.

When items arrive faster than one per ``wait`` (``database_batch_wait_seconds``, default 1 ms), a
batch also waits for company: it leaves ``wait`` after its first item arrived (or at once, if that
has passed while the batch before it was at the database), so each transaction carries more
items. A call of the ledger function costs PostgreSQL about as much as four or five of its
operations (measured: ~110 µs a call, ~24 µs an operation), so larger batches save much of its CPU
and of the gateway's per-call work; the price is at most ``wait`` more for a ledger write (rounded
up to the event loop's whole milliseconds), paid only under such load. Slower arrivals leave at
once, as without the wait: waiting would gather nothing. The arrival rate is a running average of
the gaps between arrivals, each counted as at most twice ``wait`` (so a quiet spell stops the
waiting after a few arrivals, and a burst starts it after a few).

Each batch's duration, size and wait go to the ledger's write metrics. Subclasses say how a batch
is sent (``_run``, on ``_connection()``) and may say which queued items may share one (``_take``).

With one batch in flight at a time, a batcher keeps one connection of the store's pool for
itself instead of checking one out per batch (measured: the check-out and return cost the
gateway about 27 µs of CPU per batch, as much as sending the batch). A connection that broke or
timed out is closed and handed back; the batch on it fails with ``StorageError`` and the next one
takes a fresh connection. ``aclose`` sends what waits for company at once, lets the batches finish,
then hands the connection back.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar

import asyncpg

from modelgate.storage.base import LedgerObserver, StorageError


class Pending(Protocol):
    """A queued item: its caller waits on ``done``."""

    @property
    def done(self) -> asyncio.Future[Any]: ...


P = TypeVar("P", bound=Pending)

#: Weight of the newest gap between arrivals in their running average (``Batches._arrived``).
_GAP_WEIGHT = 0.25

#: What a call to the database may raise: its callers get ``StorageError``. ``InternalClientError``
#: is the driver refusing a call on a connection still busy with a broken one (its protocol state
#: is stale): the connection is replaced, never reused.
DATABASE_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    OSError,
    TimeoutError,
)


class Batches(ABC, Generic[P]):
    #: Items in one batch at most (a larger queue leaves in several).
    max_batch = 256

    def __init__(self, pool: Callable[[], Awaitable[Any]], *, wait: float = 0.0) -> None:
        self._pool = pool
        self._queue: list[P] = []
        self._busy = False
        #: The flush that is due (``call_soon`` or, waiting for company, ``call_later``).
        self._scheduled: asyncio.Handle | None = None
        #: How long a batch may wait for company under load (0: never); when its first item
        #: arrived; the running average of the gaps between arrivals, and the last arrival.
        self._wait = wait
        self._since = 0.0
        self._gap = 2 * wait
        self._last = time.monotonic()
        self._in_flight: asyncio.Future[None] | None = None
        #: The pool's connection this batcher keeps while it works (``_connection``), and whether
        #: it broke (then it is closed and handed back before the next batch).
        self._held: Any = None
        self._broken = False
        #: Whether the kept connection was lost (not merely refused a statement): the server
        #: probably ended its other sessions too (a restart), so the pool's idle connections are
        #: expired with it rather than handed out one stale connection at a time.
        self._lost = False
        #: Told each batch's duration, size and wait (the ledger's write metrics).
        self.observer: LedgerObserver | None = None

    async def _submit(self, item: P) -> Any:
        if self._wait:
            self._arrived()
        self._queue.append(item)
        self._schedule()
        return await item.done

    def _arrived(self) -> None:
        now = time.monotonic()
        self._gap += (min(now - self._last, 2 * self._wait) - self._gap) * _GAP_WEIGHT
        self._last = now
        if not self._queue:
            self._since = now

    def _schedule(self) -> None:
        if self._scheduled is None and not self._busy and self._queue:
            loop = asyncio.get_running_loop()
            delay = self._since + self._wait - time.monotonic() if self._gap < self._wait else 0.0
            if delay > 0:
                self._scheduled = loop.call_later(delay, self._flush, delay)
            else:
                self._scheduled = loop.call_soon(self._flush)

    def _flush(self, waited: float = 0.0) -> None:
        """Send the next batch; ``waited``: how long it waited for company."""
        self._scheduled = None
        queue = [item for item in self._queue if not item.done.cancelled()]
        batch, self._queue = self._take(queue)
        if not batch:
            return
        self._busy = True
        sent = asyncio.ensure_future(self._send(batch, waited))
        sent.add_done_callback(self._sent)
        self._in_flight = sent

    def _take(self, queue: list[P]) -> tuple[list[P], list[P]]:
        """The next batch and what stays queued."""
        return queue[: self.max_batch], queue[self.max_batch :]

    def _sent(self, _: asyncio.Future[None]) -> None:
        self._busy = False
        self._in_flight = None
        self._schedule()

    async def _send(self, batch: list[P], waited: float = 0.0) -> None:
        began = time.perf_counter()
        try:
            try:
                await self._run(batch)
            except asyncpg.exceptions.InternalClientError as exc:
                # The driver refused the call before sending anything (the kept connection was
                # ended by the server while idle, and the driver does not know it yet): the
                # batch goes once more, on a fresh connection.
                self._failure(exc)
                await self._run(batch)
        except DATABASE_ERRORS as exc:
            failure = self._failure(exc)
            for item in batch:
                resolve(item, failure)
        except Exception as exc:  # every caller must be answered, whatever went wrong
            for item in batch:
                resolve(item, exc)
            self._broken = True
        except BaseException:  # cancelled (the loop is shutting down): the reply may be half read
            self._broken = True
            raise
        finally:
            if self.observer is not None:
                self.observer.ledger_committed(time.perf_counter() - began, len(batch), waited)

    async def _connection(self) -> Any:
        """The connection batches go out on: taken from the pool once and kept (and replaced
        when it broke, or was closed since: the server ended it while idle)."""
        if self._broken or self._held_is_closed():
            self._broken = True
            await self._give_back()
        if self._held is None:
            pool = await self._pool()
            self._held = await pool.acquire()
        return self._held

    def _failure(self, exc: BaseException) -> StorageError:
        """What the callers of a call that raised ``exc`` (one of ``DATABASE_ERRORS``) are told;
        the kept connection is replaced before the next call if ``exc`` broke it."""
        self._broken = self._broken or self._breaks_connection(exc)
        self._lost = self._lost or connection_lost(exc)
        return StorageError(f"postgresql: {exc}")

    def _breaks_connection(self, exc: BaseException) -> bool:
        """Whether the kept connection is to be replaced after ``exc``. An error the server
        reports in a statement leaves it usable (each batch is one statement, so no transaction
        stays open); one that ends the session (FATAL: shutdown, terminated), a broken socket or
        a timeout does not. A connection error (``PostgresConnectionError``: "closed in the middle
        of operation") breaks it even while ``is_closed()`` still says False: the driver learns of
        the closed socket a loop turn later, and a batch sent on it before then would find the
        protocol still busy with the failed call ("cannot switch to state …")."""
        if refused_arguments(exc):
            return False
        if not isinstance(exc, asyncpg.PostgresError) or isinstance(exc, asyncpg.PostgresConnectionError):
            return True
        return exc.severity_en in ("FATAL", "PANIC") or self._held_is_closed()

    def _held_is_closed(self) -> bool:
        try:
            return self._held is not None and bool(self._held.is_closed())
        except asyncpg.InterfaceError:  # closed, and the pool has taken it back already
            return True

    async def _give_back(self) -> None:
        """Hand the kept connection back to the pool, closed first if it broke (it may be half-way
        through a reply, or gone: the pool then opens a new one)."""
        connection, self._held = self._held, None
        broken, self._broken = self._broken, False
        lost, self._lost = self._lost, False
        if connection is None:
            return
        if broken:
            with contextlib.suppress(asyncpg.InterfaceError):  # the pool may have it back already
                connection.terminate()
        pool = await self._pool()
        if lost:
            # An idle pooled connection of a restarted server may not know yet that its socket
            # closed (it learns a loop turn later) and would be handed out half-failed.
            await pool.expire_connections()
        await pool.release(connection)  # a connection the pool has back already: nothing to do

    async def aclose(self) -> None:
        """Send what is queued without waiting for company, let the batches finish, then hand the
        kept connection back (before the pool closes: the pool waits for every connection out of
        it)."""
        self._wait = 0.0
        while True:
            if self._in_flight is not None:
                await asyncio.wait([self._in_flight])
            elif self._scheduled is not None:
                self._scheduled.cancel()
                self._flush()
            else:
                break
        await self._give_back()

    @abstractmethod
    async def _run(self, batch: list[P]) -> None:
        """Send ``batch`` and resolve every item's ``done``; an error it raises is given to every
        item not resolved yet (a database or connection error as ``StorageError``)."""


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` (one of ``DATABASE_ERRORS``) says the connection itself was lost (closed,
    reset, ended by the server, or left half-failed), not that a statement or a timeout failed,
    nor that the driver refused a call's arguments before sending anything."""
    if refused_arguments(exc):
        return False
    return not isinstance(exc, asyncpg.PostgresError | TimeoutError) or isinstance(
        exc, asyncpg.PostgresConnectionError
    )


def refused_arguments(exc: BaseException) -> bool:
    """Whether the driver refused a call's arguments (too many, or not encodable for their
    column) before anything reached the server: the connection is as good as before."""
    if not isinstance(exc, asyncpg.InterfaceError):
        return False
    # DataError and ClientConfigurationError: the driver's own ValueErrors about its input.
    return isinstance(exc, ValueError) or "number of query arguments" in str(exc)


def resolve(item: Pending, outcome: Any) -> None:
    """Hand ``outcome`` (a result, or an exception to raise) to the item's caller, once."""
    if item.done.done():
        return
    if isinstance(outcome, BaseException):
        item.done.set_exception(outcome)
    else:
        item.done.set_result(outcome)
