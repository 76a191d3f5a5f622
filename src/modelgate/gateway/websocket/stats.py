"""Counts of this instance's Responses sockets since start, exported as Prometheus series
(``modelgate_websocket_*``, docs/operations.md)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from prometheus_client.core import Metric

from modelgate.telemetry.metrics import counter, gauge, labelled_counter

#: Why a socket closed, by the close code the client (or the protocol layer) ended it with.
_CLIENT_CLOSES = {1009: "message_too_big", 1007: "invalid_utf8", 1002: "protocol_error", 1011: "ping_timeout"}
#: Every close reason, exported from the start (at 0) so dashboards see each series.
CLOSE_REASONS = (
    "client",
    *_CLIENT_CLOSES.values(),
    "idle_timeout",
    "lifetime",
    "drain",
    "too_many_pending",
    "binary_message",
    "key_refused",
    "error",
)
#: Statuses an upgrade is refused with.
REFUSAL_STATUSES = ("400", "401", "404", "426", "503")


class WebSocketStats:
    def __init__(self, idle_timeout: float, lifetime: float) -> None:
        self.idle_timeout = idle_timeout
        self.lifetime = lifetime
        self.open = 0
        self.accepted = 0
        #: Upgrades answered with an HTTP error instead of 101, by status.
        self.refused: Counter[str] = Counter(dict.fromkeys(REFUSAL_STATUSES, 0))
        #: Sockets closed, by reason (``idle_timeout``, ``lifetime``, ``drain``, ``client`` …).
        self.closed: Counter[str] = Counter(dict.fromkeys(CLOSE_REASONS, 0))
        #: Messages received from clients.
        self.messages = 0

    def opened(self) -> None:
        self.open += 1
        self.accepted += 1

    def closed_by_client(self, code: int) -> None:
        self.open -= 1
        self.closed[_CLIENT_CLOSES.get(code, "client")] += 1

    def closed_by_server(self, reason: str) -> None:
        self.open -= 1
        self.closed[reason] += 1

    def collect(self) -> Iterable[Metric]:
        yield gauge("modelgate_websocket_connections_open", "Responses WebSockets open now.", self.open)
        yield counter(
            "modelgate_websocket_connections_accepted",
            "Responses WebSocket upgrades accepted.",
            self.accepted,
        )
        yield labelled_counter(
            "modelgate_websocket_upgrades_refused",
            "Responses WebSocket upgrades answered with an HTTP error, by status.",
            ("status",),
            {(status,): count for status, count in self.refused.items()},
        )
        yield labelled_counter(
            "modelgate_websocket_connections_closed",
            "Responses WebSockets closed, by reason.",
            ("reason",),
            {(reason,): count for reason, count in self.closed.items()},
        )
        yield gauge(
            "modelgate_websocket_idle_timeout_seconds",
            "responses.websocket_idle_timeout_seconds of this instance.",
            self.idle_timeout,
        )
        yield gauge(
            "modelgate_websocket_max_connection_seconds",
            "responses.websocket_max_connection_seconds of this instance.",
            self.lifetime,
        )
        yield counter(
            "modelgate_websocket_messages_received",
            "Messages received on Responses WebSockets.",
            self.messages,
        )
