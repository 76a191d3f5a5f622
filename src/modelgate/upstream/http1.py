"""One HTTP/1.1 connection to an upstream and the replies read over it, on the loop's own protocol.

The response is parsed by httptools (llhttp, the C parser uvicorn serves with). A connection
carries one exchange at a time: the request is written whole, the reply's head wakes the sender,
and body bytes are handed to the reply as they arrive. The connection goes back to its pool the
moment its message is complete on the wire (the reply keeps the bytes), so a consumer that
stops reading holds no pooled connection; a reply abandoned before its end closes the connection.

Every wait has one timer (``loop.call_at``) instead of a timeout scope: the head's first-byte
deadline, the whole body's total deadline, and for streams the watchdog of idle gaps.
"""

from __future__ import annotations

import asyncio
import zlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import httptools

from modelgate import errors
from modelgate.upstream.base import IdleTimeout, StreamBroken

#: Body bytes held for a slow stream consumer before reading from the upstream pauses.
HIGH_WATER = 256 * 1024
#: ... and resumes once the consumer has taken it below this.
LOW_WATER = 64 * 1024
#: A response head (status line and headers) larger than this is malformed: an upstream that
#: never ends its head cannot grow the gateway's memory.
MAX_HEAD_BYTES = 64 * 1024


def _decoder(encoding: str | None) -> Any:
    """A decompressor for what the gateway asks for (``gzip, deflate``); other codings pass raw."""
    if encoding == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj(zlib.MAX_WBITS)
    return None


class Connection(asyncio.Protocol):
    """The protocol of one pooled connection. ``on_free`` hands it back to its pool (kept alive),
    ``on_lost`` tells the pool it is gone."""

    def __init__(self, on_free: Callable[[Connection], None], on_lost: Callable[[Connection], None]) -> None:
        self._on_free = on_free
        self._on_lost = on_lost
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.reply: Http1Reply | None = None
        self.idle_since = 0.0
        #: Counted in its pool's limit (from taken or connecting until freed or lost).
        self.held = False
        #: A large body is still being written: the connection cannot be reused yet.
        self.sending = False
        self._raw_headers: list[tuple[bytes, bytes]] = []
        self._informational = False
        #: Bytes received since the current message began, until its head is complete.
        self._head_bytes: int | None = None
        self._write_paused = False
        self._drained: asyncio.Future[None] | None = None

    def start(self, reply: Http1Reply) -> None:
        """``reply`` is the exchange whose request is about to be written."""
        self.reply = reply
        self._head_bytes = 0

    @property
    def usable(self) -> bool:
        return self.transport is not None and not self.transport.is_closing() and self.reply is None

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.reply is None:  # bytes nobody asked for: the connection cannot be trusted
            self.close()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._malformed(type(exc).__name__)
            return
        if self._head_bytes is not None:  # the head is not complete yet
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._malformed(f"a head over {MAX_HEAD_BYTES} bytes")

    def _malformed(self, why: str) -> None:
        reply, self.reply = self.reply, None
        self.close()
        if reply is not None:
            reply.broke(f"malformed response ({why})")

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_lost(self)
        if self._drained is not None and not self._drained.done():
            self._drained.set_exception(ConnectionResetError("connection lost while sending"))
        reply, self.reply = self.reply, None
        if reply is not None:
            reply.eof()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    async def drain(self) -> None:
        """Returns once the transport takes more (flow control for large request bodies)."""
        if self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("connection lost while sending")
        if self._write_paused:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained

    # -- httptools callbacks -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.reply is None:  # a second message behind the one asked for: not to be trusted
            self.close()
        self._raw_headers = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self._raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        self._informational = status < 200
        if not self._informational:
            self._head_bytes = None
        if not self._informational and self.reply is not None:
            self.reply.head(status, self._raw_headers, self._parser.should_keep_alive())

    def on_body(self, body: bytes) -> None:
        if self.reply is not None:
            self.reply.body(body)

    def on_message_complete(self) -> None:
        if self._informational:  # 100 Continue and friends: the real head follows
            self._informational = False
            return
        reply, self.reply = self.reply, None
        if reply is None:  # a message nobody asked for (on_message_begin closed the connection)
            self.close()
            return
        reply.complete()
        keep = self._parser.should_keep_alive()
        if keep and not self.sending and self.transport is not None and not self.transport.is_closing():
            self._on_free(self)
        else:
            self.close()


class Http1Reply:
    """``UpstreamReply`` over one exchange of a ``Connection``; see base.UpstreamReply."""

    __slots__ = (
        "_buffered",
        "_chunks",
        "_connection",
        "_deadline",
        "_decoder",
        "_done",
        "_error",
        "_expired",
        "_idle",
        "_label",
        "_loop",
        "_paused",
        "_read_since",
        "_timer",
        "_until_eof",
        "_waiter",
        "_whole",
        "headers",
        "status",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        connection: Connection,
        *,
        idle: float,
        deadline: float,
        label: str,
    ) -> None:
        self._loop = loop
        self._connection: Connection | None = connection
        self._idle = idle
        self._deadline = deadline
        self._label = label
        self.status = 0
        self.headers: Mapping[str, str] = {}
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self._whole = False
        self._decoder: Any = None
        self._until_eof = False
        # True once the whole message arrived (or the reply was closed); _error once it failed.
        self._done = False
        self._error: BaseException | None = None
        self._expired: errors.UpstreamTimeout | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._read_since: float | None = None

    # -- fed by the connection -----------------------------------------------------------------

    def head(self, status: int, raw: list[tuple[bytes, bytes]], keep_alive: bool) -> None:
        headers = {
            name.decode("latin-1").lower(): value.decode("utf-8", "surrogateescape") for name, value in raw
        }
        self.status = status
        self.headers = headers
        self._decoder = _decoder(headers.get("content-encoding"))
        self._until_eof = (
            "content-length" not in headers
            and "chunked" not in headers.get("transfer-encoding", "").lower()
            and status not in (204, 304)
        )
        self._wake()

    def body(self, data: bytes) -> None:
        if self._decoder is not None:
            try:
                data = self._decoder.decompress(data)
            except zlib.error:
                self._abort_connection()
                self._fail(StreamBroken(f"upstream {self._label} sent a body that does not decompress"))
                return
            if not data:
                return
        self._chunks.append(data)
        self._buffered += len(data)
        if not self._whole and not self._paused and self._buffered > HIGH_WATER:
            connection = self._connection
            if connection is not None and connection.transport is not None:
                connection.transport.pause_reading()
                self._paused = True
        self._wake()

    def complete(self) -> None:
        if self._paused:  # the connection goes back to its pool reading again
            self._resume()
        self._connection = None
        if self._decoder is not None:
            try:
                tail = self._decoder.flush()
            except zlib.error:
                self._fail(StreamBroken(f"upstream {self._label} sent a body that does not decompress"))
                return
            if tail:
                self._chunks.append(tail)
                self._buffered += len(tail)
        self._done = True
        self._wake()

    def eof(self) -> None:
        """The connection ended while this exchange was open."""
        self._connection = None
        if self.status and self._until_eof and self._error is None:
            self.complete()  # a body delimited by the end of the connection
        elif not self.status:
            self._fail(errors.UpstreamFailed(f"upstream {self._label}: connection closed before a response"))
        else:
            self._fail(StreamBroken(f"upstream {self._label} connection broke mid-response"))

    def broke(self, why: str) -> None:
        self._connection = None
        if not self.status:
            self._fail(errors.UpstreamFailed(f"upstream {self._label}: {why}"))
        else:
            self._fail(StreamBroken(f"upstream {self._label}: {why}"))

    def _fail(self, error: BaseException) -> None:
        if self._error is None and not self._done:
            self._error = error
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _abort_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.reply = None
            connection.close()

    # -- waiting with one timer ----------------------------------------------------------------

    def _expire(self, error: errors.UpstreamTimeout) -> None:
        self._abort_connection()
        self._fail(error)

    async def _wait(self, until: float, error: Callable[[], errors.UpstreamTimeout]) -> None:
        """Waits for the next thing the connection delivers, or fails the reply at ``until``."""
        self._waiter = waiter = self._loop.create_future()
        timer = self._loop.call_at(until, lambda: self._expire(error()))
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    async def wait_head(self, until: float, error: Callable[[], errors.UpstreamTimeout]) -> None:
        """Until the head arrived; raises what ended the exchange before it (``error()`` at
        ``until``)."""
        while not self.status and self._error is None:
            await self._wait(until, error)
        if not self.status and self._error is not None:
            raise self._error  # (after the head, a failure is the body's: read and iter_chunks)

    async def read(self) -> bytes:
        self._whole = True
        if self._paused:
            self._resume()
        while not self._done and self._error is None:
            await self._wait(
                self._deadline,
                lambda: errors.UpstreamTimeout(f"upstream {self._label} exceeded its total timeout"),
            )
        if self._error is not None:
            raise self._error
        chunks = self._chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        return body

    def _resume(self) -> None:
        self._paused = False
        connection = self._connection
        if connection is not None and connection.transport is not None:
            connection.transport.resume_reading()

    def _check(self) -> None:
        """The streaming watchdog: one timer per stream. Idle is time the upstream sent nothing
        while the consumer was waiting for it; time spent sending to a slow client does not count."""
        now = self._loop.time()
        since = self._read_since
        if now >= self._deadline:
            self._expired = errors.UpstreamTimeout(f"upstream {self._label} exceeded its total timeout")
        elif since is not None and now - since >= self._idle:
            self._expired = IdleTimeout(
                f"upstream {self._label} sent nothing for {self._idle:g}s mid-response"
            )
        if self._expired is not None:
            self._expire(self._expired)
            return
        wake = (since if since is not None else now) + self._idle
        self._timer = self._loop.call_at(min(wake, self._deadline), self._check)

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        loop = self._loop
        chunks = self._chunks
        self._read_since = loop.time()
        self._timer = loop.call_at(min(self._read_since + self._idle, self._deadline), self._check)
        try:
            while True:
                if chunks:
                    # Everything that arrived together leaves together (a chunked upstream's
                    # chunks, several events of one write), as one piece.
                    chunk = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
                    chunks.clear()
                    self._buffered = 0
                    if self._paused and self._buffered < LOW_WATER:
                        self._resume()
                    self._read_since = None
                    yield chunk
                    self._read_since = loop.time()
                    continue
                if self._error is not None:
                    raise self._error
                if self._done:
                    return
                self._waiter = waiter = loop.create_future()
                try:
                    await waiter
                finally:
                    self._waiter = None
        finally:
            if self._timer is not None:
                self._timer.cancel()

    async def close(self) -> None:
        if not self._done:
            # Closing drops the connection: the upstream sees the disconnect and stops
            # generating, instead of us draining a stream nobody will read.
            self._abort_connection()
        self._done = True
        self._chunks.clear()
