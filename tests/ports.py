"""Loopback ports for the servers tests start, safe with several pytest-xdist workers at once.

A port found by binding port 0 and closing the socket comes from the kernel's ephemeral range,
the range every outgoing connection also takes its source port from: between that pick and the
server's own bind, a client connection (to PostgreSQL, an upstream, another worker's gateway)
may take the port and the server fails to start. So a server's port comes from below the
ephemeral range, each xdist worker from a slice of its own, handed out in turn from a random
start in the slice, and checked free (bindable) as it is handed out. Two workers never hand out
the same port; a port of another program is skipped by the check.

The first port of each slice is never handed out: ``unused_port`` names it, for tests that need
an address where nothing listens.
"""

from __future__ import annotations

import functools
import os
import random
import socket
import threading
from pathlib import Path

#: Below this, ports are left to the system and well-known services.
LOWEST = 10_000
#: The kernel's ephemeral range starts here when it cannot be read.
DEFAULT_EPHEMERAL_START = 32_768


def ephemeral_start() -> int:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_START
    return low if low > LOWEST + 1_000 else DEFAULT_EPHEMERAL_START


def xdist_worker() -> tuple[int, int]:
    """``(index, count)`` of this pytest-xdist worker; ``(0, 1)`` when not under xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(name.removeprefix("gw")) if name.startswith("gw") else 0
    return index, max(count, index + 1)


def is_free(port: int) -> bool:
    """Whether a server could bind ``port`` on loopback now (no SO_REUSEADDR: a port still in
    TIME_WAIT counts as taken, which only skips it)."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class PortSlice:
    """This process's slice of the ports below the ephemeral range."""

    def __init__(self, index: int, count: int, top: int) -> None:
        width = (top - LOWEST) // count
        self.reserved = LOWEST + index * width
        self.first, self.end = self.reserved + 1, self.reserved + width
        self._next = random.randrange(self.first, self.end)
        self._lock = threading.Lock()  # servers start from several threads of one test

    def take(self, span: int = 1) -> int:
        """The first of ``span`` consecutive free ports; none of them is handed out again before
        the slice wraps around."""
        with self._lock:
            for _ in range(self.end - self.first):
                port = self._next
                if port + span > self.end:
                    port = self.first
                self._next = port + span if port + span < self.end else self.first
                if all(is_free(p) for p in range(port, port + span)):
                    return port
        raise RuntimeError(f"no {span} free loopback port(s) in {self.first}..{self.end - 1}")


@functools.cache
def _slice() -> PortSlice:
    # One per process, made on first use (after xdist has set the worker's environment).
    index, count = xdist_worker()
    return PortSlice(index, count, ephemeral_start())


def free_port(span: int = 1) -> int:
    """A loopback port no other worker of this run hands out, free right now; with ``span``, the
    first of that many consecutive ones (a server that takes ``port + i`` for its i-th worker)."""
    return _slice().take(span)


def unused_port() -> int:
    """A loopback port where nothing listens (a refused connection): the slice's reserved port,
    never handed out to a server (if some other program holds it, a port handed out instead)."""
    ports = _slice()
    return ports.reserved if is_free(ports.reserved) else ports.take()
