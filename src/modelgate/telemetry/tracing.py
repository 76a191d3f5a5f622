"""OpenTelemetry traces (optional: ``pip install 'modelgate[otel]'`` and ``otel.endpoint``).

One server span per model request, with child spans ``authenticate`` (key, body, model, rate
limit), ``reserve``, one client span per upstream attempt and ``settle``. Attributes follow the
OpenTelemetry GenAI semantic conventions (``gen_ai.*``). A client's W3C ``traceparent`` makes the
server span its child, and each upstream attempt sends its own span's ``traceparent`` upstream.

Off by default and free when off: no OpenTelemetry module is imported, ``Tracing`` is never built
and the request path only checks ``exchange.trace is None``. Spans carry ids, model names,
token counts and outcomes, never a key, a prompt or an upstream secret.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from modelgate.telemetry.record import RequestRecord

if TYPE_CHECKING:
    from opentelemetry.trace import Span

#: ``gen_ai.operation.name`` of the endpoints that are no model call; every other is ``chat``.
OPERATIONS: Mapping[str, str] = {"count_tokens": "count_tokens"}


class TracingUnavailable(RuntimeError):
    """``otel.endpoint`` is set but the OpenTelemetry packages are not installed."""


class Tracing:
    """The process's tracer: an OTLP/HTTP exporter behind a batching processor."""

    def __init__(
        self, endpoint: str, *, service_name: str, sample_ratio: float, headers: Mapping[str, str]
    ) -> None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
            from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
        except ImportError as exc:
            raise TracingUnavailable(
                "otel.endpoint is set but OpenTelemetry is not installed: pip install 'modelgate[otel]'"
            ) from exc
        self._provider = TracerProvider(
            resource=Resource.create({"service.name": service_name}),
            sampler=ParentBased(TraceIdRatioBased(sample_ratio)),
        )
        self._provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=_traces_url(endpoint), headers=dict(headers)))
        )
        self.tracer = self._provider.get_tracer("modelgate")
        self.propagator = TraceContextTextMapPropagator()
        self.kinds = SpanKind
        self.error = Status(StatusCode.ERROR)
        self.in_context = set_span_in_context

    def begin(
        self, headers: Mapping[str, str], method: str, path: str, record: RequestRecord
    ) -> RequestTrace:
        return RequestTrace(self, headers, method, path, record)

    def flush(self, timeout_seconds: float = 30.0) -> bool:
        """Export the spans ended so far (blocks the calling thread)."""
        return bool(self._provider.force_flush(int(timeout_seconds * 1000)))

    def shutdown(self) -> None:
        """Export what is buffered and stop the exporter (at the gateway's stop)."""
        self._provider.shutdown()


def _traces_url(endpoint: str) -> str:
    """``otel.endpoint`` is the collector's base URL (``http://host:4318``) or its full traces URL."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else endpoint + "/v1/traces"


class RequestTrace:
    """The spans of one request; the server span ends with ``end``."""

    __slots__ = ("_context", "_genai_provider", "_tracing", "server")

    def __init__(
        self, tracing: Tracing, headers: Mapping[str, str], method: str, path: str, record: RequestRecord
    ) -> None:
        self._tracing = tracing
        parent = tracing.propagator.extract(headers)
        self.server = tracing.tracer.start_span(
            f"{method} {path}",
            context=parent,
            kind=tracing.kinds.SERVER,
            attributes={
                "http.request.method": method,
                "url.path": path,
                "gen_ai.operation.name": OPERATIONS.get(record.endpoint, "chat"),
                "modelgate.request_id": record.request_id,
            },
        )
        self._context = tracing.in_context(self.server)
        #: ``gen_ai.provider.name`` of the latest upstream attempt ("" before the first).
        self._genai_provider = ""

    def child(self, name: str) -> Span:
        return self._tracing.tracer.start_span(name, context=self._context)

    def end_phase(self, span: Span, error: type[BaseException] | None) -> None:
        if error is not None:
            span.set_attribute("error.type", error.__name__)
            span.set_status(self._tracing.error)
        span.end()

    def attempt(
        self, record: RequestRecord, provider: str, genai_provider: str, deployment: str, number: int
    ) -> tuple[Span, dict[str, str]]:
        """A client span for one upstream attempt, and the trace headers to send with it.
        ``genai_provider`` is the provider kind's ``gen_ai.provider.name``."""
        self._genai_provider = genai_provider
        tracing = self._tracing
        operation = OPERATIONS.get(record.endpoint, "chat")
        span = tracing.tracer.start_span(
            f"{operation} {deployment}",
            context=self._context,
            kind=tracing.kinds.CLIENT,
            attributes={
                "gen_ai.operation.name": operation,
                "gen_ai.request.model": deployment,
                "gen_ai.provider.name": genai_provider,
                "modelgate.provider": provider,
                "modelgate.attempt": number,
            },
        )
        headers: dict[str, str] = {}
        tracing.propagator.inject(headers, context=tracing.in_context(span))
        return span, headers

    def attempt_ended(self, span: Span, error: str | None, status: int | None) -> None:
        if status is not None:
            span.set_attribute("http.response.status_code", status)
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(self._tracing.error)
        span.end()

    def end(self, record: RequestRecord) -> None:
        span = self.server
        attributes: dict[str, Any] = {
            "http.response.status_code": record.status,
            "modelgate.outcome": record.outcome,
            "modelgate.stream": record.stream,
            "modelgate.transport": record.transport,
        }
        if record.model:
            attributes["gen_ai.request.model"] = record.model
            attributes["gen_ai.response.model"] = record.response_model or record.model
        if record.key_id:
            attributes["modelgate.key_id"] = record.key_id
        if record.account_id is not None:
            attributes["modelgate.account_id"] = record.account_id
        if self._genai_provider:
            attributes["gen_ai.provider.name"] = self._genai_provider
        if record.attempts:
            attributes["modelgate.upstream_attempts"] = record.attempts
        if record.usage_status is not None:
            attributes["gen_ai.usage.input_tokens"] = record.input_tokens
            attributes["gen_ai.usage.output_tokens"] = record.output_tokens
            attributes["modelgate.charged_microcredits"] = record.charged_uc
        if record.error_type is not None:
            attributes["error.type"] = record.error_code or record.error_type
        if record.status >= 500 or record.outcome in ("upstream_error", "error"):
            span.set_status(self._tracing.error)
        span.set_attributes(attributes)
        span.end()


class NoSpan:
    """What ``Exchange.span`` returns with tracing off: a context manager that does nothing."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


NO_SPAN = NoSpan()


class PhaseSpan:
    """A child span as a context manager: ends when the phase does, marked as an error if the
    phase raised."""

    __slots__ = ("_span", "_trace")

    def __init__(self, trace: RequestTrace, name: str) -> None:
        self._trace = trace
        self._span = trace.child(name)

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self._trace.end_phase(self._span, kind)
