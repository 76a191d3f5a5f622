"""Running work that grows with a request body in worker processes, never on the event loop.

Parsing, validating, translating and counting a 30 MiB body takes from a tenth of a second to
seconds of CPU in single C calls (``orjson.loads``, a regex over the text) that hold the GIL, so
neither the loop nor a thread can interleave other requests with them. ``Offload`` runs such
functions in a small process pool: the loop only hands over the bytes and gets back a small
result, so a huge body costs its own client time, not everyone's. Results must stay small (they
are unpickled in this process): the callers return figures, short JSON objects and bytes.

Functions given to ``run`` must be module-level (picklable by reference). Workers are started
with the ``spawn`` method (no copy of the gateway's threads and sockets), on demand, at a lower
scheduling priority than the serving process (``server.body_worker_niceness``).

A body never crosses the pipe (``run_on_body``): pickling a 30 MiB body copies it three times and
pushes it through a 64 KiB pipe, which cost about half a worker's time. It is written once into
shared memory (a file on the ``/dev/shm`` tmpfs, from a thread: the write releases the GIL, so the
loop keeps serving) and the worker reads it from there; a large result (a translated body) comes
back the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
log = logging.getLogger("modelgate.offload")

#: The default of ``server.body_worker_niceness``: workers yield the CPU to the serving process
#: when both want it. At 3 two busy workers took half of a shared core and small requests' p99
#: grew 4-9x while 31 MiB bodies were parsed; at 10 it grew 1.2-3.2x (a loaded machine) and the
#: large requests still completed (half as many in the same time on one loaded core). A single
#: worker at 10 once starved (no large request finished), which is why there are two by default.
WORKER_NICENESS = 10

#: Bodies up to this size are written into shared memory on the event loop itself: copying into
#: tmpfs runs at memory speed (a fraction of a millisecond per MiB), less than the hop to a thread
#: and back costs while the loop is busy. Larger ones are written from a thread.
INLINE_WRITE_BYTES = 2 << 20

#: Results of a body function larger than this come back through shared memory too.
SPILL_BYTES = 1 << 20

# mkstemp creates its files there with O_EXCL and mode 0600, as in any temporary directory.
_SHARED_DIR = Path("/dev/shm")  # noqa: S108


@dataclass(frozen=True, slots=True)
class _Spilled:
    """A large ``bytes`` result left in shared memory by the worker."""

    path: str


def _shared_dir() -> str | None:
    return str(_SHARED_DIR) if _SHARED_DIR.is_dir() and os.access(_SHARED_DIR, os.W_OK) else None


def _write_shared(data: bytes) -> str:
    fd, path = tempfile.mkstemp(prefix="modelgate-body-", dir=_shared_dir())
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)
    return path


def _read_shared(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _unlink_written(write: asyncio.Future[str]) -> None:
    """Once a write its caller stopped waiting for has ended: remove what it wrote."""
    if not write.cancelled() and write.exception() is None:
        _unlink(write.result())


#: A body file older than this is no job's: a process that died mid-job left it.
STALE_SECONDS = 3600.0


def sweep_stale(now: float | None = None) -> int:
    """Remove body files left in shared memory by processes that died mid-job (the files of this
    host's live gateways are minutes old at most); how many were removed."""
    folder = _shared_dir() or tempfile.gettempdir()  # where mkstemp puts them
    cutoff = (time.time() if now is None else now) - STALE_SECONDS
    removed = 0
    for entry in Path(folder).glob("modelgate-body-*"):
        with contextlib.suppress(OSError):
            if entry.stat().st_mtime < cutoff:
                entry.unlink()
                removed += 1
    return removed


def _spill(value: Any) -> Any:
    if isinstance(value, bytes) and len(value) > SPILL_BYTES:
        return _Spilled(_write_shared(value))
    return value


def _on_body(fn: Callable[..., Any], path: str, args: tuple[Any, ...]) -> Any:
    """In the worker: ``fn(body, *args)`` with the body read from shared memory; a large bytes
    result (or large bytes in a tuple result) goes back the same way."""
    result = fn(_read_shared(path), *args)
    if isinstance(result, tuple):
        return tuple(_spill(item) for item in result)
    return _spill(result)


def _spilled_paths(result: Any) -> list[str]:
    items = result if isinstance(result, tuple) else (result,)
    return [item.path for item in items if isinstance(item, _Spilled)]


def _discard_spilled(future: Future[Any]) -> None:
    """A body job whose caller is gone: remove what it spilled once it ends."""
    if not future.cancelled() and future.exception() is None:
        for path in _spilled_paths(future.result()):
            _unlink(path)


def _unspill(result: Any) -> Any:
    if isinstance(result, tuple):
        return tuple(_unspill(item) for item in result)
    if isinstance(result, _Spilled):
        try:
            return _read_shared(result.path)
        finally:
            _unlink(result.path)
    return result


def _lower_priority(niceness: int) -> None:
    # A SIGHUP to the process group (a reload, a closed terminal) is the server's to handle.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if niceness:
        with contextlib.suppress(OSError):
            os.nice(niceness)


class Offload:
    def __init__(self, workers: int, niceness: int = WORKER_NICENESS) -> None:
        self._workers = workers
        self._niceness = niceness
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
            self._pool = ProcessPoolExecutor(
                self._workers, mp_context=context, initializer=_lower_priority, initargs=(self._niceness,)
            )
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

    async def run_on_body(self, fn: Callable[..., T], body: bytes, *args: Any) -> T:
        """``fn(body, *args)`` in a worker, the body handed over through shared memory."""
        path = _write_shared(body) if len(body) <= INLINE_WRITE_BYTES else await _written(body)
        try:
            future = self._executor().submit(_on_body, fn, path, args)
        except BaseException:  # a broken pool (a worker killed): the body file is nobody's
            _unlink(path)
            raise
        self.jobs += 1
        self.pending += 1
        try:
            result = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.add_done_callback(_discard_spilled)
            raise
        finally:
            self.pending -= 1
            # The worker has read the body (or never will): its copy can go.
            future.add_done_callback(lambda _: _unlink(path))
        if _spilled_paths(result):
            result = await asyncio.to_thread(_unspill, result)
        return result  # type: ignore[no-any-return]

    async def stop(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.get_running_loop().run_in_executor(None, _shutdown, pool)


async def _written(body: bytes) -> str:
    """``body`` written into shared memory from a thread; the file's path."""
    # Shielded: a caller cancelled mid-write (a disconnect, shutdown) leaves the thread to
    # finish, and what it wrote is removed then instead of staying in memory for good.
    write = asyncio.ensure_future(asyncio.to_thread(_write_shared, body))
    try:
        return await asyncio.shield(write)
    except asyncio.CancelledError:
        write.add_done_callback(_unlink_written)
        raise


def _shutdown(pool: ProcessPoolExecutor) -> None:
    pool.shutdown(wait=True, cancel_futures=True)
