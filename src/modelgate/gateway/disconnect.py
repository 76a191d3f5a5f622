"""Ending a request's upstream work early: when its client went away, or when the gateway's
shutdown grace is over."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine
from typing import TypeVar

from starlette.types import Receive

from modelgate.lifecycle import Drain, nothing

T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected while the gateway waited on the upstream."""


class ShuttingDown(Exception):
    """The shutdown grace ended while the gateway waited on the upstream (``lifecycle.Drain``)."""


class DisconnectWatch:
    """Aborts the upstream work of a request whose client has gone away.

    A listener task waits for ``http.disconnect`` (after the body has been read, uvicorn answers
    ``receive`` with nothing else). While the watch is *armed*, i.e. while the request waits on the
    upstream, a disconnect cancels the request's own task, which aborts the upstream call at once;
    outside armed sections (ledger operations) it is only noted, so money is never left
    half-written by a cancellation. The listener starts once an armed wait has lasted
    ``LISTEN_AFTER`` seconds: a request answered sooner never pays for a task, and one that waits
    longer (any real model call) is watched from then on.

    The end of the shutdown grace (``Drain.cut_now``) cancels an armed wait the same way, raising
    ``ShuttingDown`` instead of ``ClientGone``.
    """

    __slots__ = ("_armed", "_listener", "_receive", "_task", "_timer", "_unsubscribe", "cut", "gone")

    #: Seconds an armed wait lasts before the listener starts (the most a disconnect goes unseen).
    LISTEN_AFTER = 0.05

    def __init__(self, receive: Receive, drain: Drain) -> None:
        self._receive = receive
        self._task = asyncio.current_task()
        self._armed = False
        self.gone = False
        self.cut = False
        self._listener: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._unsubscribe = drain.subscribe(self._on_cut)

    def _on_cut(self) -> None:
        self.cut = True
        if self._armed and self._task is not None:
            self._task.cancel()

    def _start_listening(self) -> None:
        self._timer = None
        if self._listener is None:
            self._listener = asyncio.ensure_future(self._listen())

    async def _listen(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        self.gone = True
        if self._armed and self._task is not None:
            self._task.cancel()

    async def run(self, work: Awaitable[T]) -> T:
        if self.gone or self.cut:
            if isinstance(work, Coroutine):
                work.close()  # never started: close it, so it is not reported as never awaited
            raise ClientGone if self.gone else ShuttingDown
        self._armed = True
        if self._listener is None and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.LISTEN_AFTER, self._start_listening)
        try:
            return await work
        except asyncio.CancelledError:
            if (self.gone or self.cut) and self._task is not None:
                self._task.uncancel()  # our own cancellation, turned into ClientGone/ShuttingDown
                raise (ClientGone if self.gone else ShuttingDown)() from None
            raise
        finally:
            self._armed = False

    def close(self) -> None:
        self._unsubscribe()
        # The unsubscribe holds ``_on_cut``, which holds this watch: dropped, the watch and what it
        # holds (the request's receive, its task, the server's request cycle) are freed as soon as
        # the request ends, instead of waiting as a cycle for the garbage collector.
        self._unsubscribe = nothing
        if self._timer is not None:
            self._timer.cancel()
        if self._listener is not None:
            self._listener.cancel()
