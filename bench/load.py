"""A lean load generator: keep-alive HTTP/1.1 over raw asyncio protocols (uvloop), closed loop.

Requests are prebuilt bytes; responses are parsed only as far as needed (status, content-length
or chunked framing) and watched for a first-token marker, so the client costs little next to the
systems it measures. Each worker owns one connection; ``c`` workers give concurrency ``c``.

Gateway and direct-to-upstream runs are interleaved in short time slices (``interleaved``), so
both see the same machine state and their difference is the gateway's added latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

REQUEST_TIMEOUT = 30.0


class Failed(Exception):
    pass


class _Conn(asyncio.Protocol):
    """One keep-alive connection; ``request`` sends prebuilt bytes and awaits the whole reply."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[None] | None = None
        self.lost = False
        self._reset(b"")

    def _reset(self, marker: bytes) -> None:
        self.marker = marker
        self.status = 0
        self.in_head = True
        self.length = -1  # content-length; -1: chunked; -2: until close
        self.chunk_left = -1  # chunked: bytes of the current chunk (+CRLF) left; -1: reading a size
        self.t_first = 0.0
        self.tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream protocol is always handed a Transport (asyncio types it as the base class).
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.waiter is not None and not self.waiter.done():
            if self.length == -2 and not self.in_head:
                self.waiter.set_result(None)
            else:
                self.waiter.set_exception(Failed("connection closed"))

    def data_received(self, data: bytes) -> None:
        if self.marker and not self.t_first:
            seen = self.tail + data
            if self.marker in seen:
                self.t_first = time.perf_counter()
            self.tail = seen[-len(self.marker) :]
        self.buf += data
        try:
            if self._parse() and self.waiter is not None and not self.waiter.done():
                self.waiter.set_result(None)
        except (ValueError, IndexError) as exc:
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_exception(Failed(f"bad response: {exc}"))

    def _parse(self) -> bool:
        buf = self.buf
        if self.in_head:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return False
            lines = bytes(buf[:end]).split(b"\r\n")
            self.status = int(lines[0].split(b" ", 2)[1])
            self.length = -2
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    self.length = int(value)
                elif name == b"transfer-encoding" and b"chunked" in value.lower():
                    self.length = -1
            del buf[: end + 4]
            self.in_head = False
        if self.length >= 0:
            if len(buf) < self.length:
                return False
            del buf[: self.length]
            return True
        if self.length == -2:
            buf.clear()
            return False
        while True:  # chunked
            if self.chunk_left < 0:
                eol = buf.find(b"\r\n")
                if eol < 0:
                    return False
                size = int(bytes(buf[:eol]).split(b";")[0], 16)
                del buf[: eol + 2]
                if size == 0:
                    self.chunk_left = -3  # the final CRLF (no trailers expected)
                else:
                    self.chunk_left = size + 2
            if self.chunk_left == -3:
                if len(buf) < 2:
                    return False
                del buf[:2]
                return True
            take = min(self.chunk_left, len(buf))
            del buf[:take]
            self.chunk_left -= take
            if self.chunk_left:
                return False
            self.chunk_left = -1

    async def request(self, data: bytes, marker: bytes = b"") -> tuple[int, float]:
        """Send ``data``; return (status, perf_counter of the first ``marker`` or of the end)."""
        assert self.transport is not None
        if self.lost:
            raise Failed("connection closed")
        self._reset(marker)
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        await asyncio.wait_for(self.waiter, REQUEST_TIMEOUT)
        return self.status, self.t_first or time.perf_counter()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def connect(host: str, port: int) -> _Conn:
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(_Conn, host, port)
    return conn


def build_request(host: str, port: int, path: str, headers: dict[str, str], body: bytes) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"host: {host}:{port}", "content-type: application/json"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines.append(f"content-length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


@dataclass
class Load:
    """One kind of request against one server."""

    label: str
    host: str
    port: int
    request: bytes
    marker: bytes = b""  # streamed: the first-token marker
    cpu: Callable[[], int] | None = None  # CPU ns of the server process tree (gateways only)
    core: int | None = None  # the core the server is pinned to, to see who else used it


@dataclass
class Stats:
    latencies: list[float] = field(default_factory=list)  # seconds, request sent -> reply end
    ttfts: list[float] = field(default_factory=list)  # seconds, request sent -> first token
    errors: int = 0
    first_error: str = ""
    busy: float = 0.0  # seconds of slices run
    cpu_ns: int = 0
    core_busy_s: float = 0.0  # the server's core busy time, whoever ran on it

    @property
    def other_share(self) -> float:
        """Share of the server's core used by other processes (a shared machine skews figures)."""
        return max(0.0, self.core_busy_s - self.cpu_ns / 1e9) / self.busy if self.busy else 0.0

    @property
    def completed(self) -> int:
        return len(self.latencies)

    @property
    def rps(self) -> float:
        return self.completed / self.busy if self.busy else 0.0

    @property
    def cpu_share(self) -> float:
        return self.cpu_ns / 1e9 / self.busy if self.busy else 0.0

    @property
    def rps_per_core(self) -> float:
        return self.completed / (self.cpu_ns / 1e9) if self.cpu_ns else 0.0


def core_busy_seconds(core: int) -> float:
    """Non-idle time of one core since boot (/proc/stat, clock ticks)."""
    with open("/proc/stat", "rb") as f:
        for line in f:
            if line.startswith(b"cpu%d " % core):
                fields = [int(x) for x in line.split()[1:]]
                return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
    return 0.0


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Pool:
    def __init__(self, load: Load) -> None:
        self.load = load
        self.conns: list[_Conn] = []

    async def ensure(self, n: int) -> list[_Conn]:
        self.conns = [c for c in self.conns if not c.lost]
        missing = n - len(self.conns)
        if missing > 0:
            self.conns += await asyncio.gather(
                *(connect(self.load.host, self.load.port) for _ in range(missing))
            )
        return self.conns[:n]

    def close(self) -> None:
        for c in self.conns:
            c.close()
        self.conns = []


async def _run_slice(pool: Pool, stats: Stats, concurrency: int, until: float) -> None:
    load = pool.load

    async def worker(conn: _Conn) -> None:
        while time.perf_counter() < until:
            t0 = time.perf_counter()
            try:
                status, t_first = await conn.request(load.request, load.marker)
            except (Failed, OSError, TimeoutError) as exc:
                stats.errors += 1
                stats.first_error = stats.first_error or f"{type(exc).__name__}: {exc}"
                return
            t1 = time.perf_counter()
            if status != 200:
                stats.errors += 1
                stats.first_error = stats.first_error or f"HTTP {status}"
                continue
            stats.latencies.append(t1 - t0)
            if load.marker:
                stats.ttfts.append(t_first - t0)

    conns = await pool.ensure(concurrency)
    await asyncio.gather(*(worker(c) for c in conns))


async def timed_slice(pool: Pool, stats: Stats, concurrency: int, seconds: float) -> None:
    """One slice of ``pool``'s load into ``stats``, with its CPU and core accounting: each slice of
    ``interleaved``, and of callers that choose what runs between slices (bench.datasize_polling)."""
    core = pool.load.core
    cpu0 = pool.load.cpu() if pool.load.cpu else 0
    busy0 = core_busy_seconds(core) if core is not None else 0.0
    t0 = time.perf_counter()
    await _run_slice(pool, stats, concurrency, t0 + seconds)
    stats.busy += time.perf_counter() - t0
    if pool.load.cpu:
        stats.cpu_ns += pool.load.cpu() - cpu0
    if core is not None:
        stats.core_busy_s += core_busy_seconds(core) - busy0


async def interleaved(
    loads: list[Load], concurrency: int, seconds: float, slice_seconds: float = 0.5
) -> list[Stats]:
    """Run each load for ``seconds`` in total, alternating slices; one Stats per load."""
    pools = [Pool(load) for load in loads]
    stats = [Stats() for _ in loads]
    try:
        for pool in pools:  # connect and warm each target before measuring
            await _run_slice(pool, Stats(), concurrency, time.perf_counter() + 0.2)
        rounds = max(1, round(seconds / slice_seconds))
        for _ in range(rounds):
            for pool, st in zip(pools, stats, strict=True):
                await timed_slice(pool, st, concurrency, slice_seconds)
    finally:
        for pool in pools:
            pool.close()
    return stats


@dataclass
class Held:
    opened: int
    first_tokens: list[float]  # seconds after sending, one per stream that got its first token
    errors: int
    rss_before_kib: int
    rss_held_kib: int


async def hold_streams(load: Load, n: int, rss: Callable[[], int], wait: float) -> Held:
    """Open ``n`` streams at once; when all have their first token (or after ``wait``), read RSS."""
    conns: list[_Conn] = []
    for i in range(0, n, 64):
        conns += await asyncio.gather(*(connect(load.host, load.port) for _ in range(min(64, n - i))))
    await asyncio.sleep(0.3)
    rss_before = rss()
    firsts: list[float] = []
    errors = 0
    got_all = asyncio.Event()

    async def one(conn: _Conn) -> None:
        nonlocal errors
        t0 = time.perf_counter()
        task = asyncio.ensure_future(conn.request(load.request, load.marker))
        while not conn.t_first and not task.done():
            await asyncio.sleep(0.005)
        if conn.t_first:
            firsts.append(conn.t_first - t0)
            if len(firsts) == n:
                got_all.set()
        try:
            status, _ = await task
            errors += status != 200
        except (Failed, OSError, TimeoutError):
            errors += 1

    tasks = [asyncio.ensure_future(one(c)) for c in conns]
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(got_all.wait(), wait)
    await asyncio.sleep(0.2)  # let the server settle its allocations for the held streams
    rss_held = rss()
    await asyncio.gather(*tasks)
    for c in conns:
        c.close()
    return Held(n, firsts, errors, rss_before, rss_held)


async def together(loads: list[tuple[Load, int]], seconds: float) -> list[Stats]:
    """Run every load at once for ``seconds`` (each at its own concurrency); one Stats per load."""
    pools = [Pool(load) for load, _ in loads]
    stats = [Stats() for _ in loads]
    until = time.perf_counter() + seconds
    try:
        await asyncio.gather(
            *(_run_slice(pool, st, c, until) for pool, st, (_, c) in zip(pools, stats, loads, strict=True))
        )
    finally:
        for pool in pools:
            pool.close()
    for st in stats:
        st.busy = seconds
    return stats
