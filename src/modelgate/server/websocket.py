"""The WebSocket side of the connection layer: which upgrades become sockets, and how a socket
ends when the server shuts down.

Only a well-formed upgrade of ``GET /v1/responses`` is handed to the WebSocket protocol
(``accepts_upgrade``); any other upgrade is served as a plain HTTP request, so the route answers
it in JSON (a 404 off that path, a 400 for a malformed handshake, a 426 with WebSockets off)
instead of the protocol library's plain-text refusals. HTTP requests pay nothing for this: the
check runs only for requests that ask to upgrade.

uvicorn's shutdown closes every open socket at once (code 1012); ``DrainingWebSocketProtocol``
leaves an accepted socket to the application, which closes it with 1001 once its response in
flight ended (``gateway.websocket.session``), within the shutdown grace.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from modelgate.gateway.websocket import PATH


def accepts_upgrade(method: str, url: bytes, headers: list[tuple[bytes, bytes]]) -> bool:
    """An upgrade the WebSocket protocol will accept: ``GET`` of the Responses path, version 13 and
    a key of 16 base64 bytes (RFC 6455 §4.2.1)."""
    if method != "GET" or url.partition(b"?")[0] != PATH.encode():
        return False
    key = version = None
    for name, value in headers:
        if name == b"sec-websocket-key":
            key = value
        elif name == b"sec-websocket-version":
            version = value
    if version is None or version.strip() != b"13" or key is None:
        return False
    try:
        return len(base64.b64decode(key.strip(), validate=True)) == 16
    except (binascii.Error, ValueError):
        return False


class DrainingWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol, leaving accepted sockets to drain (module docstring)."""

    async def send(self, message: Any) -> None:
        await super().send(message)
        if message["type"] == "websocket.http.response.body" and not message.get("more_body", False):
            # A refused upgrade is a complete answer (uvicorn would log it as a handshake never made).
            self.handshake_complete = True

    def shutdown(self) -> None:
        if self.handshake_complete and not self.close_sent and not self.transport.is_closing():
            return
        super().shutdown()
