"""``modelgate serve --workers N``: a parent process that keeps N serving processes on one port.

The parent binds the listening socket once and starts the workers (``server.worker``) with the
``spawn`` method, handing each the socket: the kernel queues connections on it, and whichever
worker is free accepts the next one. The parent serves no HTTP itself. It:

- migrates the database once before any worker starts (workers then find nothing to do);
- holds the instance's shared rate-limit buckets (``limits.shared_tickets``) unless Redis does, and
  the shared in-flight counters (``limits.inflight.SharedInFlight``);
- restarts a worker that dies (at once; one that dies again within ``STABLE_SECONDS`` of its
  start waits, twice as long each time, up to ``server.worker_restart_max_delay_seconds``), after
  zeroing its in-flight slot. Its requests in flight are lost with it: their holds stay pending
  until the sweeper releases them (``billing.reservation_ttl_seconds``), as after any crash;
- on SIGTERM or SIGINT forwards SIGTERM to every worker, which drains as one process would
  (``server.runner``); a second signal is forwarded too, and cuts at once; after the grace plus
  ``KILL_MARGIN`` seconds, workers still running are killed. The parent exits once all have.
- on SIGHUP reads the configuration file again and validates it (``server.reload``): a file that
  fails is logged and goes no further, the workers keep serving; a valid one becomes the
  configuration restarted workers get (its live keys) and SIGHUP is forwarded to every worker,
  which applies it itself without cutting anything. Workers start with SIGHUP ignored until
  their own handler is in place, so one that was starting during a reload gets its SIGHUP
  when it reports ready;
- stops everything if a worker of the first start fails before it serves (a bad configuration
  fails the same way every time, so restarting would only loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import socket
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from modelgate.clock import Clock
from modelgate.config import Settings
from modelgate.limits.shared_tickets import TicketService
from modelgate.server.app import EdgeApp
from modelgate.server.reload import ConfigSource, load_checked, set_log_level
from modelgate.server.runner import CUT_MARGIN, uvicorn_config
from modelgate.server.worker import WorkerSpec, run_worker
from modelgate.storage import StorageError, open_store
from modelgate.telemetry.logs import scrub_also

log = logging.getLogger("modelgate")
#: A worker that lived this long before dying is restarted at once.
STABLE_SECONDS = 10.0
#: The first delay before restarting a worker that died young (doubled per further such death).
FIRST_DELAY_SECONDS = 0.5
#: Seconds after the grace (and the workers' own cut margin) before the parent kills a worker.
KILL_MARGIN = 5.0
EXIT_OK = 0
EXIT_FAILED = 1


@dataclass
class _Worker:
    index: int
    process: BaseProcess
    ready: Connection
    started_at: float
    #: The parent's reload generation the worker was started with (``_State.generation``).
    generation: int = 0
    serving: bool = False
    window: asyncio.Transport | None = None


@dataclass
class _State:
    workers: dict[int, _Worker] = field(default_factory=dict)
    #: Consecutive young deaths per worker index (for the restart delay).
    young_deaths: dict[int, int] = field(default_factory=dict)
    restarts: dict[int, asyncio.TimerHandle] = field(default_factory=dict)
    signals: int = 0
    failed: bool = False
    #: True once every worker of the first start served.
    up: bool = False
    #: Valid reloads so far: a worker started before the latest one ignored its SIGHUP (its
    #: handler was not in place yet), so it gets one more when it reports ready.
    generation: int = 0


class Supervisor:
    def __init__(
        self,
        settings: Settings,
        app: EdgeApp,
        *,
        clock: Clock | None = None,
        source: ConfigSource | None = None,
    ) -> None:
        self._settings = settings
        self._source = source
        self._app = app
        self._clock = clock
        self.count = settings.server.worker_count
        self._context = multiprocessing.get_context("spawn")
        self._inflight: Any = self._context.RawArray("q", self.count)
        self._window = None if settings.redis_url else TicketService()
        self._state = _State()
        self._done: asyncio.Event | None = None
        self._kill_timer: asyncio.TimerHandle | None = None

    def run(self) -> int:
        """Serve until stopped; the exit code of the whole instance."""
        config = uvicorn_config(self._settings, self._app)
        listener = config.bind_socket()
        # Listening from now on: connections made while no worker is up (at start, or while the
        # only one restarts) wait in the backlog instead of being refused.
        listener.listen(config.backlog)
        try:
            return _run_loop(self._run(listener))
        finally:
            listener.close()

    async def _run(self, listener: socket.socket) -> int:
        loop = asyncio.get_running_loop()
        self._done = asyncio.Event()
        try:
            await _migrate(self._settings)
        except StorageError as exc:
            log.error("cannot start: the database: %s", exc)
            return EXIT_FAILED
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal)
        if self._source is not None:
            loop.add_signal_handler(signal.SIGHUP, self._on_hangup)
        for index in range(self.count):
            self._start(index, listener)
        await self._done.wait()
        if self._kill_timer is not None:
            self._kill_timer.cancel()
        return EXIT_FAILED if self._state.failed else EXIT_OK

    # workers ------------------------------------------------------------------------------

    def _start(self, index: int, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        state = self._state
        state.restarts.pop(index, None)
        receive, send = self._context.Pipe(duplex=False)
        ours, theirs = socket.socketpair() if self._window is not None else (None, None)
        self._inflight[index] = 0
        spec = WorkerSpec(
            index=index,
            settings=self._settings,
            listener=listener,
            parent_pid=os.getpid(),
            ready=send,
            inflight=self._inflight,
            window=theirs,
            clock=self._clock,
            source=self._source,
        )
        process = self._context.Process(
            target=run_worker, args=(spec,), name=f"modelgate-worker-{index}", daemon=False
        )
        # The worker inherits SIGHUP ignored (``spawn`` keeps an ignored signal, not a handler)
        # until its own reload handler is in place.
        handler = signal.signal(signal.SIGHUP, signal.SIG_IGN)
        try:
            process.start()
        finally:
            signal.signal(signal.SIGHUP, handler)
        send.close()
        worker = _Worker(index, process, receive, time.monotonic(), state.generation)
        state.workers[index] = worker
        if ours is not None and theirs is not None:
            theirs.close()
            assert self._window is not None
            link = loop.create_task(self._window.serve(ours))
            link.add_done_callback(lambda done: self._linked(worker, done))
        loop.add_reader(receive.fileno(), self._on_ready, worker)
        loop.add_reader(process.sentinel, self._on_exit, worker, listener)

    def _linked(self, worker: _Worker, done: asyncio.Task[asyncio.Transport]) -> None:
        if not done.cancelled() and done.exception() is None:
            worker.window = done.result()
        else:
            log.error("worker %d: could not attach the shared rate-limit window", worker.index)

    def _on_ready(self, worker: _Worker) -> None:
        loop = asyncio.get_running_loop()
        try:
            worker.ready.recv()
        except (EOFError, OSError):
            pass  # the worker is gone; its sentinel reports it
        else:
            worker.serving = True
            log.info("worker %d serving (pid %s)", worker.index, worker.process.pid)
        loop.remove_reader(worker.ready.fileno())
        state = self._state
        if worker.serving and worker.generation != state.generation and not state.signals:
            log.info("worker %d started before the last reload: passing SIGHUP to it", worker.index)
            worker.generation = state.generation
            _signal(worker.process, signal.SIGHUP)
        if not state.up and all(w.serving for w in state.workers.values()):
            state.up = True
            server = self._settings.server
            log.info("%d workers serving on http://%s:%d", self.count, server.host, server.port)

    def _on_exit(self, worker: _Worker, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        process = worker.process
        loop.remove_reader(process.sentinel)
        with contextlib.suppress(ValueError, OSError):
            loop.remove_reader(worker.ready.fileno())
        process.join(0)
        worker.ready.close()
        if worker.window is not None:
            worker.window.close()
        state = self._state
        state.workers.pop(worker.index, None)
        self._inflight[worker.index] = 0
        if state.signals:
            if not state.workers and self._done is not None:
                self._done.set()
            return
        lived = time.monotonic() - worker.started_at
        how = _describe_exit(process.exitcode)
        if not state.up and not worker.serving:
            log.error("worker %d %s before it served; stopping (see the errors above)", worker.index, how)
            state.failed = True
            self._stop_all()
            return
        young = state.young_deaths.get(worker.index, 0) + 1 if lived < STABLE_SECONDS else 0
        state.young_deaths[worker.index] = young
        delay = 0.0
        if young:
            ceiling = self._settings.server.worker_restart_max_delay_seconds
            delay = min(ceiling, FIRST_DELAY_SECONDS * 2 ** (young - 1))
        log.warning(
            "worker %d (pid %s) %s after %.1f s; restarting it%s",
            worker.index,
            process.pid,
            how,
            lived,
            f" in {delay:g} s" if delay else "",
        )
        state.restarts[worker.index] = loop.call_later(delay, self._start, worker.index, listener)

    # reloading ----------------------------------------------------------------------------

    def _on_hangup(self) -> None:
        assert self._source is not None
        where = self._source.describe()
        if self._state.signals:
            log.warning("SIGHUP while stopping: not reloading %s", where)
            return
        try:
            changes = load_checked(self._source, self._settings)
        except Exception as exc:  # a bad file must never stop the instance
            log.error("reload of %s failed; workers keep the running configuration: %s", where, exc)
            return
        self._settings = changes.settings
        set_log_level(changes.settings.log_level)
        scrub_also((changes.settings.metrics.token,))
        state = self._state
        state.generation += 1
        # A worker not serving yet may ignore this SIGHUP: it gets one when it is ready.
        serving = [worker for worker in state.workers.values() if worker.serving]
        log.info("reload of %s: valid; passing SIGHUP to %d worker(s)", where, len(serving))
        for worker in serving:
            worker.generation = state.generation
            _signal(worker.process, signal.SIGHUP)

    # stopping -----------------------------------------------------------------------------

    def _on_signal(self) -> None:
        state = self._state
        state.signals += 1
        if state.signals == 1:
            grace = self._settings.server.shutdown_grace_seconds
            log.info("stopping: %d worker(s) drain for up to %.0f s", len(state.workers), grace)
        else:
            log.info("second signal: workers end what is still running now")
        self._stop_all()

    def _stop_all(self) -> None:
        state = self._state
        state.signals = max(state.signals, 1)
        if self._kill_timer is None:
            grace = self._settings.server.shutdown_grace_seconds
            self._kill_timer = asyncio.get_running_loop().call_later(
                grace + CUT_MARGIN + KILL_MARGIN, self._kill_all
            )
        for timer in state.restarts.values():
            timer.cancel()
        state.restarts.clear()
        for worker in state.workers.values():
            _signal(worker.process, signal.SIGTERM)
        if not state.workers and self._done is not None:
            self._done.set()

    def _kill_all(self) -> None:
        for worker in self._state.workers.values():
            log.warning("worker %d still running after the grace: killing it", worker.index)
            _signal(worker.process, signal.SIGKILL)


def _signal(process: BaseProcess, sig: int) -> None:
    if process.pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, sig)


def _describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


async def _migrate(settings: Settings) -> None:
    store = open_store(settings.resolved_database_url, pool_size=settings.database_pool_size)
    try:
        await store.database.migrate()
    finally:
        await store.database.close()


def _run_loop(main: Coroutine[Any, Any, int]) -> int:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return int(uvloop.run(main))


def supervise(
    settings: Settings, app: EdgeApp, *, clock: Clock | None = None, source: ConfigSource | None = None
) -> int:
    """Run ``settings.server.worker_count`` workers until stopped (SIGHUP reloads from
    ``source``); returns the exit code."""
    return Supervisor(settings, app, clock=clock, source=source).run()
