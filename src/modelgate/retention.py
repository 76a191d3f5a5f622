"""Deleting stored Responses state past its retention (``responses.ttl_days``), and raw usage
records past theirs (``usage.retention_days``; ``UsageSweeper``).

Reads already treat an expired object as missing (``storage.responses``); this loop deletes such
objects for good, with their items, and gives their bytes back to the account's limit. Every
instance may run it: each round deletes a bounded batch in one transaction per batch.
"""

from __future__ import annotations

import logging

from modelgate.clock import Clock
from modelgate.periodic import Periodic
from modelgate.storage.base import UsageStore
from modelgate.storage.responses import ResponseStore

log = logging.getLogger("modelgate.state")
usage_log = logging.getLogger("modelgate.usage")
DAY_SECONDS = 86_400


class StateSweeper:
    def __init__(self, store: ResponseStore, clock: Clock, interval: float, batch: int = 500) -> None:
        self._store = store
        self._clock = clock
        self._batch = batch
        self._loop = Periodic("stored-state sweep", self._round, interval, log)

    async def sweep(self) -> int:
        """Delete every object expired now; the number deleted."""
        deleted = 0
        while True:
            done = await self._store.sweep_state(self._clock.time(), self._batch)
            deleted += done
            if done < self._batch:
                return deleted

    async def _round(self) -> None:
        deleted = await self.sweep()
        if deleted:
            log.info("deleted %d expired stored responses and conversations", deleted)

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()


class UsageSweeper:
    """Deletes usage records that started more than ``retention_days`` ago, oldest first, in
    batches of ``batch`` (one short transaction each, off the event loop on SQLite), so the ledger's
    commits go on between them. The rollups keep the deleted records' sums. Every instance may
    run it: a batch deletes what is there, and two instances only share the work."""

    def __init__(
        self, store: UsageStore, clock: Clock, retention_days: int, interval: float, batch: int
    ) -> None:
        self._store = store
        self._clock = clock
        self._retention = retention_days * DAY_SECONDS
        self._batch = batch
        #: Records deleted since the start (metrics: ``modelgate_usage_records_deleted``).
        self.deleted = 0
        self._loop = Periodic("usage retention", self._round, interval, usage_log)

    async def sweep(self) -> int:
        """Delete every record older than the retention now; the number deleted."""
        cutoff = self._clock.time() - self._retention
        deleted = 0
        while True:
            done = await self._store.delete_usage_before(cutoff, self._batch)
            deleted += done
            self.deleted += done
            if done < self._batch:
                return deleted

    async def _round(self) -> None:
        deleted = await self.sweep()
        if deleted:
            usage_log.info("deleted %d usage records past usage.retention_days", deleted)

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
