"""Observability: Prometheus metrics, structured logs and OpenTelemetry traces (docs/operations.md)."""

from modelgate.telemetry.hub import Telemetry
from modelgate.telemetry.record import OUTCOMES, RequestRecord

__all__ = ["OUTCOMES", "RequestRecord", "Telemetry"]
