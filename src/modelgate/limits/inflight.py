"""Protective limiter: a per-instance cap on requests in flight, answered fast without queueing."""

from __future__ import annotations

from typing import Protocol


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


class Counters(Protocol):
    """One integer per worker in memory shared by the processes (a ``multiprocessing.RawArray``)."""

    def __getitem__(self, index: int, /) -> int: ...
    def __setitem__(self, index: int, value: int, /) -> None: ...
    def __len__(self) -> int: ...


class SharedInFlight(InFlightLimiter):
    """The instance's cap when several worker processes serve (``server.workers``).

    Each worker counts its own requests in its own slot (no other process writes it, so no lock
    and nothing to repair when a worker dies: the supervisor zeroes a dead worker's slot). A
    request is admitted when the sum of all slots, its own increment included, is within the
    limit; otherwise the increment is taken back. Workers incrementing at the very same instant
    may miss each other's increment (nothing orders memory across processes without a lock), so
    in such a race the cap can be passed by at most ``workers - 1``; it is never passed otherwise.
    """

    __slots__ = ("_index", "_slots")

    def __init__(self, limit: int, slots: Counters, index: int) -> None:
        super().__init__(limit)
        self._slots = slots
        self._index = index
        slots[index] = 0

    @property
    def in_flight(self) -> int:
        """Requests in flight in every worker of the instance."""
        slots = self._slots
        return sum(slots[i] for i in range(len(slots)))

    def try_acquire(self) -> bool:
        slots, index = self._slots, self._index
        slots[index] += 1
        if self.in_flight > self.limit:
            slots[index] -= 1
            return False
        self._count += 1
        return True

    def release(self) -> None:
        self._count -= 1
        self._slots[self._index] -= 1
