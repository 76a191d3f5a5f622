"""Running work that grows with a request body in worker processes, never on the event loop.

Parsing, validating, translating and counting a 30 MiB body takes from a tenth of a second to
seconds of CPU in single C calls (``orjson.loads``, a regex over the text) that hold the GIL, so
neither the loop nor a thread can interleave other requests with them. ``Offload`` runs such
functions in a small process pool: the loop only hands over the bytes and gets back a small
result, so a huge body costs its own client time, not everyone's. Results must stay small (they
are unpickled in this process): the callers return figures, short JSON objects and bytes.

Functions given to ``run`` must be module-level (picklable by reference). Workers are started
with the ``spawn`` method (no copy of the gateway's threads and sockets), on demand, at a lower
scheduling priority than the serving process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
log = logging.getLogger("modelgate.offload")

#: Workers yield the CPU to the serving process when both want it.
WORKER_NICENESS = 10


def _lower_priority() -> None:
    # A SIGHUP to the process group (a reload, a closed terminal) is the server's to handle.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICENESS)


class Offload:
    def __init__(self, workers: int) -> None:
        self._workers = workers
        self._pool: ProcessPoolExecutor | None = None
        #: Jobs handed to the workers so far (visible in metrics and /health).
        self.jobs = 0
        #: Jobs running or waiting for a worker now (metrics).
        self.pending = 0

    @property
    def workers(self) -> int:
        return self._workers

    def _executor(self) -> ProcessPoolExecutor:
        # Created on first use: most gateways (and every test) never see a large body. Workers
        # start on demand, so the first large body after a start waits for one (about a second).
        if self._pool is None:
            context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(self._workers, mp_context=context, initializer=_lower_priority)
        return self._pool

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker process; exceptions it raises are re-raised here."""
        pool = self._executor()
        self.jobs += 1
        self.pending += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)
        finally:
            self.pending -= 1

    async def stop(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.get_running_loop().run_in_executor(None, _shutdown, pool)


def _shutdown(pool: ProcessPoolExecutor) -> None:
    pool.shutdown(wait=True, cancel_futures=True)
