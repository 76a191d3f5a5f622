"""HTTP transport for upstream providers: one pooled aiohttp session per provider.

aiohttp was chosen over httpx by measurement (bench/http_clients.py: for 50-chunk SSE streams it
served 4-10x the requests/s at 5-10x less client CPU per request). Each provider gets one
long-lived ``ClientSession`` whose ``TCPConnector(limit=max_concurrency)`` is the per-provider
concurrency cap: requests beyond it wait for a pooled connection (bounded by the connect timeout).

All deadlines use the event loop's monotonic clock. ``total`` is measured from the moment
``request`` is called, and bounds header wait, body reads and every idle gap.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import AsyncIterator, Mapping
from contextvars import ContextVar
from typing import Any

import aiohttp
import yarl

from modelgate import errors
from modelgate.upstream.base import (
    ConnectFailed,
    ConnectTimeout,
    FirstByteTimeout,
    IdleTimeout,
    StreamBroken,
)
from modelgate.upstream.kind import TimeoutConfig

#: Read errors that mean the connection broke or the transfer was malformed.
_BROKEN = (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, ConnectionError)


class HttpReply:
    """``UpstreamReply`` over an aiohttp response; see base.UpstreamReply for the contract."""

    __slots__ = (
        "_deadline",
        "_done",
        "_expired",
        "_idle",
        "_label",
        "_read_since",
        "_response",
        "_watchdog",
        "headers",
        "status",
    )

    def __init__(self, response: aiohttp.ClientResponse, *, idle: float, deadline: float, label: str) -> None:
        self._response = response
        self._idle = idle
        self._deadline = deadline
        self._label = label
        # True once the body was read to EOF (connection reusable) or the reply was closed.
        self._done = False
        # Streaming watchdog state: when the pending read began (None between reads), and which
        # timeout fired, if any.
        self._read_since: float | None = None
        self._expired: errors.UpstreamTimeout | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self.status: int = response.status
        self.headers: Mapping[str, str] = {k.lower(): v for k, v in response.headers.items()}

    def _remaining(self) -> float:
        return self._deadline - asyncio.get_running_loop().time()

    async def read(self) -> bytes:
        remaining = self._remaining()
        try:
            async with asyncio.timeout(max(remaining, 0.0)):
                body = await self._response.read()
        except TimeoutError:
            raise errors.UpstreamTimeout(f"upstream {self._label} exceeded its total timeout") from None
        except _BROKEN as exc:
            raise StreamBroken(f"upstream {self._label} connection broke: {type(exc).__name__}") from None
        self._done = True
        return body

    def _check(self) -> None:
        """The streaming watchdog: one timer per stream instead of a timeout per chunk.

        Idle means the upstream sent nothing while we were waiting for it; time the consumer
        spends sending to a slow client does not count. On expiry the response is closed, which
        ends the pending read; ``iter_chunks`` then raises the recorded timeout.
        """
        loop = asyncio.get_running_loop()
        now = loop.time()
        since = self._read_since
        if now >= self._deadline:
            self._expired = errors.UpstreamTimeout(f"upstream {self._label} exceeded its total timeout")
        elif since is not None and now - since >= self._idle:
            self._expired = IdleTimeout(
                f"upstream {self._label} sent nothing for {self._idle:g}s mid-response"
            )
        if self._expired is not None:
            self._response.close()
            return
        wake = (since if since is not None else now) + self._idle
        self._watchdog = loop.call_at(min(wake, self._deadline), self._check)

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        content = self._response.content
        self._read_since = loop.time()
        self._watchdog = loop.call_at(min(self._read_since + self._idle, self._deadline), self._check)
        try:
            while True:
                self._read_since = loop.time()
                try:
                    chunk = await content.readany()
                except _BROKEN as exc:
                    if self._expired is not None:
                        raise self._expired from None
                    raise StreamBroken(
                        f"upstream {self._label} connection broke mid-response: {type(exc).__name__}"
                    ) from None
                self._read_since = None
                if self._expired is not None:
                    raise self._expired
                if not chunk:
                    self._done = True
                    return
                yield chunk
        finally:
            if self._watchdog is not None:
                self._watchdog.cancel()

    async def close(self) -> None:
        if self._done:
            self._response.release()
            return
        self._done = True
        # Closing (not releasing) drops the connection: the upstream sees the disconnect and stops
        # generating, instead of us draining a stream nobody will read.
        self._response.close()


class _FirstByteClock:
    __slots__ = ("_deadline", "_first_byte", "_scope")

    def __init__(self, scope: asyncio.Timeout, first_byte: float, deadline: float) -> None:
        self._scope = scope
        self._first_byte = first_byte
        self._deadline = deadline

    def start(self) -> None:
        now = asyncio.get_running_loop().time()
        self._scope.reschedule(min(now + self._first_byte, self._deadline))


#: The clock of the request being sent in this task; the connector starts it once a connection
#: is held (aiohttp acquires the connection in the caller's task, so the context is shared).
#: Bodies larger than this go out in slices of this size, each written when the connection has
#: taken the last (flow control): never a copy of a whole 30 MiB body into the transport's
#: buffer on the loop.
BODY_SLICE_BYTES = 1 << 20


async def _slices(body: bytes) -> AsyncIterator[memoryview]:
    view = memoryview(body)
    for start in range(0, len(view), BODY_SLICE_BYTES):
        yield view[start : start + BODY_SLICE_BYTES]


def _payload(body: bytes, headers: Mapping[str, str]) -> tuple[Any, dict[str, str]]:
    """What aiohttp is given to send ``body``: the bytes, or for a large body its slices with
    the length declared (so it is not sent chunked)."""
    sent = dict(headers)
    if len(body) <= BODY_SLICE_BYTES:
        return body, sent
    sent["content-length"] = str(len(body))
    return _slices(body), sent


_first_byte_clock: ContextVar[_FirstByteClock | None] = ContextVar("modelgate_first_byte_clock", default=None)


class _ClockedConnector(aiohttp.TCPConnector):
    """Starts the first-byte clock when a pooled or new connection is handed out.

    (aiohttp's trace hooks could do this too, but they build parameter objects for every signal
    of every request, a measurable cost on the hot path.)
    """

    async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:  # noqa: ASYNC109 - aiohttp signature
        connection = await super().connect(req, traces, timeout)
        clock = _first_byte_clock.get()
        if clock is not None:
            clock.start()
        return connection


class HttpClient:
    """One provider's connection pool. Created by the provider, closed by ``aclose``."""

    def __init__(self, *, label: str, timeouts: TimeoutConfig, max_concurrency: int) -> None:
        self._label = label
        self._timeouts = timeouts
        self._max_concurrency = max_concurrency
        # Created on first use: a ClientSession must be created inside the running event loop.
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = _ClockedConnector(
                limit=self._max_concurrency, limit_per_host=0, ttl_dns_cache=300, keepalive_timeout=30
            )
            timeout = aiohttp.ClientTimeout(
                total=None,
                connect=self._timeouts.connect,
                sock_connect=self._timeouts.connect,
                sock_read=None,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=timeout,
                auto_decompress=True,
                raise_for_status=False,
                cookie_jar=aiohttp.DummyCookieJar(),  # upstream cookies are never wanted
            )
        return self._session

    async def post(self, url: str | yarl.URL, body: bytes, headers: Mapping[str, str]) -> HttpReply:
        loop = asyncio.get_running_loop()
        timeouts = self._timeouts
        deadline = loop.time() + timeouts.total
        session = self._get_session()
        try:
            # Until a connection is held only the total deadline applies here (pool wait and
            # connect are bounded by ClientTimeout.connect); once it is held, the first-byte
            # clock starts, so requests queued for a pooled connection do not time out early.
            async with asyncio.timeout_at(deadline) as scope:
                token = _first_byte_clock.set(_FirstByteClock(scope, timeouts.first_byte, deadline))
                data, sent_headers = _payload(body, headers)
                try:
                    response = await session.post(url, data=data, headers=sent_headers, allow_redirects=False)
                finally:
                    _first_byte_clock.reset(token)
        except aiohttp.ConnectionTimeoutError:
            raise ConnectTimeout(
                f"upstream {self._label}: no connection within {timeouts.connect:g}s"
            ) from None
        except aiohttp.ClientConnectorError as exc:
            # str(exc) and strerror name host and port; keep only the errno name.
            os_error = exc.os_error
            reason = errno.errorcode.get(os_error.errno or 0) or type(os_error).__name__
            raise ConnectFailed(f"upstream {self._label}: cannot connect ({reason})") from None
        except TimeoutError:
            raise FirstByteTimeout(
                f"upstream {self._label}: no response within {timeouts.first_byte:g}s"
            ) from None
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise errors.UpstreamFailed(
                f"upstream {self._label}: connection failed before a response ({type(exc).__name__})"
            ) from None
        return HttpReply(response, idle=timeouts.idle, deadline=deadline, label=self._label)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
