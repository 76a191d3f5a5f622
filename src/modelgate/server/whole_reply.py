"""A whole response written below ASGI: its head and body in one write, checked in one pass.

Through ASGI a whole response costs two messages and two ``send`` calls: uvicorn writes the head
when the response starts (checking every header name and value with a regular expression of its
own, one search each) and the body when it follows, each with its own ``transport.write``, so two
system calls and two loopback deliveries per answer. Every answer of the gateway that is not a
stream is a plain ``starlette.responses.Response`` whose headers starlette has already encoded;
``send_response`` writes such a response straight to the connection of uvicorn's httptools
protocol (the one the gateway serves HTTP/1.1 with, ``server.protocol``), as uvicorn would:

- the same bytes: uvicorn's status line, its default headers (``date``, ``server`` when on), the
  response's headers, ``connection: close`` when the connection is not kept alive;
- the same checks: a header name or value uvicorn would refuse is left to uvicorn, which refuses
  it (found here with one search over all names and one over all values), and the connection's
  keep-alive state follows a ``connection: close`` header;
- the same end: the response is complete, a connection not kept alive is closed, and the
  protocol is told (it serves the connection's next request, or arms its keep-alive timer);
- the same access log line, when uvicorn's access log is on.

Anything else goes through ASGI unchanged: a stream, a file, a ``HEAD`` request, a connection
whose writes are paused by flow control or that is gone, any other server or protocol (``send``
is not uvicorn's httptools response cycle).
"""

from __future__ import annotations

from starlette.responses import Response
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http import httptools_impl
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

_CYCLE = httptools_impl.RequestResponseCycle
_STATUS_LINE = httptools_impl.STATUS_LINE
_BAD_NAME = httptools_impl.HEADER_RE
_BAD_VALUE = httptools_impl.HEADER_VALUE_RE


async def send_response(response: Response, scope: Scope, receive: Receive, send: Send) -> None:
    """Send ``response`` (``Response.__call__``, written at once where it can be)."""
    if not written_whole(response, send):
        await response(scope, receive, send)


def written_whole(response: Response, send: Send) -> bool:
    """Whether ``response`` was written whole on the connection ``send`` belongs to (False:
    nothing was written or changed; ASGI must send it)."""
    if type(response) is not Response or response.background is not None:
        return False
    cycle = getattr(send, "__self__", None)
    if type(cycle) is not _CYCLE:
        return False
    try:
        ready = _ready(cycle)
    except AttributeError:  # another uvicorn than the one this was written against: ASGI
        return False
    return ready and _write(cycle, response)


def _ready(cycle: httptools_impl.RequestResponseCycle) -> bool:
    """The cycle has not started answering and its connection takes a write now (reads every
    attribute ``_write`` uses, so a uvicorn without one fails here, before anything changed)."""
    return not (
        cycle.response_started
        or cycle.response_complete
        or cycle.disconnected
        or cycle.flow.write_paused
        or cycle.scope["method"] == "HEAD"
        or cycle.default_headers is None
        or cycle.message_event is None
        or cycle.transport is None
        or cycle.on_response is None
        or (cycle.access_log and cycle.access_logger is None)
        or cycle.waiting_for_100_continue is None
        or cycle.keep_alive is None
    )


def _write(cycle: httptools_impl.RequestResponseCycle, response: Response) -> bool:
    """Write ``response`` whole on ``cycle``'s connection (``_ready``); False when only ASGI may
    (nothing was written or changed then)."""
    status = response.status_code
    status_line = _STATUS_LINE.get(status)
    body = response.body
    if status_line is None or not isinstance(body, bytes):
        return False
    headers = response.raw_headers
    names = b"".join([name for name, _ in headers])
    values = b"".join([value for _, value in headers])
    if _BAD_NAME.search(names) or _BAD_VALUE.search(values):
        return False  # uvicorn refuses it in its own words (a bug of ours: never a silent fix)
    keep_alive = cycle.keep_alive
    says_close = False
    length: int | None = None
    head = [status_line]
    for name, value in cycle.default_headers:
        head += (name, b": ", value, b"\r\n")
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"content-length":
            try:
                length = int(value)
            except ValueError:
                return False
        elif lowered == b"transfer-encoding":
            return False
        elif lowered == b"connection" and b"close" in [t.lower().strip() for t in value.split(b",")]:
            keep_alive = False
            says_close = True
        head += (lowered, b": ", value, b"\r\n")
    if length != len(body):
        return False  # uvicorn's own checks decide (its length errors)
    if not keep_alive and not says_close:
        head.append(b"connection: close\r\n")
    cycle.keep_alive = keep_alive
    if cycle.access_log:  # uvicorn's line, word for word
        scope = cycle.scope
        cycle.access_logger.info(
            '%s - "%s %s HTTP/%s" %d',
            get_client_addr(scope),
            scope["method"],
            get_path_with_query_string(scope),
            scope["http_version"],
            status,
        )
    head += (b"\r\n", body)
    cycle.response_started = True
    cycle.waiting_for_100_continue = False
    cycle.chunked_encoding = False
    cycle.expected_content_length = 0
    cycle.transport.write(b"".join(head))
    cycle.response_complete = True
    cycle.message_event.set()
    if not keep_alive:
        cycle.transport.close()
    cycle.on_response()  # the connection's next request, or its keep-alive timer
    return True
