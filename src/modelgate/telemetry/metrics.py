"""Prometheus metrics (``GET /metrics``; docs/operations.md lists every series).

Costs are paid once per request, at its end (``Metrics.request``): label tuples and histogram
children are made once per kind of request, so recording one is a handful of dictionary updates
(``telemetry.instruments``, no locks); nothing is counted per streamed chunk. State that other components already keep (connection-level refusals,
offloaded jobs, the sweeper's releases, rate-limiter fallbacks, deployment health, the ledger's
pending holds, the key cache's age) is read when Prometheus scrapes (``Metrics.collect_from``).

Labels never hold a key secret, an account name or free text: endpoints, canonical model ids, key
groups, status classes, outcomes, provider names and upstream model ids from the configuration.
Key ids are added only with ``metrics.per_key = true`` (off by default: one series per key).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from modelgate.telemetry.instruments import Instruments
from modelgate.telemetry.record import RequestRecord

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Seconds: whole requests and streams run from milliseconds (refusals) to minutes.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
#: Seconds the gateway itself adds: sub-millisecond to a database hiccup.
ADDED_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5)
LEDGER_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
#: 0 is a batch that left at once; the wait is at most ``database_batch_wait_seconds`` (≤ 0.1).
BATCH_WAIT_BUCKETS = (0.0, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1)


class Metrics:
    def __init__(self, *, per_key: bool = False, process: bool = True) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.per_key = per_key
        key = ("key_id",) if per_key else ()
        made = Instruments()
        self.requests = made.counter(
            "modelgate_requests", "Model requests by endpoint, canonical model, key group, status class and outcome.",
            ("endpoint", "model", "group", "status_class", "outcome", *key),
        )  # fmt: skip
        self.duration = made.histogram(
            "modelgate_request_duration_seconds", "Seconds from a request's arrival to its last byte.",
            ("endpoint", "model", "stream"), DURATION_BUCKETS,
        )  # fmt: skip
        self.ttft = made.histogram(
            "modelgate_time_to_first_token_seconds", "Streams: seconds from arrival to the first event sent.",
            ("endpoint", "model"), DURATION_BUCKETS,
        )  # fmt: skip
        self.added = made.histogram(
            "modelgate_gateway_added_seconds",
            "Seconds the gateway added: request time minus upstream time (streams: up to the first event).",
            ("endpoint", "stream"), ADDED_BUCKETS,
        )  # fmt: skip
        self.tokens = made.counter(
            "modelgate_tokens",
            "Tokens billed, by canonical model, key group and kind.",
            ("model", "group", "kind", *key),
        )
        self.charged = made.counter(
            "modelgate_charged_microcredits", "Micro-credits charged, by canonical model and key group.",
            ("model", "group", *key),
        )  # fmt: skip
        self.billing_refusals = made.counter(
            "modelgate_billing_refusals", "402 refusals by reason.", ("reason",)
        )
        self.key_access_refusals = made.counter(
            "modelgate_key_access_refusals",
            "Requests refused by a key's own rules: expired (401) or from outside its address ranges (403).",
            ("reason",),
        )
        self.refusal_records_dropped = made.counter(
            "modelgate_refusal_records_dropped",
            "Refused requests not recorded in the usage log: billing.max_pending_refusal_records were waiting.",
            (),
        )
        self.limit_refusals = made.counter(
            "modelgate_limit_refusals",
            "Requests refused by a key's or account's limit: rpm, tpm, concurrency (429) or "
            "cap-5h, cap-day, cap-week, cap-month (402).",
            ("limit",),
        )
        self.clamps = made.counter(
            "modelgate_max_tokens_clamps",
            "Requests whose max_tokens the gateway lowered, by reason.",
            ("reason",),
        )
        upstream = ("provider", "deployment")
        self.upstream_attempts = made.counter(
            "modelgate_upstream_attempts",
            "Upstream attempts by provider and deployment (upstream model).",
            upstream,
        )
        self.upstream_retries = made.counter(
            "modelgate_upstream_retries", "Attempts after a failure on the same deployment.", upstream
        )
        self.upstream_failovers = made.counter(
            "modelgate_upstream_failovers", "Attempts after a failure, moved to another deployment.", upstream
        )
        self.upstream_errors = made.counter(
            "modelgate_upstream_errors", "Failed upstream attempts and streams broken mid-way, by class.",
            (*upstream, "class"),
        )  # fmt: skip
        self.upstream_tokens = made.counter(
            "modelgate_upstream_tokens",
            "Prompt tokens by the deployment that answered and kind: input (uncached), cache_read, "
            "cache_write; cache_read / all three is the deployment's prompt-cache hit ratio.",
            (*upstream, "kind"),
        )
        self.upstream_latency = made.histogram(
            "modelgate_upstream_latency_seconds", "Seconds from sending to an upstream to its response head.",
            upstream, DURATION_BUCKETS,
        )  # fmt: skip
        self.ledger_write = made.histogram(
            "modelgate_ledger_write_seconds", "Seconds of one ledger write transaction (a group commit).",
            (), LEDGER_BUCKETS,
        ).child()  # fmt: skip
        self.ledger_batch = made.histogram(
            "modelgate_ledger_batch_size",
            "Ledger operations committed in one transaction.",
            (),
            BATCH_BUCKETS,
        ).child()
        self.ledger_batch_wait = made.histogram(
            "modelgate_ledger_batch_wait_seconds",
            "Seconds a ledger batch waited for company before it left (database_batch_wait_seconds).",
            (),
            BATCH_WAIT_BUCKETS,
        ).child()
        #: The ledger may report from a store's worker thread (a write waiting for a lock).
        self._ledger_lock = threading.Lock()
        self.registry.register(made)
        if process:
            ProcessCollector(registry=self.registry)
            GCCollector(registry=self.registry)
        self._by_request: dict[tuple[Any, ...], _Series] = {}
        #: (provider, deployment) -> the label tuples of its input, cache_read, cache_write tokens.
        self._by_deployment: dict[tuple[str, str], tuple[tuple[str, ...], ...]] = {}

    # per request ----------------------------------------------------------------------------

    def _series(self, record: RequestRecord) -> _Series:
        key = (
            record.endpoint,
            record.model,
            record.group,
            record.stream,
            record.key_id if self.per_key else "",
        )
        series = self._by_request.get(key)
        if series is None:
            series = self._by_request[key] = _Series(self, *key)
        return series

    def request(self, record: RequestRecord) -> None:
        """Count one model request as it ended (once, at its end: nothing per streamed chunk)."""
        series = self._series(record)
        status = record.status
        outcome = (status // 100, record.outcome)
        labels = series.requests.get(outcome)
        if labels is None:
            status_class = f"{status // 100}xx" if status else "none"
            labels = series.requests[outcome] = (*series.labels, status_class, record.outcome, *series.key)
        self.requests.inc(labels)
        series.duration.observe(record.seconds)
        if record.ttft is not None:
            series.ttft.observe(record.ttft)
        if record.added is not None:
            series.added.observe(record.added)
        if record.charged_uc:
            self.charged.inc(series.spend, record.charged_uc)
        tokens = self.tokens
        if record.input_tokens:
            tokens.inc(series.input, record.input_tokens)
        if record.output_tokens:
            tokens.inc(series.output, record.output_tokens)
        if record.cache_read_tokens:
            tokens.inc(series.cache_read, record.cache_read_tokens)
        if record.cache_write_tokens:
            tokens.inc(series.cache_write, record.cache_write_tokens)
        if record.provider and (record.input_tokens or record.cache_read_tokens or record.cache_write_tokens):
            self._deployment_tokens(record)
        if record.mid_stream_error is not None and record.provider:
            self.upstream_errors.inc((record.provider, record.deployment, record.mid_stream_error))

    def _deployment_tokens(self, record: RequestRecord) -> None:
        where = (record.provider, record.deployment)
        labels = self._by_deployment.get(where)
        if labels is None:
            labels = self._by_deployment[where] = tuple(
                (*where, kind) for kind in ("input", "cache_read", "cache_write")
            )
        tokens = self.upstream_tokens
        for label, count in zip(
            labels, (record.input_tokens, record.cache_read_tokens, record.cache_write_tokens), strict=True
        ):
            if count:
                tokens.inc(label, count)

    def billing_refused(self, reason: str) -> None:
        self.billing_refusals.inc((reason,))

    def key_access_refused(self, reason: str) -> None:
        self.key_access_refusals.inc((reason,))

    def refusal_record_dropped(self) -> None:
        self.refusal_records_dropped.inc(())

    def limit_refused(self, limit: str) -> None:
        self.limit_refusals.inc((limit,))

    def clamped(self, reason: str) -> None:
        self.clamps.inc((reason,))

    # upstream attempts ----------------------------------------------------------------------

    def attempt(self, provider: str, deployment: str, reason: str) -> None:
        """An upstream attempt; ``reason`` is first, retry (same deployment after a failure) or
        failover (another deployment after a failure)."""
        labels = (provider, deployment)
        self.upstream_attempts.inc(labels)
        if reason == "retry":
            self.upstream_retries.inc(labels)
        elif reason == "failover":
            self.upstream_failovers.inc(labels)

    def attempt_ended(
        self, provider: str, deployment: str, error: str | None, head_seconds: float | None
    ) -> None:
        if head_seconds is not None:
            self.upstream_latency.child((provider, deployment)).observe(head_seconds)
        if error is not None:
            self.upstream_errors.inc((provider, deployment, error))

    # ledger (storage.base.LedgerObserver) ---------------------------------------------------

    def ledger_committed(self, seconds: float, operations: int, waited: float = 0.0) -> None:
        with self._ledger_lock:
            self.ledger_write.observe(seconds)
            self.ledger_batch.observe(operations)
            self.ledger_batch_wait.observe(waited)

    # at scrape time -------------------------------------------------------------------------

    def collect_from(self, read: Callable[[], Iterable[Metric]]) -> None:
        """Register ``read``: called at each scrape, it yields metric families built from state
        other components keep."""
        self.registry.register(_Reader(read))

    def exposition(self) -> bytes:
        return bytes(generate_latest(self.registry))


class _Series:
    """What one kind of request (endpoint, model, group, stream[, key]) updates: its histogram
    children and the label tuples of its counters, made once."""

    __slots__ = (
        "added", "cache_read", "cache_write", "duration", "input", "key", "labels", "output",
        "requests", "spend", "ttft",
    )  # fmt: skip

    def __init__(
        self, metrics: Metrics, endpoint: str, model: str, group: str, stream: bool, key_id: str
    ) -> None:
        flag = "true" if stream else "false"
        self.labels = (endpoint, model, group)
        self.key = (key_id,) if metrics.per_key else ()
        #: (status // 100, outcome) -> the request counter's labels, made on first use.
        self.requests: dict[tuple[int, str], tuple[str, ...]] = {}
        self.duration = metrics.duration.child((endpoint, model, flag))
        self.ttft = metrics.ttft.child((endpoint, model))
        self.added = metrics.added.child((endpoint, flag))
        self.spend = (model, group, *self.key)
        self.input = (model, group, "input", *self.key)
        self.output = (model, group, "output", *self.key)
        self.cache_read = (model, group, "cache_read", *self.key)
        self.cache_write = (model, group, "cache_write", *self.key)


class _Reader(Collector):
    def __init__(self, read: Callable[[], Iterable[Metric]]) -> None:
        self._read = read

    def collect(self) -> Iterable[Metric]:
        return self._read()

    def describe(self) -> Iterable[Metric]:
        return ()


def gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def labelled_gauge(
    name: str, documentation: str, labels: tuple[str, ...], values: Iterable[tuple[tuple[str, ...], float]]
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=labels)
    for label_values, value in values:
        family.add_metric(list(label_values), value)
    return family


def counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


def labelled_counter(
    name: str, documentation: str, labels: tuple[str, ...], values: Mapping[tuple[str, ...], float]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation, labels=labels)
    for label_values, value in values.items():
        family.add_metric(list(label_values), value)
    return family
