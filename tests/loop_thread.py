"""An asyncio event loop in a daemon thread, for servers that synchronous tests talk to.

Fake upstreams (aiohttp) and the gateway under test (uvicorn) are bound to the loop that starts
them, while the test itself drives them from the main thread with blocking SDK clients. A
``LoopThread`` owns one such loop: ``call`` runs a coroutine on it and waits for the result,
``start`` starts a server on it and remembers to stop it, and ``close`` stops those servers, then
the loop, and closes the loop (its pending tasks cancelled and awaited, async generators and the
default executor shut down, as ``asyncio.run`` does), so no loop, socket or thread outlives it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, Protocol, Self, TypeVar

T = TypeVar("T")


class Service(Protocol):
    """A server with an async start and stop (``FakeUpstream``, ``ReplayUpstream``)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


S = TypeVar("S", bound=Service)

#: How long ``close`` waits for the loop's thread to wind down.
_JOIN_TIMEOUT = 15.0


class LoopThread:
    def __init__(self, name: str = "loop-thread") -> None:
        self.loop = asyncio.new_event_loop()
        self._services: list[Service] = []
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            try:
                _cancel_remaining(loop)
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; the caller waits on the future when it wants to."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run ``coro`` on the loop and return its result (its exception is raised here)."""
        return self.submit(coro).result(timeout)

    def start(self, service: S) -> S:
        """Start ``service`` on the loop; ``close`` stops it (services stop in reverse order)."""
        self.call(service.start())
        self._services.append(service)
        return service

    def close(self) -> None:
        """Idempotent: stop the started services, then the loop; the loop is closed on return."""
        if self._closed:
            return
        self._closed = True
        try:
            while self._services:
                self.call(self._services.pop().stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(_JOIN_TIMEOUT)
            if self._thread.is_alive():
                raise RuntimeError(f"{self._thread.name}: the event loop did not stop")


def _cancel_remaining(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks still pending on a stopped loop and let them finish (``asyncio.run``'s
    own clean-up), so none is destroyed pending."""
    pending = asyncio.all_tasks(loop)
    if not pending:
        return
    for task in pending:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
