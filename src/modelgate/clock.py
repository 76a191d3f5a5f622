"""Time as a dependency, so month boundaries and rolling windows can be tested exactly."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float:
        """Seconds since the epoch (UTC)."""
        ...


class SystemClock:
    def time(self) -> float:
        return time.time()


def month_of(timestamp: float) -> str:
    """The UTC calendar month ``YYYY-MM`` of a timestamp, whatever the process time zone."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m")
