"""The body workers as the serving loop sees them: spawned on demand (from a thread), each with
its socket and its arena (``offload.wire``), one job each at a time, all I/O on the loop itself
(no thread hops to hand a job over or to get its answer)."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import socket
import sys
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

from modelgate.offload.channel import Channel
from modelgate.offload.wire import (
    ArenaFd,
    InArena,
    Job,
    Reply,
    dumps,
    frame,
    loads,
    new_arena,
    read_arena,
    write_arena,
)
from modelgate.offload.worker import serve

T = TypeVar("T")

#: The default of ``server.body_worker_niceness``: workers yield the CPU to the serving process
#: when both want it. At 3 two busy workers took half of a shared core and small requests' p99
#: grew 4-9x while 31 MiB bodies were parsed; at 10 it grew 1.2-3.2x (a loaded machine) and the
#: large requests still completed (half as many in the same time on one loaded core). A single
#: worker at 10 once starved (no large request finished), which is why there are two by default.
WORKER_NICENESS = 10
#: The default of ``server.body_worker_priority``: the workers under ``SCHED_IDLE`` (Linux), so a
#: serving process that wakes preempts them at once instead of waiting out their time slice.
#: Small requests' p99 beside four clients looping 31 MiB bodies, all on one core: 1.3-2.1x
#: quiet, against 2.3-3.6x at niceness 10 alone (docs/bench.md).
WORKER_IDLE = True

#: The default of ``server.body_arena_bytes``: the shared memory each body worker keeps between
#: jobs. Bodies and results up to it reuse the same pages; a larger one grows the arena for its
#: job, and the excess is given back when the job ends.
ARENA_BYTES = 8 << 20

#: Bodies up to this size are written into the arena on the event loop itself (a copy into pages
#: already there, about 0.1 ms per MiB: less than the hop to a thread and back costs while the
#: loop is busy); larger ones, results read back and arenas shrunk after them, from a thread.
INLINE_COPY_BYTES = 2 << 20

#: Threads copying large bodies into the arenas and results out of them (``Offload._copy``).
COPY_THREADS = 2

#: Seconds a worker gets to exit once its channel is closed before it is killed.
EXIT_SECONDS = 5.0


class WorkerLost(Exception):
    """The body worker ended (killed, out of memory) while it had the job; the job's caller gets
    this, the worker is replaced for the next job."""


@dataclass(eq=False, slots=True)
class _Worker:
    process: BaseProcess
    #: Our end of the worker's socket, until the first job makes it a ``Channel``.
    sock: socket.socket
    #: The worker's arena (``wire.new_arena``).
    arena: int
    channel: Channel | None = None


class Offload:
    """Runs functions in worker processes, never on the event loop.

    Parsing, validating, translating and counting a 30 MiB body takes from a tenth of a second to
    seconds of CPU in single C calls (``orjson.loads``, a regex over the text) that hold the GIL,
    so neither the loop nor a thread can interleave other requests with them. Such functions run
    here: the loop hands over the body (through the worker's arena) and gets back a small result,
    so a huge body costs its own client time, not everyone's. Functions must be module-level
    (pickled by reference); results must be small apart from ``bytes`` (which come back through
    the arena). Workers are started with the ``spawn`` method (no copy of the gateway's threads and
    sockets), on demand, at a lower scheduling priority (``server.body_worker_niceness``, and
    ``SCHED_IDLE`` when ``idle``: ``server.body_worker_priority``).
    """

    def __init__(
        self,
        workers: int,
        niceness: int = WORKER_NICENESS,
        arena_bytes: int = ARENA_BYTES,
        *,
        idle: bool = WORKER_IDLE,
    ) -> None:
        self._workers = workers
        self._niceness = niceness
        self._idle_policy = idle
        self._arena_bytes = arena_bytes
        self._live: list[_Worker] = []
        self._idle: list[_Worker] = []
        self._waiting: deque[asyncio.Future[_Worker]] = deque()
        #: Exchanges under way: kept here so one whose caller is gone still ends (and frees its worker).
        self._exchanges: set[asyncio.Task[Any]] = set()
        #: Workers being started on a thread (``_start``), each handed to a job waiting when up.
        self._starts: set[asyncio.Future[_Worker]] = set()
        #: Threads for the large copies, made on the first one (``_copy``).
        self._copies: ThreadPoolExecutor | None = None
        #: Jobs handed to the workers so far (visible in metrics and /health).
        self.jobs = 0
        #: Jobs running or waiting for a worker now (metrics).
        self.pending = 0
        #: Workers that ended while they had a job (metrics).
        self.lost = 0

    @property
    def workers(self) -> int:
        return self._workers

    @property
    def arena_bytes(self) -> int:
        """Shared memory the running workers keep between jobs (metrics)."""
        return len(self._live) * self._arena_bytes

    def pids(self) -> list[int]:
        """The running workers' process ids."""
        return [pid for worker in self._live if (pid := worker.process.pid) is not None]

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker process; exceptions it raises are re-raised here."""
        return await self._submit(Job(fn, args, -1), None)  # type: ignore[no-any-return]

    async def run_on_body(self, fn: Callable[..., T], body: bytes, *args: Any) -> T:
        """``fn(body, *args)`` in a worker, the body handed over through the worker's arena."""
        return await self._submit(Job(fn, args, len(body)), body)  # type: ignore[no-any-return]

    async def _submit(self, job: Job, body: bytes | None) -> Any:
        self.jobs += 1
        self.pending += 1
        try:
            worker = await self._acquire()
            # Shielded: a caller that goes away (a disconnect) leaves the exchange to finish, so
            # the worker is never handed a second job while it still owes an answer.
            exchange = asyncio.ensure_future(self._exchange(worker, job, body))
            self._exchanges.add(exchange)
            exchange.add_done_callback(self._exchange_ended)
            return await asyncio.shield(exchange)
        finally:
            self.pending -= 1

    def _exchange_ended(self, exchange: asyncio.Task[Any]) -> None:
        self._exchanges.discard(exchange)
        if not exchange.cancelled():
            exchange.exception()  # its caller may be gone: retrieved here, not reported as lost

    async def _acquire(self) -> _Worker:
        while self._idle:
            worker = self._idle.pop()
            if worker.process.is_alive():
                return worker
            self._discard(worker)  # ended while idle: no job of anyone's was lost
        if len(self._live) + len(self._starts) < self._workers:
            self._start()
        waiter: asyncio.Future[_Worker] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # handed a worker as it was cancelled
                self._release(waiter.result())
            raise

    def _release(self, worker: _Worker) -> None:
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(worker)
                return
        self._idle.append(worker)

    def _start(self) -> None:
        """Start a worker from a thread; it goes to the first job waiting (``_started``). Started on
        the loop, a worker held it for 30-45 ms (the spawn's preparation data, then fork and exec
        of the serving process: the only loop stalls over 20 ms seen while 31 MiB bodies ran)."""
        start = asyncio.ensure_future(asyncio.to_thread(self._spawn))
        self._starts.add(start)
        start.add_done_callback(self._started)

    def _started(self, start: asyncio.Future[_Worker]) -> None:
        self._starts.discard(start)
        if start.cancelled():  # the loop is closing: its socket's end, collected, ends the worker
            return
        error = start.exception()
        if error is None:
            worker = start.result()
            self._live.append(worker)
            self._release(worker)
            return
        while self._waiting:  # the first job waiting gets the error, the next ones another try
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_exception(error)
                break
        if any(not waiter.done() for waiter in self._waiting):
            self._start()

    def _spawn(self) -> _Worker:
        """A new worker (on a thread: ``_start``)."""
        context = multiprocessing.get_context("spawn")
        ours, theirs = socket.socketpair()
        arena = new_arena()
        try:
            process = context.Process(
                target=serve,
                args=(theirs, ArenaFd(arena), self._niceness, self._arena_bytes, self._idle_policy),
                name="modelgate-body-worker",
                daemon=True,
            )
            process.start()
        except BaseException:
            ours.close()
            os.close(arena)
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        return _Worker(process, ours, arena)

    async def _exchange(self, worker: _Worker, job: Job, body: bytes | None) -> Any:
        try:
            request = frame(dumps(job))
        except Exception:  # a job that does not pickle: the caller's error; the worker is untouched
            self._release(worker)
            raise
        try:
            if body is not None:
                await self._copy(write_arena, worker.arena, body, 0, size=len(body))
            if worker.channel is None:
                worker.channel = await Channel.over(worker.sock)
            worker.channel.send(request)
            reply: Reply = loads(await worker.channel.receive())
            value = await self._fetched(worker, reply.value) if reply.ok else reply.value
        except (OSError, EOFError) as exc:
            self.lost += 1
            self._discard(worker)
            raise WorkerLost("a body worker ended while it handled the request") from exc
        except BaseException:  # cancelled by stop(), or an answer that does not unpickle
            self._discard(worker)
            raise
        used = max(len(body) if body is not None else 0, _extent(reply.value))
        if used > self._arena_bytes:  # the pages beyond the arena's size go back
            await self._copy(os.ftruncate, worker.arena, self._arena_bytes, size=used)
        self._release(worker)
        if not reply.ok:
            raise value
        return value

    async def _fetched(self, worker: _Worker, value: Any) -> Any:
        """``value`` with each ``InArena`` marker replaced by the bytes it marks."""
        if type(value) is tuple:
            return tuple([await self._fetched(worker, item) for item in value])
        if isinstance(value, InArena):
            return await self._copy(read_arena, worker.arena, value.length, value.offset, size=value.length)
        return value

    def _discard(self, worker: _Worker) -> None:
        """Forget a worker whose state is unknown (ended, or an exchange broken off): it is ended,
        its arena freed, and a job waiting for a worker gets a new one."""
        if worker in self._live:
            self._live.remove(worker)
        _close(worker)
        with contextlib.suppress(OSError, ValueError):
            worker.process.kill()
        asyncio.get_running_loop().run_in_executor(None, _reap, worker.process, 0.0)
        waiting = sum(not waiter.done() for waiter in self._waiting)
        if waiting > len(self._starts) and len(self._live) + len(self._starts) < self._workers:
            self._start()  # a job waits for a worker: a new one for it

    async def stop(self) -> None:
        """End every worker: exchanges under way are cancelled, idle workers exit when their
        channel closes."""
        for waiter in self._waiting:
            waiter.cancel()
        self._waiting.clear()
        exchanges = list(self._exchanges)
        for exchange in exchanges:
            exchange.cancel()
        await asyncio.gather(*exchanges, return_exceptions=True)
        # Workers being started are taken in (as idle ones: every waiter is gone) and ended too.
        await asyncio.gather(*self._starts, return_exceptions=True)
        workers, self._live, self._idle = self._live, [], []
        for worker in workers:
            _close(worker)
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(None, _reap, w.process, EXIT_SECONDS) for w in workers))
        if self._copies is not None:  # no copy runs any more: every exchange has ended
            self._copies.shutdown(wait=False)
            self._copies = None

    async def _copy(self, fn: Callable[..., T], *args: Any, size: int) -> T:
        """``fn(*args)``, a copy of ``size`` bytes (or giving back as many): inline when small,
        from a thread when large (the system call releases the GIL, so the loop keeps serving).
        The threads run at the workers' lower priority: at the loop's own, a 31 MiB copy into an
        arena (faulting its pages in) competes with the loop for a shared core at equal weight; a
        loop-lag probe beside 31 MiB bodies counted 14-21 lags over 10 ms in 10 s, against 6-15
        with these threads lowered (four runs each way)."""
        if size <= INLINE_COPY_BYTES:
            return fn(*args)
        if self._copies is None:
            self._copies = ThreadPoolExecutor(
                COPY_THREADS, "modelgate-body-copy", initializer=_lower_priority, initargs=(self._niceness,)
            )
        copy = asyncio.get_running_loop().run_in_executor(self._copies, fn, *args)
        return await _finished(copy)


async def _finished(copy: asyncio.Future[T]) -> T:
    """The copy's result; cancelled, it still waits for the copy to end before it says so."""
    try:
        return await asyncio.shield(copy)
    except asyncio.CancelledError:
        # The thread still uses the arena's descriptor: it must not be closed (and its number
        # reused by another file) before the copy ends.
        while not copy.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([copy])
        raise


def _lower_priority(niceness: int) -> None:
    """Lower the calling thread's priority by ``niceness``, as the workers lower theirs (Linux:
    each thread has its own; elsewhere the call would lower the whole serving process, so it is
    not made). Never ``SCHED_IDLE``, whatever the workers' policy: these threads take the GIL, and
    one preempted while it holds it would hold up the serving loop until it gets the core back."""
    if niceness and sys.platform.startswith("linux"):
        thread = threading.get_native_id()
        with contextlib.suppress(OSError):
            os.setpriority(
                os.PRIO_PROCESS, thread, min(19, os.getpriority(os.PRIO_PROCESS, thread) + niceness)
            )


def _close(worker: _Worker) -> None:
    """Close our ends of the worker's socket and arena (the worker sees its channel close)."""
    if worker.channel is not None:
        worker.channel.close()
    else:
        worker.sock.close()
    os.close(worker.arena)


def _extent(value: Any) -> int:
    """How much of the arena a result's markers use."""
    items = value if type(value) is tuple else (value,)
    return max((item.offset + item.length for item in items if isinstance(item, InArena)), default=0)


def _reap(process: BaseProcess, timeout: float) -> None:
    """Wait for a worker to exit (killed if it has not within ``timeout``), then free its handle."""
    process.join(timeout)
    if process.is_alive():
        process.kill()
        process.join()
    process.close()
