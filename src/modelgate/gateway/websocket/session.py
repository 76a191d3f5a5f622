"""One accepted socket: its ``response.create`` messages served one after another, each as a
request like an HTTP one (``gateway.pipeline``: authenticated again from the upgrade's headers, so a
revoked key is refused on its next message, then rate-limited, reserved, billed, logged, traced).

Invariants:
- at most one response is in flight; messages sent meanwhile wait, up to
  ``responses.websocket_max_pending_messages`` of them (one more: close 1008);
- a socket with nothing in flight closes after ``websocket_idle_timeout_seconds`` (1000), and any
  socket once ``websocket_max_connection_seconds`` passed and its response in flight ended (1000);
- when the gateway drains, the socket closes (1001) once its response in flight ended; the grace's
  end cuts that response in-band, as on HTTP;
- the client's disconnect (or a close decided here while a response runs) ends the response in
  flight the way an HTTP client's disconnect does: the upstream call is aborted and the usage so
  far settled (``gateway.relay.StreamResponse``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from modelgate import errors
from modelgate.formats import CODECS
from modelgate.gateway import key_access, pipeline
from modelgate.gateway.exchange import Endpoint, Exchange
from modelgate.gateway.relay import StreamResponse
from modelgate.gateway.replies import error_reply
from modelgate.gateway.state.step import RESPONSES_STATE
from modelgate.gateway.websocket.answers import (
    FrameSink,
    prewarm_messages,
    prewarm_reply,
    refusal_message,
    whole_body,
)
from modelgate.gateway.websocket.frames import PROCESSED, Link, Prepared, next_link, prepare
from modelgate.gateway.websocket.stats import WebSocketStats
from modelgate.services import Services

ENDPOINT = Endpoint(CODECS["responses"], "responses", state=RESPONSES_STATE)
DISCONNECT: Message = {"type": "http.disconnect"}
#: Close codes (RFC 6455 §7.4.1) and the reasons sent with them.
NORMAL, GOING_AWAY, UNSUPPORTED_DATA, POLICY, INTERNAL = 1000, 1001, 1003, 1008, 1011
log = logging.getLogger("modelgate.request")


class Session:
    def __init__(
        self, services: Services, stats: WebSocketStats, scope: Scope, receive: Receive, send: Send
    ) -> None:
        self.services = services
        self.stats = stats
        self.scope = scope
        self.headers = Headers(scope=scope)
        self._receive = receive
        self._send = send
        config = services.settings.responses
        self._idle = config.websocket_idle_timeout_seconds
        self._lifetime = config.websocket_max_connection_seconds
        self._max_pending = config.websocket_max_pending_messages
        self._pending: deque[Message] = deque()
        self._wake = asyncio.Event()
        #: The socket is over: the client left, or a close was decided that cuts what runs.
        self._ended = asyncio.Event()
        self._client_gone = False
        #: The close code the client (or the protocol layer) ended the socket with.
        self._client_code = 1006
        #: (code, reason, metric label) of the close this side sends.
        self._close: tuple[int, str, str] | None = None
        self._link: Link | None = None
        loop = asyncio.get_running_loop()
        self._now = loop.time
        self._opened = self._active = loop.time()

    async def run(self) -> None:
        self.stats.opened()
        reader = asyncio.create_task(self._read())
        stop_watching = self.services.drain.when_draining(self._wake.set)
        try:
            while (message := await self._next()) is not None:
                try:
                    await self._serve(message)
                except Exception:  # a bug outside the request path's own boundary: end cleanly
                    log.exception("websocket message failed with an unexpected error")
                    self._end((INTERNAL, "internal error", "error"))
                self._active = self._now()
        finally:
            stop_watching()
            reader.cancel()
            await self._finish()

    # reading ----------------------------------------------------------------------------------

    async def _read(self) -> None:
        """Every message as it arrives (so a disconnect is seen while a response runs)."""
        while True:
            message = await self._receive()
            if message["type"] == "websocket.disconnect":
                self._client_gone = True
                self._client_code = int(message.get("code") or 1005)
                self._end()
                return
            if message["type"] != "websocket.receive":
                continue
            self.stats.messages += 1
            if len(self._pending) >= self._max_pending:
                reason = "too many messages sent ahead of the response in flight; send one at a time"
                self._end((POLICY, reason, "too_many_pending"))
                return
            self._pending.append(message)
            self._wake.set()

    def _end(self, close: tuple[int, str, str] | None = None) -> None:
        if close is not None and self._close is None:
            self._close = close
        self._ended.set()
        self._wake.set()

    async def _disconnected(self) -> Message:
        """The ``receive`` a request in flight watches: it reports a disconnect once the socket ends."""
        await self._ended.wait()
        return DISCONNECT

    async def _next(self) -> Message | None:
        """The next message to serve, or None once the socket is to close."""
        while True:
            if self._ended.is_set():
                return None
            if self.services.drain.active:
                self._end((GOING_AWAY, "the gateway is shutting down; reconnect", "drain"))
                return None
            now = self._now()
            life_left = self._opened + self._lifetime - now
            if life_left <= 0:
                self._end((NORMAL, "connection lifetime limit reached; open a new socket", "lifetime"))
                return None
            if self._pending:
                return self._pending.popleft()
            idle_left = self._active + self._idle - now
            if idle_left <= 0:
                self._end((NORMAL, "idle timeout", "idle_timeout"))
                return None
            self._wake.clear()
            try:
                async with asyncio.timeout(min(idle_left, life_left)):
                    await self._wake.wait()
            except TimeoutError:
                continue

    # serving ----------------------------------------------------------------------------------

    async def _serve(self, message: Message) -> None:
        text = message.get("text")
        if text is None:
            reason = "binary messages are not supported; send response.create as JSON text"
            self._end((UNSUPPORTED_DATA, reason, "binary_message"))
            return
        prepared = await self._prepare(text.encode())
        if prepared.kind == PROCESSED:
            return
        trace_headers: dict[str, str] | None = None
        if prepared.traceparent is not None and self.services.telemetry.tracing is not None:
            # The request's own trace context (Codex's client_metadata) over the upgrade's.
            trace_headers = {**self.headers, "traceparent": prepared.traceparent}
        exchange = pipeline.open_exchange(
            self.services,
            ENDPOINT,
            self.headers,
            "GET",
            self.scope["path"],
            transport="websocket",
            trace_headers=trace_headers,
        )
        exchange.peer = key_access.peer_of(self.scope)
        response: Response
        try:
            response = await pipeline.run(self.services, exchange, self._work(exchange, prepared))
        except errors.GatewayError as refusal:  # recorded by the pipeline; the socket's boundary renders it
            response = error_reply(ENDPOINT.codec, refusal, {})
        await self._answer(prepared, response)

    async def _prepare(self, data: bytes) -> Prepared:
        link = self._link
        size = len(data) + (len(link.items) if link is not None else 0)
        if size <= self.services.settings.server.offload_body_bytes:
            return prepare(data, link)
        return await self.services.offload.run_on_body(prepare, data, link)

    async def _work(self, exchange: Exchange, prepared: Prepared) -> Response:
        services = self.services
        with exchange.span("authenticate"):
            key = pipeline.authenticate(services, exchange)
            exchange.body_read = True  # the message is in hand: nothing more to read
            if prepared.error is not None:
                raise prepared.error
            server = services.settings.server
            if len(prepared.body) > server.max_body_bytes:
                raise errors.RequestTooLarge(
                    f"the request with its chained history exceeds the {server.max_body_bytes}-byte limit"
                )
            if len(prepared.body) > server.offload_body_bytes:
                pipeline.take_large_body_slot(services, exchange)
            admitted = await pipeline.admit_request(services, exchange, key, prepared.body)
        if not prepared.generate:  # a pre-warm: nothing generated, held or billed
            return prewarm_reply(admitted, services.clock.time())
        return await pipeline.serve_admitted(services, admitted, self._disconnected)

    async def _answer(self, prepared: Prepared, response: Response) -> None:
        if isinstance(response, StreamResponse):
            await response(self.scope, self._disconnected, FrameSink(self._text))
            completed = response.stream.completed()
            if completed is not None:
                self._link = next_link(prepared, completed) or self._link
            return
        status = response.status_code
        if status == 499:  # the client left
            return
        if status == 200:  # a pre-warm
            body = whole_body(response)
            for text in prewarm_messages(body):
                await self._text(text)
            self._link = next_link(prepared, body) or self._link
            return
        await self._text(refusal_message(response))
        if status == 401:  # the key stopped working: every later message would be refused too
            self._end((POLICY, "the API key is no longer valid", "key_refused"))

    async def _text(self, text: str) -> None:
        try:
            await self._send({"type": "websocket.send", "text": text})
        except OSError:  # the client's connection failed under a write: what runs is cut
            self._client_gone = True
            self._end()

    async def _finish(self) -> None:
        """Close from this side unless the client is gone; the socket is counted closed once."""
        close = self._close
        if self._client_gone or close is None:
            self.stats.closed_by_client(self._client_code)
            return
        code, reason, label = close
        self.stats.closed_by_server(label)
        with contextlib.suppress(OSError, RuntimeError):  # gone meanwhile: nobody to tell
            await self._send({"type": "websocket.close", "code": code, "reason": reason})
