"""The request path's one handle on telemetry: metrics, the request log and (optional) traces."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from modelgate.telemetry.logs import log_request
from modelgate.telemetry.metrics import Metrics
from modelgate.telemetry.record import RequestRecord
from modelgate.telemetry.tracing import Tracing


class Telemetry:
    def __init__(
        self, metrics: Metrics | None = None, tracing: Tracing | None = None, *, request_log: bool = True
    ) -> None:
        self.metrics = metrics if metrics is not None else Metrics(process=False)
        #: None unless ``otel.endpoint`` is set (then every request gets a ``RequestTrace``).
        self.tracing = tracing
        self.request_log = request_log
        #: Where request records go: the ``modelgate.requests`` logger, or a faster writer of the
        #: same lines (``logs.RequestLineWriter``, set by ``modelgate serve`` for JSON logs).
        self.write_request: Callable[[RequestRecord], None] = log_request
        #: Streams being relayed now.
        self.open_streams = 0
        #: Run before each scrape (reads of database-wide state); see ``gateway.state_metrics``.
        self.before_scrape: list[Callable[[], Awaitable[None]]] = []
        self.state_readers_installed = False
        #: Requests ended but not counted yet (``finish``).
        self._ended: list[RequestRecord] = []
        self._count_timer: asyncio.TimerHandle | None = None

    #: Ended requests are counted in the metrics together: at most this many wait, ...
    COUNT_EVERY = 128
    #: ... for at most this long (and every scrape counts them first, so none is ever missed).
    COUNT_SECONDS = 0.25

    def finish(self, record: RequestRecord) -> None:
        """Count and log one request as it ended. The counting waits for the next batch
        (``count_ended``): done in one loop for many requests it costs a fraction of what it
        costs between requests (measured in the gateway), and a scrape counts what waits first."""
        record.seconds = seconds = record.elapsed()
        if record.added is None and record.attempts:
            record.added = max(0.0, seconds - record.upstream_seconds)
        self._ended.append(record)
        if len(self._ended) >= self.COUNT_EVERY:
            self.count_ended()
        elif self._count_timer is None:
            try:
                self._count_timer = asyncio.get_running_loop().call_later(
                    self.COUNT_SECONDS, self.count_ended
                )
            except RuntimeError:  # no loop: nothing to batch with
                self.count_ended()
        if self.request_log:
            self.write_request(record)

    def count_ended(self) -> None:
        """Count every ended request still waiting in the metrics."""
        if self._count_timer is not None:
            self._count_timer.cancel()
            self._count_timer = None
        ended, self._ended = self._ended, []
        request = self.metrics.request
        for record in ended:
            request(record)

    async def exposition(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        self.count_ended()
        for refresh in self.before_scrape:
            await refresh()
        return self.metrics.exposition()

    def shutdown(self) -> None:
        self.count_ended()
        flush = getattr(self.write_request, "flush", None)
        if flush is not None:
            flush()
        if self.tracing is not None:
            self.tracing.shutdown()
