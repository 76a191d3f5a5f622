"""Deleting stored Responses state past its retention (``responses.ttl_days``).

Reads already treat an expired object as missing (``storage.responses``); this loop deletes such
objects for good, with their items, and gives their bytes back to the account's limit. Every
instance may run it: each round deletes a bounded batch in one transaction per batch.
"""

from __future__ import annotations

import logging

from modelgate.clock import Clock
from modelgate.periodic import Periodic
from modelgate.storage.responses import ResponseStore

log = logging.getLogger("modelgate.state")


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
