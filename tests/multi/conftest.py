"""Several real gateway instances on loopback sharing one PostgreSQL database and one Redis.

Each instance is a ``GatewayServer`` (uvicorn in its own thread with its own event loop, its own
store pool, limiter and key view); they share the HMAC secret, the database, Redis and one
``ManualClock``, exactly as N machines behind a load balancer share them.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from modelgate.storage.base import Account
from tests.gateway_server import GatewayServer, ManualClock, free_port, running_gateway
from tests.storage.engines import create_database, database_url, drop_database, redis_server_binary, redis_url

NOW = 1_780_000_000.0  # 2026-05-28, well inside a month
HELLO = [{"role": "user", "content": "Hello there gateway"}]


@dataclass
class Cluster:
    servers: list[GatewayServer]
    clock: ManualClock
    database_url: str
    redis_url: str

    def __getitem__(self, index: int) -> GatewayServer:
        return self.servers[index]

    def refresh_keys(self) -> None:
        for server in self.servers:
            server.refresh_keys()

    def account(self, name: str, credits_uc: int) -> Account:
        return self.servers[0].call(self.servers[0].management.create_account(name, credits_uc))

    def key(self, account: Account, group: str = "Basic", **controls: Any) -> tuple[str, str]:
        """(key id, secret) of a new key, known to every instance."""
        issued = self.servers[0].key(account, group, **controls)
        self.refresh_keys()
        return issued.record.id, issued.secret

    def admin_token(self, index: int = 0) -> str:
        """An operator token, made through instance ``index`` (on that instance's own loop)."""
        server = self.servers[index]
        return str(server.call(server.management.create_admin_token(None)))


def chat_body(max_tokens: int = 64) -> dict[str, Any]:
    return {"model": "aria-haiku-4.5", "messages": HELLO, "max_tokens": max_tokens}


async def post_chat(
    client: httpx.AsyncClient, server: GatewayServer, secret: str, max_tokens: int = 64
) -> httpx.Response:
    return await client.post(
        f"{server.base_url}/v1/chat/completions",
        json=chat_body(max_tokens),
        headers={"authorization": f"Bearer {secret}"},
        timeout=30,
    )


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@contextmanager
def cluster_of(tmp_path: Path, redis: str, *, instances: int = 3, **overrides: Any) -> Iterator[Cluster]:
    """``instances`` gateways on one fresh PostgreSQL database and the given Redis."""
    database_url()  # fail (CI) or skip (locally) with a clear message when PostgreSQL is absent
    clock = ManualClock(NOW)

    url = run(create_database("mgmulti"))
    try:
        with ExitStack() as stack:
            # Instances start together: they race for the migrations lock, as a rollout would.
            servers = [
                stack.enter_context(
                    running_gateway(
                        tmp_path / f"instance-{i}",
                        clock=clock,
                        database_url=url,
                        redis_url=redis,
                        **overrides,
                    )
                )
                for i in range(instances)
            ]
            yield Cluster(servers, clock, url, redis)
    finally:
        run(drop_database(url))


@pytest.fixture
def make_cluster(tmp_path: Path) -> Callable[..., Any]:
    """``make_cluster(**settings)`` as a context manager: three instances on the shared Redis.

    The shared Redis is healthy, so its calls get a long timeout: on a loaded machine a call
    slower than the default 1 s would send an instance to its own buckets (the outage behaviour,
    tested with a private Redis in test_redis_outage) and the exact cluster-wide counts asserted
    here would no longer apply."""

    def make(**overrides: Any) -> Any:
        overrides.setdefault("redis_timeout_seconds", 10.0)
        return cluster_of(tmp_path, redis_url(), **overrides)

    return make


class RedisProcess:
    """A private redis-server this test may stop, freeze and restart (the shared one stays up)."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with tcp_connect(self.port):
                    return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    def freeze(self) -> None:
        """SIGSTOP: connections stay open but nothing answers (a hung Redis)."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()  # works on a frozen process too
            self.process.wait(10)
            self.process = None


@contextmanager
def tcp_connect(port: int) -> Iterator[None]:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
        yield


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisProcess]:
    process = RedisProcess(redis_server_binary(), tmp_path / "redis")
    process.start()
    try:
        yield process
    finally:
        process.kill()
