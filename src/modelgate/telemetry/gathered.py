"""Work done after a request, gathered and done together: made one by one between requests it
costs several times what it costs in one loop (the caches are cold between two requests)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Gathered(Generic[T]):
    """Items handed to ``handle`` together: at most ``most`` wait, for at most ``seconds`` after
    the first; ``flush`` hands over what waits at once. Without a running loop each item is
    handed over as it comes (nothing to batch with)."""

    def __init__(self, handle: Callable[[list[T]], None], most: int, seconds: float) -> None:
        self._handle = handle
        self._most = most
        self._seconds = seconds
        self._items: list[T] = []
        self._timer: asyncio.TimerHandle | None = None

    def add(self, item: T) -> None:
        self._items.append(item)
        if len(self._items) >= self._most:
            self.flush()
        elif self._timer is None:
            try:
                self._timer = asyncio.get_running_loop().call_later(self._seconds, self.flush)
            except RuntimeError:  # no loop: nothing to batch with
                self.flush()

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        items, self._items = self._items, []
        if items:
            self._handle(items)
