"""Running the gateway under uvicorn: the connection protocol, the open-file limit, and a graceful
shutdown on SIGTERM (``modelgate.lifecycle``).

Shutdown, as ``DrainingServer`` runs it: the first SIGTERM or SIGINT stops accepting connections,
closes idle keep-alive connections and begins the drain (``Drain.begin``), so ``/health`` says
``draining``, ``/readyz`` answers 503 and new requests get a 503 in their format. Requests in
flight run for up to ``server.shutdown_grace_seconds``; then the ones still running are cut (whole
requests answer 503, streams end with their in-band error, each settled as ``shutdown``), the
ledger's settlements finish, and the process exits, within the grace plus about a second. A
second signal cuts at once.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import resource
import socket
from types import FrameType

import uvicorn

from modelgate.config import Settings
from modelgate.server.app import EdgeApp
from modelgate.server.protocol import guarded_protocol
from modelgate.server.websocket import DrainingWebSocketProtocol

log = logging.getLogger("modelgate")

#: Seconds between the end of the grace and uvicorn cancelling what is still running (a backstop:
#: cut requests end in milliseconds).
CUT_MARGIN = 1.0


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft limit on open files to the hard limit (each connection holds one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            return soft, hard
        soft = hard
    return soft, hard


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
    return uvicorn.Config(
        app,
        host=server.host,
        port=server.port,
        loop=loop,
        http=guarded_protocol(server, app.services.edge),
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
        timeout_keep_alive=int(max(1, round(server.keep_alive_seconds))),
        timeout_graceful_shutdown=int(server.shutdown_grace_seconds + CUT_MARGIN + 1),
        # Client addresses are never used, so X-Forwarded-* parsing would be work for nothing.
        proxy_headers=False,
        server_header=False,
    )


class DrainingServer(uvicorn.Server):
    """uvicorn's server with the drain described in the module docstring."""

    def __init__(self, config: uvicorn.Config, app: EdgeApp, grace: float) -> None:
        super().__init__(config)
        self._app = app
        self._grace = grace

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
        if self.force_exit:
            # uvicorn skips the application's shutdown on a forced exit; holds must still settle.
            try:
                await asyncio.wait_for(services.stop(), timeout=CUT_MARGIN)
            except Exception:  # exiting anyway: say so, the sweeper releases what is left
                log.warning("forced exit: the ledger's last settlements may not have finished", exc_info=True)


def serve(settings: Settings, app: EdgeApp) -> None:
    """Run the gateway until it is stopped (``modelgate serve``)."""
    soft, hard = raise_open_file_limit()
    log.info("open-file limit: %d (hard %d); connection cap %d", soft, hard, settings.server.max_connections)
    config = uvicorn_config(settings, app)
    DrainingServer(config, app, settings.server.shutdown_grace_seconds).run()
