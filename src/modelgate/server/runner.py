"""Running the gateway under uvicorn: the connection protocol, the open-file limit, and a graceful
shutdown on SIGTERM (``modelgate.lifecycle``).

Shutdown, as ``DrainingServer`` runs it: the first SIGTERM or SIGINT stops accepting connections,
closes idle keep-alive connections and begins the drain (``Drain.begin``), so ``/health`` says
``draining``, ``/readyz`` answers 503 and new requests get a 503 in their format. Requests in
flight run for up to ``server.shutdown_grace_seconds``; then the ones still running are cut (whole
requests answer 503, streams end with their in-band error, each settled as ``shutdown``), the
ledger's settlements finish, and the process exits, within the grace plus about a second. A
second signal cuts at once.

SIGHUP reloads the configuration file (``server.reload``): nothing is cut, a file that fails
validation changes nothing and is logged.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import socket
import threading
from types import FrameType

import uvicorn

from modelgate.config import Settings
from modelgate.server.app import EdgeApp
from modelgate.server.file_limit import fit_connection_cap
from modelgate.server.protocol import guarded_protocol
from modelgate.server.reload import ConfigSource, Reloader, on_hangup
from modelgate.server.websocket import DrainingWebSocketProtocol
from modelgate.storage.file_probe import set_min_free_bytes

log = logging.getLogger("modelgate")

#: Seconds between the end of the grace and uvicorn cancelling what is still running (a backstop:
#: cut requests end in milliseconds).
CUT_MARGIN = 1.0


def tune_garbage_collector() -> None:
    """Keep the cycle collector off the request path.

    Everything loaded at start (modules, the catalogue, pydantic models, clients) lives as long
    as the process; ``gc.freeze`` moves it out of the collector's generations, so a full
    collection no longer walks tens of megabytes of objects that can never be garbage (such a
    walk was a periodic multi-millisecond stall). Request objects are freed by reference counting;
    the collector runs less often for the few cycles they leave (asyncio exceptions, tracebacks).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 20)


def uvicorn_config(
    settings: Settings, app: EdgeApp, *, loop: str = "auto", log_level: str | None = None
) -> uvicorn.Config:
    server, responses = settings.server, settings.responses
    keep_alive = int(max(1, round(server.keep_alive_seconds)))
    return uvicorn.Config(
        app,
        host=server.host,
        port=server.port,
        loop=loop,
        http=guarded_protocol(
            server, app.services.edge, lambda: app.services.settings.server, shape_for=app.shape_for
        ),
        # GET /v1/responses may upgrade (server.websocket); with responses.websocket off every
        # upgrade is served as plain HTTP and refused in JSON (426 on /v1/responses).
        ws=DrainingWebSocketProtocol if responses.websocket else "none",
        ws_max_size=responses.websocket_max_message_bytes,
        ws_ping_interval=responses.websocket_ping_interval_seconds or None,
        ws_ping_timeout=responses.websocket_ping_interval_seconds or None,
        ws_per_message_deflate=True,
        lifespan="on",
        # Our own handlers (telemetry.logs) format uvicorn's lines too: JSON or text alike.
        log_config=None,
        access_log=server.access_log,
        log_level=log_level or settings.log_level,
        timeout_keep_alive=keep_alive,
        # Clients' pools learn how long an idle connection is kept, and stop reusing it before
        # the gateway closes it (docs/operations.md#keep-alive).
        headers=[("keep-alive", f"timeout={keep_alive}")],
        timeout_graceful_shutdown=int(server.shutdown_grace_seconds + CUT_MARGIN + 1),
        # Client addresses are never used, so X-Forwarded-* parsing would be work for nothing.
        proxy_headers=False,
        server_header=False,
    )


class DrainingServer(uvicorn.Server):
    """uvicorn's server with the drain described in the module docstring."""

    def __init__(
        self, config: uvicorn.Config, app: EdgeApp, grace: float, *, reloader: Reloader | None = None
    ) -> None:
        super().__init__(config)
        self._app = app
        self._grace = grace
        #: Runs on SIGHUP (None: SIGHUP is left as it was, e.g. in tests' threads).
        self.reloader = reloader

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if self.reloader is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGHUP, on_hangup(asyncio.get_running_loop(), self.reloader))
        await super().startup(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit:
            # A second signal: end everything now (requests are cut and settled, then exit).
            self.force_exit = True
            loop = self._app.loop
            if loop is not None:
                loop.call_soon_threadsafe(self._app.services.drain.cut_now)
            return
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        services = self._app.services
        services.drain.begin(self._grace)
        log.info("draining: grace %.0f s, %d request(s) in flight", self._grace, services.inflight.in_flight)
        await super().shutdown(sockets)
        if self.reloader is not None:
            await self.reloader.stop()
        if self.force_exit:
            # uvicorn skips the application's shutdown on a forced exit; holds must still settle.
            try:
                await asyncio.wait_for(services.stop(), timeout=CUT_MARGIN)
            except Exception:  # exiting anyway: say so, the sweeper releases what is left
                log.warning("forced exit: the ledger's last settlements may not have finished", exc_info=True)


def serve(settings: Settings, app: EdgeApp, source: ConfigSource | None = None) -> None:
    """Run the gateway until it is stopped (``modelgate serve``); SIGHUP reloads from ``source``."""
    set_min_free_bytes(app.services.database, settings.database_min_free_bytes)
    config = uvicorn_config(fit_connection_cap(settings), app)
    reloader = Reloader(app.services, source) if source is not None else None
    DrainingServer(config, app, settings.server.shutdown_grace_seconds, reloader=reloader).run()
