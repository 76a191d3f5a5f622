"""A real gateway on loopback for tests: uvicorn on its own event loop in a background thread.

Tests talk to it over HTTP with the official SDKs (sync or async) and reach its services (store,
management, clock) through ``call`` for setup and inspection. Nothing in the gateway is mocked.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from modelgate.clock import Clock
from modelgate.config import Settings, load_settings
from modelgate.management import IssuedKey, Management
from modelgate.server.app import create_app
from modelgate.server.runner import DrainingServer, uvicorn_config
from modelgate.services import Services
from modelgate.storage.base import Account
from tests.loop_thread import LoopThread
from tests.polling import wait_until
from tests.ports import free_port
from tests.secret_scan import SCANNER

T = TypeVar("T")
__all__ = ["GatewayServer", "ManualClock", "free_port", "make_settings", "running_gateway"]


class ManualClock:
    """A clock tests move by hand (month boundaries, rolling windows): ``advance`` lets time pass
    (both clocks move), ``step`` only sets the wall clock off, as NTP or an operator would."""

    def __init__(self, start: float) -> None:
        self.now = start
        #: How far the wall clock has been stepped away from the time that passed.
        self.wall_step = 0.0
        self._lock = threading.Lock()

    def time(self) -> float:
        return self.now + self.wall_step

    def steady(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds

    def set(self, timestamp: float) -> None:
        self.now = timestamp

    def step(self, seconds: float) -> None:
        with self._lock:
            self.wall_step += seconds


class GatewayServer:
    def __init__(
        self, settings: Settings, clock: Clock | None = None, env: dict[str, str] | None = None
    ) -> None:
        self.settings = settings
        SCANNER.register(settings.secret, settings.metrics.token, *(env or {}).values())
        self.services = Services.build(settings, clock=clock, env=env)
        self.app = create_app(settings, services=self.services)
        self.port = settings.server.port
        self.base_url = f"http://127.0.0.1:{self.port}"
        config = uvicorn_config(settings, self.app, loop="asyncio", log_level="warning")
        self._server = DrainingServer(config, self.app, settings.server.shutdown_grace_seconds)
        self._loop_thread: LoopThread | None = None
        self._serving: concurrent.futures.Future[None] | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The server's event loop (where its store, views and limiters live)."""
        assert self._loop_thread is not None, "the gateway is not started"
        return self._loop_thread.loop

    def start(self) -> GatewayServer:
        self._loop_thread = LoopThread(f"gateway-{self.port}")
        self._serving = self._loop_thread.submit(self._server.serve())
        deadline = time.monotonic() + 20
        while not self._server.started:
            if self._serving.done() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("gateway did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Shut the server down (lifespan shutdown: services stopped) and close its loop; what its
        metrics show at the end is scanned for secrets first (tests/secret_scan.py)."""
        if self._loop_thread is not None and self._server.started:
            exposition = self.call(self.services.telemetry.exposition())
            SCANNER.scan(exposition.decode(), f"metrics of the gateway on port {self.port}")
        self._server.should_exit = True
        try:
            if self._serving is not None:
                self._serving.result(timeout=15)
        finally:
            if self._loop_thread is not None:
                self._loop_thread.close()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run a coroutine on the server's loop (where its store and views live)."""
        assert self._loop_thread is not None, "the gateway is not started"
        return self._loop_thread.call(coro, timeout)

    # setup helpers ----------------------------------------------------------------------------

    @property
    def management(self) -> Management:
        s = self.services
        return Management(
            s.accounts,
            s.key_records,
            s.tokens,
            s.catalogue,
            s.digester,
            s.clock,
            self.settings.keys.default_rpm,
        )

    def account(self, name: str, credits: float = 100) -> Account:
        return self.call(self.management.create_account(name, int(credits * 1_000_000)))

    def key(self, account: Account, group: str, **controls: Any) -> IssuedKey:
        issued = self.call(self.management.create_key(account, group, **controls))
        self.call(self.services.keys.refresh())
        return issued

    def refresh_keys(self) -> None:
        self.call(self.services.keys.refresh())

    def wait_for_key_version(self, key_id: str, version: int) -> None:
        """Block until this instance's key view holds ``key_id`` at ``version`` or later, loaded by
        its own background poll or a broadcast (not by the test). Tests then assert what the first
        request after that refresh sees, never how soon it came."""

        def loaded() -> bool:
            record = self.services.keys.get(key_id)  # a dict read, safe from the test's thread
            return record is not None and record.version >= version

        wait_until(loaded, f"the key view loading {key_id} at version {version}")


def make_settings(data_dir: Path, **overrides: Any) -> Settings:
    # A short shutdown grace: a test that leaves a stream open does not hold its server's stop.
    # A long head timeout: the server counts it from the end of a connection's previous response,
    # while a busy test client (sharing this process) may read that end seconds later and reuse
    # the connection within its own pool expiry; the timeout's own tests set theirs.
    server = {"port": free_port(), "shutdown_grace_seconds": 2, "header_timeout_seconds": 120}
    base: dict[str, Any] = {"server": server, "secret": "test-secret-" + "x" * 40}
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return load_settings(None, environ={}, data_dir=data_dir, **base)


@contextmanager
def running_gateway(
    data_dir: Path, clock: Clock | None = None, env: dict[str, str] | None = None, **overrides: Any
) -> Iterator[GatewayServer]:
    server = GatewayServer(make_settings(data_dir, **overrides), clock=clock, env=env).start()
    try:
        yield server
    finally:
        server.stop()
