"""Counters of the refusals made at the connection level (``server.protocol``), since start."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(slots=True)
class EdgeStats:
    #: Connections answered 503 because ``server.max_connections`` were open.
    connections_refused: int = 0
    #: Connections closed with a 408 because a request's head did not arrive in time.
    head_timeouts: int = 0
    #: Requests answered 408 because their body did not arrive in time.
    body_timeouts: int = 0
    #: Requests whose HTTP framing could not be parsed (400).
    malformed_requests: int = 0
    #: The connection cap in force: ``server.max_connections``, or lower to fit the open-file
    #: limit (``server.file_limit``).
    connection_cap: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
