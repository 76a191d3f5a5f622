"""What the request path's answers become on a socket.

A request served from a frame ends as the same ``Response`` an HTTP request gets (the pipeline is
shared). ``FrameSink`` is the ``send`` a ``relay.StreamResponse`` writes its SSE bytes to: each
event becomes one text message holding the event's JSON (the ``data`` of the SSE event), exactly
the objects the SSE stream carries; SSE comments (keep-alive pings) become nothing. A whole answer
is either a refusal (``error`` message, ``frames.error_message``) or a pre-warm's response object
(``prewarm_messages``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import orjson
from starlette.responses import Response
from starlette.types import Message

from modelgate import ir
from modelgate.formats import ids
from modelgate.formats.jsonutil import Json
from modelgate.formats.responses.wire import request_echo, response_object
from modelgate.formats.sse import SSEParser
from modelgate.gateway.exchange import Admitted
from modelgate.gateway.replies import json_reply
from modelgate.gateway.websocket.frames import error_message, event_message

SendText = Callable[[str], Awaitable[None]]

#: Response headers an ``error`` message carries (what a client acts on: retry, limits, ids).
_ERROR_HEADERS = (
    "retry-after",
    "x-should-retry",
    "ratelimit",
    "ratelimit-policy",
    "request-id",
    "x-request-id",
)


class FrameSink:
    """An ASGI ``send`` for a ``StreamResponse``: its SSE events as text messages."""

    __slots__ = ("_parser", "_send", "sent")

    def __init__(self, send: SendText) -> None:
        self._send = send
        self._parser = SSEParser()
        #: Messages sent so far.
        self.sent = 0

    async def __call__(self, message: Message) -> None:
        if message["type"] != "http.response.body":
            return  # the response head: a socket has none
        body = message.get("body", b"")
        events = self._parser.feed(body) if body else []
        if not message.get("more_body", False):
            events += self._parser.finish()
        for event in events:
            data = event.data
            if data and data != b"[DONE]":
                await self._send(data.decode("utf-8", "replace"))
                self.sent += 1


def refusal_message(response: Response) -> str:
    """A whole answer that is not a 200 (a refusal in the OpenAI format) as an ``error`` message."""
    headers = {name: response.headers[name] for name in _ERROR_HEADERS if name in response.headers}
    return error_message(response.status_code, bytes(response.body), headers)


def prewarm_reply(admitted: Admitted, now: float) -> Response:
    """The answer to ``generate: false``: a completed response with no output and no usage."""
    request = admitted.client.request()
    response = response_object(
        response_id=ids.new_response_id(),
        model=admitted.model.id,
        created_at=int(now),
        status="completed",
        output=[],
        echo=request_echo(request),
        usage=ir.Usage(),
    )
    return json_reply(response, headers=admitted.exchange.reply_headers())


def prewarm_messages(response: Json) -> list[str]:
    """``response.created`` then ``response.completed``: what a client waits for (Codex waits for
    ``response.completed`` before its first real request)."""
    created = {**response, "status": "in_progress", "usage": None}
    return [
        event_message("response.created", 0, response=created),
        event_message("response.completed", 1, response=response),
    ]


def whole_body(response: Response) -> Json:
    parsed = orjson.loads(bytes(response.body))
    return parsed if isinstance(parsed, dict) else {}
