"""Applying the stored entries in every serving process, within a second of a change.

Each process polls the store's generation (one single-row read every
``admin.upstreams_refresh_seconds``, default 0.25 s); a new generation, or a scheduled price
whose time came, makes it read the entries and rebuild (``RoutingBuilder``) in a worker thread.
The new catalogue and router are swapped in at once: requests that start afterwards route with
them, requests in flight finish with the router they started with, which is closed (its
providers that the new one does not share) once its last exchange ended. The process that made
a change applies it before answering, so its own next request already routes with it.

Entries that cannot be applied (a file reloaded without a provider a stored deployment names,
credentials sealed under another secret) change nothing: the running routing stays, and the
error is logged once per generation. The admin API validates a change before storing it, so
this happens only when the file changed under stored entries.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from collections.abc import Mapping
from typing import Protocol

from modelgate.catalogue import Catalogue
from modelgate.clock import Clock
from modelgate.config import ConfigError, Settings
from modelgate.lifecycle import Drain
from modelgate.liveconfig.overlay import Overlay, effective_settings, overlay_from_snapshot
from modelgate.liveconfig.routing import RoutingBuilder, check_routing
from modelgate.liveconfig.sealing import Sealer
from modelgate.periodic import cancel_and_wait
from modelgate.storage.base import StorageError
from modelgate.storage.upstream_entries import UpstreamSnapshot, UpstreamStore
from modelgate.telemetry.logs import scrub_also
from modelgate.upstream.router import Router

log = logging.getLogger("modelgate.upstreams")


class RoutingHost(Protocol):
    """What is swapped (``Services``): the file's settings, the served catalogue and router."""

    settings: Settings
    catalogue: Catalogue
    router: Router
    drain: Drain
    clock: Clock


class LiveRouting:
    def __init__(
        self,
        host: RoutingHost,
        store: UpstreamStore,
        sealer: Sealer,
        builder: RoutingBuilder,
        *,
        interval: float,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._host = host
        self.store = store
        self.sealer = sealer
        self._builder = builder
        self._interval = interval
        self._env = os.environ if env is None else env
        self._lock = asyncio.Lock()
        self._overlay = Overlay()
        self._next_price = math.inf
        #: The generation last tried and refused (not retried until another change).
        self._refused: int | None = None
        self._store_down = False
        self._task: asyncio.Task[None] | None = None
        self._retired: dict[Router, asyncio.Task[None]] = {}
        #: Why the stored entries are not applied (None: they are).
        self.problem: str | None = None

    @property
    def overlay(self) -> Overlay:
        """The stored entries the running routing was built with."""
        return self._overlay

    @property
    def generation(self) -> int:
        return self._overlay.generation

    def env(self, overlay: Overlay) -> dict[str, str]:
        return overlay.env(self._env)

    def open(self, snapshot: UpstreamSnapshot) -> Overlay:
        overlay = overlay_from_snapshot(snapshot, self.sealer.open, log.error)
        scrub_also(overlay.secrets.values())  # before anything could log them
        return overlay

    # checking a change -----------------------------------------------------------------------

    def _check(self, file: Settings, overlay: Overlay, now: float) -> None:
        env = self.env(overlay)
        # Now, and at every scheduled price's time: a scheduled price must not break later.
        for moment in (now, *sorted({c.effective_from for cs in overlay.prices.values() for c in cs})):
            check_routing(effective_settings(file, overlay, max(now, moment)), env)

    async def check(self, overlay: Overlay) -> None:
        """ConfigError (naming the key) when ``overlay`` over the running file cannot serve."""
        host = self._host
        await asyncio.to_thread(self._check, host.settings, overlay, host.clock.time())

    # applying ----------------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            await self.refresh(force=True)
        except ConfigError as exc:
            log.error("stored upstream entries not applied; serving the configuration file's: %s", exc)
        self._task = asyncio.create_task(self._poll(), name="modelgate-upstreams")

    async def refresh(self, *, force: bool = False) -> bool:
        """Apply the stored entries if they changed (or a scheduled price's time came); True
        when something was applied. ConfigError when they cannot be (nothing changed)."""
        generation = await self.store.generation()
        now = self._host.clock.time()
        changed = generation != self._overlay.generation and generation != self._refused
        if not (force or changed or now >= self._next_price):
            return False
        snapshot = await self.store.snapshot()
        overlay = self.open(snapshot)
        try:
            await self._apply(overlay, None)
        except ConfigError as exc:
            self._refused = snapshot.generation
            self._next_price = math.inf
            self.problem = str(exc)
            raise
        return True

    async def rebuild(self, file: Settings) -> None:
        """A SIGHUP reload: the new file with the running stored entries (ConfigError: unusable,
        nothing changed)."""
        await self._apply(self._overlay, file)

    async def _apply(self, overlay: Overlay, file: Settings | None) -> None:
        host = self._host
        async with self._lock:
            if file is None and overlay.generation < self._overlay.generation:
                return  # read before a newer change this process already applied
            settings = file if file is not None else host.settings
            now = host.clock.time()
            effective = effective_settings(settings, overlay, now)
            catalogue, router, prints = await asyncio.to_thread(
                self._builder.build, effective, self.env(overlay)
            )
            if host.drain.active:  # stopping meanwhile: what was built is not used
                await self._builder.discard(router)
                return
            old = host.router
            host.settings = settings
            host.catalogue, host.router = catalogue, router
            self._builder.installed(router, prints, old)
            self._retire(old)
            self._overlay = overlay
            self._next_price = overlay.next_price_change(now)
            self._refused = None
            self.problem = None

    def installed_at_start(self, router: Router, prints: Mapping[str, str]) -> None:
        self._builder.installed(router, prints, None)

    def _retire(self, router: Router) -> None:
        """Close ``router``'s own providers once no exchange uses it: every upstream call and
        count holds it (``Router.acquire``) from its start to the exchange's end."""

        async def close_when_unused() -> None:
            try:
                await router.unused()
            finally:
                del self._retired[router]
                await self._builder.retired(router)

        self._retired[router] = asyncio.get_running_loop().create_task(close_when_unused())

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.refresh()
                if self._store_down:
                    log.warning("stored upstream entries readable again")
                    self._store_down = False
            except ConfigError as exc:
                log.error("stored upstream entries not applied; still serving the running routing: %s", exc)
            except StorageError as exc:
                if not self._store_down:
                    log.warning("stored upstream entries unreadable (%s); serving the running routing", exc)
                    self._store_down = True
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("applying stored upstream entries failed; still serving the running routing")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        waiting = list(self._retired.values())
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
