"""A background round repeated every ``interval`` seconds until stopped (the sweepers), and how
any background task is stopped (``cancel_and_wait``).

A round that raises is logged and the loop goes on: the next round retries (a database hiccup
must not end a sweeper for the life of the process).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any


class Periodic:
    def __init__(
        self, name: str, round_: Callable[[], Awaitable[object]], interval: float, log: logging.Logger
    ) -> None:
        self._name = name
        self._round = round_
        self._interval = interval
        self._log = log
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"modelgate-{self._name}")

    async def _run(self) -> None:
        while True:
            try:
                await self._round()
            except Exception:
                self._log.warning("%s failed; retrying next interval", self._name, exc_info=True)
            await asyncio.sleep(self._interval)

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel a background task (if there is one) and wait until it has ended."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
