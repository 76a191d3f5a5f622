"""One serving process of ``modelgate serve --workers N``, started by ``server.supervisor``.

A worker is a whole gateway: it builds its own services in its own interpreter (``spawn``: no
sockets, threads or pools copied from the parent), with its own event loop, upstream connection
pools, key view and SQLite connections, and serves on the listening socket the parent bound. What
the workers of one instance share is the database (the ledger is exact across processes, see
``storage.sqlite``), the rate-limit buckets (``limits.shared_tickets``, or Redis when configured) and
the in-flight cap (``limits.inflight.SharedInFlight``).

Signals: the parent forwards SIGTERM (first: drain, second: cut, as ``server.runner`` describes).
A terminal's Ctrl-C reaches every process of the group; workers ignore SIGINT, so it counts once,
through the parent. A worker whose parent dies gets SIGTERM from the kernel and drains too.
SIGHUP (forwarded by the parent, or from a closed terminal to the whole group) reloads the
configuration file in the worker (``server.reload``); until its handler is in place a worker
ignores SIGHUP (the parent starts it with SIGHUP ignored, which ``spawn`` keeps), so a reload
during a worker's start never kills it.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
from dataclasses import dataclass
from functools import partial
from multiprocessing.connection import Connection
from types import FrameType

import uvicorn

from modelgate.clock import Clock
from modelgate.config import Settings
from modelgate.limits.inflight import Counters, SharedInFlight
from modelgate.limits.shared_tickets import SharedTickets
from modelgate.offload.heap import keep_body_buffers
from modelgate.server.app import EdgeApp, create_app
from modelgate.server.file_limit import fit_connection_cap
from modelgate.server.reload import ConfigSource, Reloader
from modelgate.server.runner import DrainingServer, tune_garbage_collector, uvicorn_config
from modelgate.storage.file_probe import set_min_free_bytes
from modelgate.telemetry.logs import configure_logging

log = logging.getLogger("modelgate")
#: ``prctl`` option: the signal this process gets when its parent dies (Linux).
PR_SET_PDEATHSIG = 1
#: The exit code of a worker whose start-up failed (uvicorn's own code for it).
STARTUP_FAILURE = 3


@dataclass
class WorkerSpec:
    """Everything a worker needs, pickled to it by ``multiprocessing`` (sockets and the shared
    counters travel as file descriptors)."""

    index: int
    settings: Settings
    listener: socket.socket
    parent_pid: int
    #: The worker sends its index here once it serves.
    ready: Connection
    inflight: Counters
    #: The parent's end of the shared rate-limit buckets (None when Redis shares them).
    window: socket.socket | None
    #: Tests inject a clock all workers share (``None``: the system clock).
    clock: Clock | None = None
    #: Where SIGHUP reloads the configuration from (None: SIGHUP is ignored).
    source: ConfigSource | None = None


class WorkerServer(DrainingServer):
    def __init__(
        self,
        config: uvicorn.Config,
        app: EdgeApp,
        grace: float,
        *,
        ready: Connection,
        index: int,
        window: SharedTickets | None,
        reloader: Reloader | None,
    ) -> None:
        super().__init__(config, app, grace, reloader=reloader)
        self._ready = ready
        self._index = index
        self._window = window

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGINT:
            return  # the parent turns Ctrl-C into a SIGTERM for every worker
        super().handle_exit(sig, frame)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if self._window is not None:
            await self._window.connect()
        await super().startup(sockets)
        if self.started:
            with contextlib.suppress(OSError):
                self._ready.send(self._index)


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel for SIGTERM when the parent dies; leave at once if it already has."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent_pid:
        raise SystemExit(0)


def for_worker(settings: Settings, index: int) -> Settings:
    """The settings worker ``index`` serves with: its own ``metrics.port`` (``port + index``), so
    each worker's metrics can be scraped (the main port's ``/metrics`` answers for the worker
    that took the connection)."""
    if not settings.metrics.port or not index:
        return settings
    metrics = settings.metrics.model_copy(update={"port": settings.metrics.port + index})
    return settings.model_copy(update={"metrics": metrics})


def run_worker(spec: WorkerSpec) -> None:
    """The worker's whole life: build the gateway, serve until told to stop, then exit."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the server's reload handler is in place
    die_with_parent(spec.parent_pid)
    settings = for_worker(spec.settings, spec.index)
    request_writer = configure_logging(
        settings.log_level,
        settings.log_format,
        requests=settings.request_log,
        worker=spec.index,
        secrets=(settings.metrics.token, settings.secret),
    )
    app = create_app(settings, clock=spec.clock)
    services = app.services
    if request_writer is not None:
        services.telemetry.write_request = request_writer
    services.worker = spec.index
    services.inflight = SharedInFlight(settings.server.max_in_flight, spec.inflight, spec.index)
    window = SharedTickets(spec.window) if spec.window is not None else None
    if window is not None:
        services.tickets = window
    tune_garbage_collector()
    keep_body_buffers(settings.server.body_arena_bytes)
    set_min_free_bytes(services.database, settings.database_min_free_bytes)
    config = uvicorn_config(fit_connection_cap(settings), app)
    reloader = None
    if spec.source is not None:
        reloader = Reloader(services, spec.source, adjust=partial(for_worker, index=spec.index))
    server = WorkerServer(
        config,
        app,
        settings.server.shutdown_grace_seconds,
        ready=spec.ready,
        index=spec.index,
        window=window,
        reloader=reloader,
    )
    server.run(sockets=[spec.listener])
    if not server.started:
        raise SystemExit(STARTUP_FAILURE)
