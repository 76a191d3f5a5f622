"""``metrics.port``: ``GET /metrics`` on a port of its own (loopback by default), without the
main port's token, for a Prometheus on the same host or network namespace."""

from __future__ import annotations

import logging

from aiohttp import web

from modelgate.config import MetricsConfig
from modelgate.telemetry import Telemetry
from modelgate.telemetry.metrics import CONTENT_TYPE

log = logging.getLogger("modelgate")


class MetricsPort:
    def __init__(self, config: MetricsConfig, telemetry: Telemetry) -> None:
        self._config = config
        self._telemetry = telemetry
        self._runner: web.AppRunner | None = None

    async def _metrics(self, request: web.Request) -> web.Response:
        body = await self._telemetry.exposition()
        return web.Response(body=body, headers={"content-type": CONTENT_TYPE})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._config.host, self._config.port, reuse_address=True)
        await site.start()
        log.info("metrics on http://%s:%d/metrics", self._config.host, self._config.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
