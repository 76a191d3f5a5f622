"""Deleting stored Responses state past its retention (``responses.ttl_days``).

Reads already treat an expired object as missing (``storage.responses``); this loop deletes such
objects for good, with their items, and gives their bytes back to the account's limit. Every
instance may run it: each round deletes a bounded batch in one transaction per batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from modelgate.clock import Clock
from modelgate.storage.responses import ResponseStore

log = logging.getLogger("modelgate.state")


class StateSweeper:
    def __init__(self, store: ResponseStore, clock: Clock, interval: float, batch: int = 500) -> None:
        self._store = store
        self._clock = clock
        self._interval = interval
        self._batch = batch
        self._task: asyncio.Task[None] | None = None

    async def sweep(self) -> int:
        """Delete every object expired now; the number deleted."""
        deleted = 0
        while True:
            done = await self._store.sweep_state(self._clock.time(), self._batch)
            deleted += done
            if done < self._batch:
                return deleted

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="modelgate-state-sweeper")

    async def _run(self) -> None:
        while True:
            try:
                deleted = await self.sweep()
                if deleted:
                    log.info("deleted %d expired stored responses and conversations", deleted)
            except Exception:  # a database hiccup: keep the loop alive, the next round retries
                log.warning("stored-state sweep failed; retrying next interval", exc_info=True)
            await asyncio.sleep(self._interval)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
