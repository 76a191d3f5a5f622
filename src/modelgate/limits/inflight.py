"""Protective limiter: a per-instance cap on requests in flight, answered fast without queueing."""

from __future__ import annotations


class InFlightLimiter:
    __slots__ = ("_count", "limit", "refused")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._count = 0
        #: Requests refused because the limit was reached, since start (metrics).
        self.refused = 0

    @property
    def in_flight(self) -> int:
        return self._count

    def try_acquire(self) -> bool:
        if self._count >= self.limit:
            self.refused += 1
            return False
        self._count += 1
        return True

    def release(self) -> None:
        self._count -= 1
