"""``modelgate serve --workers N`` as a real process tree for tests (``tests.hardening.process``
with workers): which worker answered, killing one, and a shared clock when a test moves time."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.hardening.process import GatewayProcess
from tests.workers.clock import FileClock


class WorkersGateway(GatewayProcess):
    def __init__(
        self, root: Path, extra: str = "", *, workers: int = 2, clocked: bool = False, **sections: Any
    ) -> None:
        server = {"workers": workers, **sections.pop("server", {})}
        super().__init__(root, extra, server=server, **sections)
        self.workers = workers
        #: With ``clocked``, every worker reads the time from this clock (tests move it).
        self.clock: FileClock | None = None
        if clocked:
            self.clock = FileClock(root / "clock")
            self.clock.set(time.time())

    def command(self) -> list[str]:
        if self.clock is None:
            return super().command()
        args = [str(self.config), str(self.data_dir), str(self.clock.path)]
        return [sys.executable, "-m", "tests.workers.serve_with_clock", *args]

    def __enter__(self) -> WorkersGateway:
        return self

    def start(self) -> WorkersGateway:
        super().start()
        self.wait_for_workers()
        return self

    def who(self) -> dict[str, int]:
        """The worker that answers a new connection: its index and pid."""
        with httpx.Client(base_url=self.base_url, timeout=10) as client:
            body = client.get("/health").json()
        return dict(body["worker"])

    def wait_for_workers(self, timeout: float = 60) -> dict[int, int]:
        """Index -> pid of every worker, once each has answered (new connections reach any)."""
        seen: dict[int, int] = {}
        deadline = time.monotonic() + timeout
        while len(seen) < self.workers:
            if time.monotonic() > deadline:
                raise RuntimeError(f"workers seen: {seen}; log: {self.log.read_text()[-3000:]}")
            try:
                worker = self.who()
            except httpx.TransportError:
                time.sleep(0.05)
                continue
            seen[worker["index"]] = worker["pid"]
        return seen

    def kill_worker(self, pid: int) -> None:
        os.kill(pid, signal.SIGKILL)

    def on_each_worker(self, request: Any, timeout: float = 30) -> dict[int, Any]:
        """``request(client)`` answered by every worker: each round opens a new connection, asks
        which worker it reached, then sends ``request`` on that same connection."""
        answers: dict[int, Any] = {}
        deadline = time.monotonic() + timeout
        while len(answers) < self.workers:
            assert time.monotonic() < deadline, f"only workers {sorted(answers)} answered"
            with httpx.Client(base_url=self.base_url, timeout=10) as client:
                index = client.get("/health").json()["worker"]["index"]
                if index not in answers:
                    answers[index] = request(client)
        return answers


async def pinned_clients(gateway: WorkersGateway, per_worker: int) -> list[tuple[int, httpx.AsyncClient]]:
    """``per_worker`` clients on each worker: each holds one keep-alive connection, opened until
    every worker has its share (the kernel picks the worker of a new connection). The gateway
    should keep idle connections longer than the test pauses (``server.keep_alive_seconds``)."""
    pinned: list[tuple[int, httpx.AsyncClient]] = []
    counts = dict.fromkeys(range(gateway.workers), 0)
    # Bounds a hang only: on a busy machine (two test workers beside other load) opening many
    # connections until the kernel spread them over every worker can take a while.
    deadline = time.monotonic() + 120
    while min(counts.values()) < per_worker:
        assert time.monotonic() < deadline, f"connections per worker: {counts}"
        client = httpx.AsyncClient(
            base_url=gateway.base_url, limits=httpx.Limits(max_connections=1), timeout=30
        )
        index = (await client.get("/health")).json()["worker"]["index"]
        if counts[index] < per_worker:
            counts[index] += 1
            pinned.append((index, client))
        else:
            await client.aclose()
    return pinned
