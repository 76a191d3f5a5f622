"""What the request path tells the telemetry (``modelgate.telemetry``): how a request ended, and
what its upstream attempts did. Everything lands in the request's ``RequestRecord``, which is
counted, logged and closed as a span once, when the request ends (``pipeline.finish_exchange``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from modelgate import errors, ir
from modelgate.billing.ledger import UsageStatus
from modelgate.storage.base import Settlement
from modelgate.telemetry.metrics import Metrics
from modelgate.telemetry.record import RequestRecord
from modelgate.upstream.base import Deployment, Provider
from modelgate.upstream.kinds import genai_provider_name
from modelgate.upstream.router import AttemptReason

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from modelgate.telemetry.tracing import RequestTrace


class ShutdownRefusal(errors.Unavailable):
    """A 503 because the gateway is shutting down (refused while draining, or cut by the end of
    the grace): outcome ``shutdown``, not ``error``."""


#: Outcomes of the gateway's own refusals, by error kind (``errors.ERROR_KINDS``).
_REFUSALS: Mapping[str, str] = {
    "invalid_request": "refused_invalid",
    "method_not_allowed": "refused_invalid",
    "request_timeout": "refused_invalid",
    "request_too_large": "refused_invalid",
    "authentication": "refused_auth",
    "permission": "refused_auth",
    "billing": "refused_billing",
    "not_found": "refused_not_found",
    "rate_limit": "refused_rate_limit",
    "upstream_error": "upstream_error",
    "timeout": "upstream_error",
    "overloaded": "upstream_error",
}

#: Outcomes of streams, by how they ended.
_STREAM_OUTCOMES: Mapping[UsageStatus, str] = {
    UsageStatus.OK: "ok",
    UsageStatus.UPSTREAM_INCOMPLETE: "ok",
    UsageStatus.UPSTREAM_FAILED_MID_STREAM: "upstream_error",
    UsageStatus.UPSTREAM_ERROR_IN_BAND: "upstream_error",
    UsageStatus.CLIENT_DISCONNECTED: "client_gone",
    UsageStatus.SHUTDOWN: "shutdown",
    UsageStatus.CANCELLED: "cancelled",
}


def outcome_of(error: errors.GatewayError) -> str:
    if isinstance(error, ShutdownRefusal):
        return "shutdown"
    if error.from_upstream:
        return "upstream_error"
    return _REFUSALS.get(error.kind, "error")


def refused(record: RequestRecord, error: errors.GatewayError, status: int) -> None:
    """The client is answered with ``error``."""
    record.status = status
    record.error_type = error.kind
    record.error_code = error.code or error.spec.code
    if record.outcome == "ok":
        record.outcome = outcome_of(error)


def stream_ended(record: RequestRecord, status: UsageStatus) -> None:
    record.outcome = _STREAM_OUTCOMES.get(status, "error")


def settled(
    record: RequestRecord, usage: ir.Usage | None, status: UsageStatus, settlement: Settlement
) -> None:
    """The request's hold was settled or released (its usage record written)."""
    record.usage_status = status.value
    record.charged_uc = settlement.charged_uc if settlement.applied else 0
    if usage is not None:
        record.input_tokens = usage.input_tokens
        record.output_tokens = usage.output_tokens
        record.cache_read_tokens = usage.cache_read_input_tokens
        record.cache_write_tokens = usage.cache_creation_input_tokens
        record.web_search_requests = usage.web_search_requests


class AttemptLog:
    """The router's ``AttemptObserver`` for one request: counts each attempt, times it until its
    response head, keeps the last deployment in the record, and opens a client span per attempt
    when tracing is on (its ``traceparent`` goes upstream)."""

    __slots__ = ("_began", "_metrics", "_record", "_span", "_trace")

    def __init__(self, metrics: Metrics, record: RequestRecord, trace: RequestTrace | None) -> None:
        self._metrics = metrics
        self._record = record
        self._trace = trace
        self._began = 0.0
        self._span: Span | None = None

    def attempt_started(
        self, deployment: Deployment, provider: Provider, number: int, reason: AttemptReason
    ) -> Mapping[str, str] | None:
        record = self._record
        record.provider = provider.name
        record.provider_kind = provider.kind
        record.deployment = record.response_model = deployment.upstream_model
        record.attempts = number
        self._metrics.attempt(provider.name, deployment.upstream_model, reason)
        self._began = time.perf_counter()
        if self._trace is None:
            return None
        self._span, headers = self._trace.attempt(
            record, provider.name, genai_provider_name(provider.kind), deployment.upstream_model, number
        )
        return headers

    def attempt_ended(self, error: str | None, status: int | None) -> None:
        record = self._record
        seconds = time.perf_counter() - self._began
        record.upstream_seconds += seconds
        self._metrics.attempt_ended(
            record.provider, record.deployment, error, seconds if status is not None else None
        )
        if self._trace is not None and self._span is not None:
            self._trace.attempt_ended(self._span, error, status)
            self._span = None
