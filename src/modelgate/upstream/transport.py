"""HTTP transport for upstream providers: one connection pool per provider.

Each provider gets one ``HttpClient`` whose pool holds at most ``max_concurrency`` connections
busy at once (its per-provider concurrency cap): requests beyond it wait for a pooled connection,
bounded by the connect timeout. Connections are kept alive for ``KEEPALIVE_SECONDS`` between
requests. The exchange itself is ``http1.Connection`` and ``http1.Http1Reply``.

(aiohttp's client did this job until its per-request machinery, about a third of a request's CPU
in the gateway, was measured against this one: see docs/bench.md.)

All deadlines use the event loop's monotonic clock. ``total`` is measured from the moment
``post`` is called, and bounds pool wait, header wait, body reads and every idle gap; the
first-byte clock starts once a connection is held, so requests queued for a pooled connection do
not time out early.
"""

from __future__ import annotations

import asyncio
import errno
import re
import ssl
from collections import deque
from collections.abc import Mapping
from typing import NamedTuple

import yarl

from modelgate import errors
from modelgate.upstream.base import ConnectFailed, ConnectionCounts, ConnectTimeout, FirstByteTimeout
from modelgate.upstream.http1 import Connection, Http1Reply
from modelgate.upstream.kind import TimeoutConfig

#: The reply type providers get (``UpstreamReply``).
HttpReply = Http1Reply

#: Seconds an idle pooled connection is kept.
KEEPALIVE_SECONDS = 30.0
#: Bodies larger than this go out in slices of this size, each written when the connection has
#: taken the last (flow control): never a copy of a whole 30 MiB body into the transport's
#: buffer on the loop.
BODY_SLICE_BYTES = 1 << 20
#: Parsed request targets kept per client (a provider posts to a handful of URLs).
_TARGETS_KEPT = 256
#: A header name or value that would split the request head.
_LINE_BREAK = re.compile(r"[\r\n\x00]")
#: Headers the client writes itself (a configured ``host`` is honoured).
_OURS = frozenset({"content-length", "host"})


class Origin(NamedTuple):
    tls: bool
    host: str
    port: int


class _Target(NamedTuple):
    origin: Origin
    #: The Host header and the request line's start (``POST /path?query HTTP/1.1``).
    host: str
    line: str


def _target_of(url: str | yarl.URL) -> _Target:
    parsed = url if isinstance(url, yarl.URL) else yarl.URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.raw_host:
        raise ValueError(f"not an http(s) URL: {parsed.scheme}://…")
    tls = parsed.scheme == "https"
    port = parsed.port or (443 if tls else 80)
    host = parsed.raw_host
    host_header = f"[{host}]" if ":" in host else host  # an IPv6 literal in brackets
    if not parsed.is_default_port():
        host_header = f"{host_header}:{port}"
    return _Target(Origin(tls, host, port), host_header, f"POST {parsed.raw_path_qs or '/'} HTTP/1.1\r\n")


def _head(target: _Target, headers: Mapping[str, str], length: int) -> bytes:
    if _LINE_BREAK.search("".join(headers) + "".join(headers.values())):
        raise ValueError("an upstream request header holds a line break")
    text = "".join(f"{name}: {value}\r\n" for name, value in headers.items() if name not in _OURS)
    host = headers.get("host", target.host)
    return f"{target.line}host: {host}\r\n{text}content-length: {length}\r\n\r\n".encode()


class _Pool:
    """Connections of one client, idle ones per origin, at most ``limit`` held (0: no limit)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        self._loop = loop
        self._limit = limit
        self._held = 0
        self._idle: dict[Origin, list[Connection]] = {}
        self._origin_of: dict[Connection, Origin] = {}
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._sweep: asyncio.TimerHandle | None = None

    def counts(self) -> ConnectionCounts:
        waiting = sum(1 for waiter in self._waiters if not waiter.done())
        return ConnectionCounts(self._held, sum(map(len, self._idle.values())), waiting)

    def full(self) -> bool:
        return 0 < self._limit <= self._held

    def take(self, origin: Origin) -> Connection | None:
        """A kept-alive connection to ``origin``, held; None when there is none or no room."""
        if self.full():
            return None
        idle = self._idle.get(origin)
        if not idle:
            return None
        now = self._loop.time()
        while idle:
            connection = idle.pop()
            if connection.usable and now - connection.idle_since < KEEPALIVE_SECONDS:
                connection.held = True
                self._held += 1
                return connection
            connection.close()
        return None

    async def room(self) -> None:
        """Until fewer than ``limit`` connections are held."""
        while self.full():
            waiter = self._loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # pass the room on
                raise

    def hold(self, connection: Connection, origin: Origin) -> None:
        connection.held = True
        self._held += 1
        self._origin_of[connection] = origin

    def release(self, connection: Connection) -> None:
        """A held connection's message is complete and it stays open: keep it for the next."""
        self._unhold(connection)
        origin = self._origin_of.get(connection)
        if origin is None:  # the pool was closed meanwhile
            connection.close()
            return
        connection.idle_since = self._loop.time()
        self._idle.setdefault(origin, []).append(connection)
        if self._sweep is None:
            self._sweep = self._loop.call_later(KEEPALIVE_SECONDS, self._close_stale)

    def lost(self, connection: Connection) -> None:
        self._unhold(connection)
        origin = self._origin_of.pop(connection, None)
        idle = self._idle.get(origin) if origin is not None else None
        if idle and connection in idle:
            idle.remove(connection)

    def unreserve(self) -> None:
        """A connection counted by ``reserve`` was never made."""
        self._held -= 1
        self._wake()

    def reserve(self) -> None:
        self._held += 1

    def _unhold(self, connection: Connection) -> None:
        if connection.held:
            connection.held = False
            self._held -= 1
            self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _close_stale(self) -> None:
        self._sweep = None
        now = self._loop.time()
        for idle in self._idle.values():
            for connection in [c for c in idle if now - c.idle_since >= KEEPALIVE_SECONDS]:
                idle.remove(connection)
                connection.close()
        if any(self._idle.values()):
            self._sweep = self._loop.call_later(KEEPALIVE_SECONDS, self._close_stale)

    def close(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        connections = list(self._origin_of)
        self._origin_of.clear()
        self._idle.clear()
        for connection in connections:
            connection.close()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(errors.UpstreamFailed("the upstream client was closed"))
        self._waiters.clear()


class HttpClient:
    """One provider's connection pool. Created by the provider, closed by ``aclose``."""

    def __init__(self, *, label: str, timeouts: TimeoutConfig, max_concurrency: int) -> None:
        self._label = label
        self._timeouts = timeouts
        self._max_concurrency = max_concurrency
        self._targets: dict[str | yarl.URL, _Target] = {}
        # Created on first use, inside the running event loop.
        self._pool: _Pool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tls: ssl.SSLContext | None = None

    def _target(self, url: str | yarl.URL) -> _Target:
        target = self._targets.get(url)
        if target is None:
            if len(self._targets) >= _TARGETS_KEPT:
                self._targets.clear()
            target = self._targets[url] = _target_of(url)
        return target

    async def _connect(self, loop: asyncio.AbstractEventLoop, pool: _Pool, origin: Origin) -> Connection:
        """A new connection (or a pooled one freed while waiting for room), held; within the
        connect timeout."""
        timeouts = self._timeouts
        try:
            async with asyncio.timeout(timeouts.connect):
                await pool.room()
                connection = pool.take(origin)
                if connection is not None:
                    return connection
                pool.reserve()
                try:
                    tls = None
                    if origin.tls:
                        if self._tls is None:
                            self._tls = ssl.create_default_context()
                        tls = self._tls
                    _, connection = await loop.create_connection(
                        lambda: Connection(pool.release, pool.lost),
                        origin.host,
                        origin.port,
                        ssl=tls,
                        server_hostname=origin.host if tls else None,
                    )
                finally:
                    pool.unreserve()
        except TimeoutError:
            raise ConnectTimeout(
                f"upstream {self._label}: no connection within {timeouts.connect:g}s"
            ) from None
        except ssl.SSLError as exc:
            raise ConnectFailed(f"upstream {self._label}: cannot connect ({type(exc).__name__})") from None
        except OSError as exc:
            # str(exc) and strerror name host and port; keep only the errno name.
            reason = errno.errorcode.get(exc.errno or 0) or type(exc).__name__
            raise ConnectFailed(f"upstream {self._label}: cannot connect ({reason})") from None
        if connection.transport is None or connection.transport.is_closing():
            raise errors.UpstreamFailed(f"upstream {self._label}: connection failed before a response")
        pool.hold(connection, origin)
        return connection

    async def _send_slices(self, connection: Connection, body: bytes, until: float) -> None:
        """A large body in slices, each written once the connection took the last."""
        assert connection.transport is not None
        view = memoryview(body)
        connection.sending = True
        try:
            async with asyncio.timeout_at(until):
                for start in range(0, len(view), BODY_SLICE_BYTES):
                    await connection.drain()
                    connection.transport.write(view[start : start + BODY_SLICE_BYTES])
        finally:
            connection.sending = False

    async def post(self, url: str | yarl.URL, body: bytes, headers: Mapping[str, str]) -> Http1Reply:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
            self._pool = _Pool(loop, self._max_concurrency)
        pool = self._pool
        assert pool is not None
        timeouts = self._timeouts
        deadline = loop.time() + timeouts.total
        target = self._target(url)
        head = _head(target, headers, len(body))
        connection = pool.take(target.origin)
        if connection is None:
            connection = await self._connect(loop, pool, target.origin)
        first_byte = min(loop.time() + timeouts.first_byte, deadline)
        reply = Http1Reply(loop, connection, idle=timeouts.idle, deadline=deadline, label=self._label)
        connection.start(reply)
        transport = connection.transport
        assert transport is not None
        try:
            if len(body) <= BODY_SLICE_BYTES:
                transport.writelines((head, body))
            else:
                transport.write(head)
                await self._send_slices(connection, body, first_byte)
            await reply.wait_head(
                first_byte,
                lambda: FirstByteTimeout(
                    f"upstream {self._label}: no response within {timeouts.first_byte:g}s"
                ),
            )
        except TimeoutError:
            await reply.close()
            raise FirstByteTimeout(
                f"upstream {self._label}: no response within {timeouts.first_byte:g}s"
            ) from None
        except ConnectionError as exc:
            if reply.status:
                return reply  # the upstream answered (and closed) before taking the whole body
            await reply.close()
            raise errors.UpstreamFailed(
                f"upstream {self._label}: connection failed before a response ({type(exc).__name__})"
            ) from None
        except BaseException:
            await reply.close()
            raise
        return reply

    def connection_counts(self) -> ConnectionCounts:
        return ConnectionCounts(0, 0, 0) if self._pool is None else self._pool.counts()

    async def aclose(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
            self._loop = None
