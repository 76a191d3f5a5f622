"""The group-commit plumbing the PostgreSQL batchers share (``postgres_ledger``, ``postgres_saves``).

What is submitted in one turn of the event loop leaves together as one batch; while a batch is at
the database the next one gathers (one batch in flight: classic group commit, the busier the
instance the larger its batches). A caller cancelled before its batch leaves is taken out of it.
Each batch's duration and size go to the ledger's write metrics. Subclasses say how a batch is
sent (``_run``) and may say which queued items may share one (``_take``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Generic, Protocol, TypeVar

import asyncpg

from modelgate.storage.base import LedgerObserver, StorageError


class Pending(Protocol):
    """A queued item: its caller waits on ``done``."""

    @property
    def done(self) -> asyncio.Future[Any]: ...


P = TypeVar("P", bound=Pending)


class Batches(Generic[P]):
    #: Items in one batch at most (a larger queue leaves in several).
    max_batch = 256

    def __init__(self) -> None:
        self._queue: list[P] = []
        self._busy = False
        self._scheduled = False
        #: Told each batch's duration and size (the ledger's write metrics).
        self.observer: LedgerObserver | None = None

    async def _submit(self, item: P) -> Any:
        self._queue.append(item)
        self._schedule()
        return await item.done

    def _schedule(self) -> None:
        if not self._scheduled and not self._busy and self._queue:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        queue = [item for item in self._queue if not item.done.cancelled()]
        batch, self._queue = self._take(queue)
        if not batch:
            return
        self._busy = True
        sent = asyncio.ensure_future(self._send(batch))
        sent.add_done_callback(self._sent)

    def _take(self, queue: list[P]) -> tuple[list[P], list[P]]:
        """The next batch and what stays queued."""
        return queue[: self.max_batch], queue[self.max_batch :]

    def _sent(self, _: asyncio.Future[None]) -> None:
        self._busy = False
        self._schedule()

    async def _send(self, batch: list[P]) -> None:
        began = time.perf_counter()
        try:
            await self._run(batch)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
            for item in batch:
                resolve(item, StorageError(f"postgresql: {exc}"))
        except Exception as exc:  # every caller must be answered, whatever went wrong
            for item in batch:
                resolve(item, exc)
        finally:
            if self.observer is not None:
                self.observer.ledger_committed(time.perf_counter() - began, len(batch))

    async def _run(self, batch: list[P]) -> None:
        """Send ``batch`` and resolve every item's ``done``; an error it raises is given to every
        item not resolved yet (a database or connection error as ``StorageError``)."""
        raise NotImplementedError


def resolve(item: Pending, outcome: Any) -> None:
    """Hand ``outcome`` (a result, or an exception to raise) to the item's caller, once."""
    if item.done.done():
        return
    if isinstance(outcome, BaseException):
        item.done.set_exception(outcome)
    else:
        item.done.set_result(outcome)
