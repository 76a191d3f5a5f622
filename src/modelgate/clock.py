"""Time as a dependency, so month boundaries and rolling windows can be tested exactly."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from functools import lru_cache
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float:
        """Seconds since the epoch (UTC)."""
        ...


class SystemClock:
    def time(self) -> float:
        return time.time()


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
