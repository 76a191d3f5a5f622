"""The request path's one handle on telemetry: metrics, the request log and (optional) traces."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from modelgate.telemetry.gathered import Gathered
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
        self._ended: Gathered[RequestRecord] = Gathered(self._count, self.COUNT_EVERY, self.COUNT_SECONDS)

    #: Ended requests are counted in the metrics together: at most this many wait, ...
    COUNT_EVERY = 128
    #: ... for at most this long (and every scrape counts them first, so none is ever missed).
    COUNT_SECONDS = 0.25

    def finish(self, record: RequestRecord) -> None:
        """Count and log one request as it ended. The counting waits for the next batch
        (``count_ended``): done in one loop for many requests it costs a fraction of what it
        costs between requests (``telemetry.gathered``), and a scrape counts what waits first."""
        record.seconds = seconds = record.elapsed()
        if record.added is None and record.attempts:
            record.added = max(0.0, seconds - record.upstream_seconds)
        self._ended.add(record)
        if self.request_log:
            self.write_request(record)

    def count_ended(self) -> None:
        """Count every ended request still waiting in the metrics."""
        self._ended.flush()

    def _count(self, ended: list[RequestRecord]) -> None:
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
