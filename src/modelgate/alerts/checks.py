"""Background checks, one per subject at a time and at most one per ``every`` seconds.

A check asked for while one runs for the same subject runs once more after it; one asked for too
soon runs when its time comes. So a crossing is always looked at (the last settle before traffic
stops is never skipped), yet a subject under heavy traffic costs one check per ``every`` seconds,
not one per request.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("modelgate.alerts")
Check = Callable[[], Awaitable[object]]
#: Subjects whose last check time is kept before the memo is emptied.
MEMO_LIMIT = 100_000


class Checks:
    def __init__(self, every: float) -> None:
        self.every = every
        self._busy: set[str] = set()
        self._running: set[str] = set()
        self._again: dict[str, Check] = {}
        self._last: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}

    @property
    def idle(self) -> bool:
        """No check running or waiting to run."""
        return not self._busy

    def ask(self, subject: str, check: Check) -> None:
        if subject in self._busy:
            if subject in self._running:
                self._again[subject] = check
            return
        self._busy.add(subject)
        delay = max(0.0, self._last.get(subject, -math.inf) + self.every - time.monotonic())
        loop = asyncio.get_running_loop()
        if delay == 0:
            self._start(subject, check)
            return
        self._timers[subject] = loop.call_later(delay, self._fire, subject, check)

    def _fire(self, subject: str, check: Check) -> None:
        self._timers.pop(subject, None)
        self._start(subject, check)

    def _start(self, subject: str, check: Check) -> None:
        self._running.add(subject)
        task = asyncio.get_running_loop().create_task(self._run(subject, check))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, subject: str, check: Check) -> None:
        try:
            await check()
        except Exception:  # a failed check is retried on the next crossing seen
            log.warning("alert check for %s failed", subject, exc_info=True)
        finally:
            if len(self._last) > MEMO_LIMIT:  # only spacing: forgetting it costs one early check
                self._last.clear()
            self._last[subject] = time.monotonic()
            self._running.discard(subject)
            self._busy.discard(subject)
            again = self._again.pop(subject, None)
            if again is not None:
                self.ask(subject, again)

    async def aclose(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
