"""Graceful shutdown: the one piece of state the server, the request path and the probes share.

On SIGTERM the server stops accepting connections and calls ``Drain.begin(grace)``. From then on
``/health`` reports ``draining``, ``/readyz`` answers 503, and new model requests get a 503 with
``retry-after`` in their format. Requests already in flight keep running; when the grace ends
(or at once, on a second signal) every subscriber is cut: whole requests answer 503, streams end
with their format's in-band error, and each is settled with the usage status ``shutdown``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class Drain:
    def __init__(self) -> None:
        self._started: float | None = None
        self._cut = False
        self._subscribers: set[Callable[[], None]] = set()
        #: Told once when the drain begins (open WebSockets close after their response in flight).
        self._on_begin: set[Callable[[], None]] = set()
        self._timer: asyncio.TimerHandle | None = None

    @property
    def active(self) -> bool:
        """Shutting down: refuse new work, report not ready."""
        return self._started is not None

    @property
    def cut(self) -> bool:
        """The grace is over: work still in flight is being ended."""
        return self._cut

    def seconds_draining(self) -> float:
        return 0.0 if self._started is None else time.monotonic() - self._started

    def begin(self, grace: float) -> None:
        """Start draining; cut what is still running after ``grace`` seconds (idempotent)."""
        if self._started is not None:
            return
        self._started = time.monotonic()
        self._timer = asyncio.get_running_loop().call_later(grace, self.cut_now)
        for subscriber in list(self._on_begin):
            subscriber()
        self._on_begin.clear()

    def cut_now(self) -> None:
        """End the grace: every subscriber is told once."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._started is None:
            self._started = time.monotonic()
        self._cut = True
        for subscriber in [*self._on_begin, *self._subscribers]:
            subscriber()
        self._subscribers.clear()
        self._on_begin.clear()

    def subscribe(self, on_cut: Callable[[], None]) -> Callable[[], None]:
        """Call ``on_cut`` when the grace ends (at once if it already has); returns the unsubscribe."""
        if self._cut:
            on_cut()
            return nothing
        self._subscribers.add(on_cut)
        return lambda: self._subscribers.discard(on_cut)

    def when_draining(self, on_begin: Callable[[], None]) -> Callable[[], None]:
        """Call ``on_begin`` when the drain begins (at once if it has); returns the unsubscribe."""
        if self._started is not None:
            on_begin()
            return nothing
        self._on_begin.add(on_begin)
        return lambda: self._on_begin.discard(on_begin)


def nothing() -> None:
    """What an unsubscribe of nothing, or a callback already used, does."""
    return None
