"""The HTTP connection: uvicorn's httptools protocol with the edge's limits and JSON refusals.

uvicorn has no timeout for a request's head or body and no cap on open connections, and answers
broken framing in plain text. ``guarded_protocol`` adds, per instance:

- a cap on open connections (``server.max_connections``): one more is answered 503 and closed;
- a head timeout (``server.header_timeout_seconds``) from the connection's start, or from the
  first byte of a later request on it, until the request's headers are complete: a JSON 408,
  then close (between requests an idle keep-alive connection is kept for
  ``server.keep_alive_seconds``, which may be longer);
- a body timeout (``server.body_timeout_seconds``) from the end of the headers until the body is
  complete: a JSON 408 if no answer started, then close;
- every refusal made here, framing errors included, as a JSON error in the shape the route table
  gives the path (``EdgeApp.shape_for``: a format's route in its format, an admin path in the
  admin shape, any other path in the format of the path and the client's headers so far).

Counts of each refusal are kept in ``limits.edge.EdgeStats`` (``/health`` shows them).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from starlette.responses import Response
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from modelgate import errors
from modelgate.config import ServerConfig
from modelgate.formats import ids
from modelgate.gateway.replies import codec_for_path, error_reply
from modelgate.limits.edge import EdgeStats
from modelgate.server.websocket import accepts_upgrade

log = logging.getLogger("modelgate.edge")


#: How a refusal reads on a path, given the client's headers so far: a function rendering it
#: (``server.app.EdgeApp.shape_for`` asks the route table).
ShapeFor = Callable[[str, Mapping[str, str]], Callable[[errors.GatewayError, Mapping[str, str]], Response]]
#: The response headers written by ``error_bytes`` itself.
_OWN_HEADERS = frozenset({"content-type", "content-length", "request-id", "x-request-id", "connection"})


def error_bytes(
    status_error: errors.GatewayError,
    path: str,
    *,
    close: bool = True,
    headers: Mapping[str, str] | None = None,
    shape_for: ShapeFor | None = None,
) -> bytes:
    """A complete HTTP/1.1 response carrying ``status_error`` in the shape ``shape_for`` gives
    ``path`` (without it: the wire format of ``path`` and of the client the request's
    ``headers`` so far name)."""
    seen = headers or {}
    if shape_for is None:
        answer = error_reply(codec_for_path(path, seen), status_error, {})
    else:
        answer = shape_for(path, seen)(status_error, {})
    body = bytes(answer.body)
    request_id = answer.headers.get("request-id") or ids.new_request_id()
    status = answer.status_code
    lines = [
        f"HTTP/1.1 {status} {_reason(status)}",
        f"content-type: {answer.headers.get('content-type', 'application/json')}",
        f"content-length: {len(body)}",
        f"request-id: {request_id}",
        f"x-request-id: {request_id}",
    ]
    lines += [f"{name}: {value}" for name, value in answer.headers.items() if name not in _OWN_HEADERS]
    if close:
        lines.append("connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _reason(status: int) -> str:
    return {400: "Bad Request", 408: "Request Timeout", 503: "Service Unavailable"}.get(status, "Error")


def guarded_protocol(
    server: ServerConfig,
    stats: EdgeStats,
    live: Callable[[], ServerConfig] | None = None,
    shape_for: ShapeFor | None = None,
) -> type[HttpToolsProtocol]:
    """uvicorn's protocol class with this instance's limits (uvicorn builds one per connection).
    ``server`` holds what needs a restart (the cap, the timeouts); ``live`` returns the running
    settings, for what a reload changes (``server.overload_retry_after``); ``shape_for`` is the
    route table's answer to how a refusal on a path reads."""
    stats.connection_cap = server.max_connections
    running = live if live is not None else lambda: server

    class GuardedProtocol(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._head_timer: asyncio.TimerHandle | None = None
            self._body_timer: asyncio.TimerHandle | None = None

        # connection ---------------------------------------------------------------------

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > server.max_connections:
                stats.connections_refused += 1
                refusal = errors.Unavailable(
                    "the gateway is at its limit of open connections; retry shortly",
                    headers={"retry-after": str(running().overload_retry_after)},
                )
                self._refuse(refusal, "/")
                return
            self._arm_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_timers()
            super().connection_lost(exc)

        def _refuse(self, error: errors.GatewayError, path: str) -> None:
            if not self.transport.is_closing():
                self.transport.write(
                    error_bytes(error, path, headers=self._header_names(), shape_for=shape_for)
                )
                self.transport.close()
            self._cancel_timers()

        def _cancel_timers(self) -> None:
            for timer in (self._head_timer, self._body_timer):
                if timer is not None:
                    timer.cancel()
            self._head_timer = self._body_timer = None

        # head ---------------------------------------------------------------------------

        def _arm_head(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_timer = self.loop.call_later(server.header_timeout_seconds, self._head_timed_out)

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self.cycle is not None and not self.cycle.response_complete:
                return  # a request is being served; its own timers apply
            stats.head_timeouts += 1
            self._refuse(errors.RequestTimeout("the request's headers did not arrive in time"), "/")

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._head_timer is None:  # a later request on a kept-alive connection
                self._arm_head()

        def on_headers_complete(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            super().on_headers_complete()
            if self.cycle is not None and self.cycle.more_body:
                self._body_timer = self.loop.call_later(server.body_timeout_seconds, self._body_timed_out)

        # body ---------------------------------------------------------------------------

        def on_message_complete(self) -> None:
            if self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None
            super().on_message_complete()

        def _body_timed_out(self) -> None:
            self._body_timer = None
            cycle = self.cycle
            if cycle is None or not cycle.more_body:
                return
            stats.body_timeouts += 1
            path = str(self.scope.get("path", "/")) if self.scope else "/"
            if not cycle.response_started:
                # The handler is waiting for the rest of the body: it sees a disconnect and stops.
                cycle.disconnected = True
                cycle.message_event.set()
                self._refuse(errors.RequestTimeout("the request body did not arrive in time"), path)
            else:
                self.transport.close()

        # refusals uvicorn would answer in plain text ------------------------------------

        def send_400_response(self, msg: str) -> None:
            stats.malformed_requests += 1
            self._refuse(errors.InvalidRequest(f"malformed HTTP request: {msg}"), self._path_so_far())

        def _header_names(self) -> dict[str, str]:
            """The names of the headers parsed so far (they pick a client's error shape)."""
            parsed: list[tuple[bytes, bytes]] = getattr(self, "headers", None) or []
            return {name.decode("latin-1"): "" for name, _ in parsed}

        def _path_so_far(self) -> str:
            """The path of the request being parsed: the scope's once its head was complete, else
            what arrived of its target (so the refusal is in that path's wire format)."""
            if self.scope and "path" in self.scope:
                return str(self.scope["path"])
            url: bytes = getattr(self, "url", b"")
            target = url.split(b"?", 1)[0] if url else b"/"
            return target.decode("latin-1") or "/"

        def _unsupported_upgrade_warning(self) -> None:
            # An upgrade not handed to the WebSocket protocol is served as a plain request: the
            # route answers it in JSON.
            log.debug("upgrade request served as plain HTTP")

        def _should_upgrade(self) -> bool:
            # Called only for requests that ask to upgrade (server.websocket.accepts_upgrade).
            return super()._should_upgrade() and accepts_upgrade(self.scope["method"], self.url, self.headers)

    return GuardedProtocol
