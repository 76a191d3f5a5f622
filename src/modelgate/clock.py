"""Time as a dependency, so month boundaries and rolling windows can be tested exactly.

Two kinds of time, for two purposes:

- ``time()``, the wall clock: what the calendar says. Months and days of caps and usage (UTC
  calendar months, ``month_of``), timestamps written to the database and shown to people. It may
  step back or forward (NTP correcting a drifted clock, an operator, a VM restored).
- ``steady()``: seconds that never jump. Rate-limit windows and the ages of holds use it, so a
  wall-clock step can neither lock a key (a window stamped two hours ahead) nor make a live
  request's hold look abandoned. It is the wall time when the clock was made, advanced by the
  monotonic clock: processes and instances agree on it as closely as their wall clocks agreed when
  each started (what crosses processes tolerates a disagreement: ``limits.rpm``), and a step of
  the wall clock after that moves ``time()`` only.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from functools import lru_cache
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float:
        """Seconds since the epoch (UTC): the wall clock, which may step."""
        ...

    def steady(self) -> float:
        """Seconds since the epoch as of the clock's making, advanced monotonically: never steps."""
        ...


class SystemClock:
    __slots__ = ("_offset",)

    def __init__(self) -> None:
        #: Wall time minus monotonic time when the clock was made.
        self._offset = time.time() - time.monotonic()

    def time(self) -> float:
        return time.time()

    def steady(self) -> float:
        return self._offset + time.monotonic()


@lru_cache(maxsize=64)
def _month_bounds(year: int, month: int) -> tuple[float, float, str]:
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    return start.timestamp(), end.timestamp(), f"{year:04d}-{month:02d}"


class _MonthCache:
    """The last month seen: the hot path asks for the same month thousands of times a second."""

    __slots__ = ("bounds",)

    def __init__(self) -> None:
        self.bounds = (0.0, 0.0, "")


_last_month = _MonthCache()


def month_of(timestamp: float) -> str:
    """The UTC calendar month ``YYYY-MM`` of a timestamp, whatever the process time zone.

    Months are half-open intervals ``[first instant, first instant of the next month)``.
    """
    start, end, name = _last_month.bounds
    if start <= timestamp < end:
        return name
    moment = datetime.fromtimestamp(timestamp, UTC)
    _last_month.bounds = bounds = _month_bounds(moment.year, moment.month)
    return bounds[2]
