"""Waiting in tests for what a background task does (a settlement, a sweep, a key refresh).

``wait_until`` polls a condition until it holds. Its timeout only bounds a hang, and it is
generous on purpose: a slow or busy machine must never fail a test. Tests assert what happened
and in which order, never how fast (CONTRIBUTING.md: speed is measured in ``make bench``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: Bounds every wait for background work: far beyond any refresh, sweep or settlement interval.
POLL_TIMEOUT = 15.0


def wait_until(
    condition: Callable[[], T], what: str, *, timeout: float = POLL_TIMEOUT, interval: float = 0.01
) -> T:
    """The first truthy value of ``condition()``, tried every ``interval`` seconds (longer for a
    condition that sends requests); fails naming ``what`` never happened."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen (waited {timeout:g} s)")
        time.sleep(interval)
