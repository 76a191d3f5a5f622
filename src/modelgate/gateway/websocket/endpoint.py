"""``GET /v1/responses`` upgraded to a WebSocket: the handshake's decision, then the socket's
``Session``.

The upgrade is authenticated from its headers before it is accepted (``x-api-key`` or
``Authorization: Bearer``, as on HTTP): no key or a bad one is a 401, a key whose group may not use
Responses (Basic/Pro, docs/architecture.md §2) a 426 saying why, so clients fall back to HTTP (where they get
the 403 that names the endpoints they may use), and a draining gateway a 503. Every refusal is an
HTTP answer with a JSON body in the OpenAI error shape, logged and counted as a request.
"""

from __future__ import annotations

import contextlib

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from modelgate import errors
from modelgate.gateway import guards, key_access, pipeline
from modelgate.gateway.exchange import Exchange
from modelgate.gateway.replies import error_reply
from modelgate.gateway.websocket.session import ENDPOINT, Session
from modelgate.gateway.websocket.stats import WebSocketStats
from modelgate.services import Services

#: Where the Responses WebSocket is served.
PATH = "/v1/responses"


def upgrade_required(message: str) -> errors.GatewayError:
    """A 426: the client should send its requests as plain HTTP (Codex falls back on it)."""
    return errors.InvalidRequest(message, code="websocket_not_supported", status=426)


class ResponsesSocket:
    """The ASGI app of ``websocket`` scopes (see the module docstring)."""

    def __init__(self, services: Services) -> None:
        self.services = services
        config = services.settings.responses
        self.stats = WebSocketStats(
            config.websocket_idle_timeout_seconds, config.websocket_max_connection_seconds
        )
        # Another app over the same services may already export its own (tests build several).
        with contextlib.suppress(ValueError):
            services.telemetry.metrics.collect_from(self.stats.collect)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        refusal = self.refusal(scope)
        if refusal is not None:
            self.stats.refused[str(refusal.status_code)] += 1
            await send(
                {
                    "type": "websocket.http.response.start",
                    "status": refusal.status_code,
                    "headers": refusal.raw_headers,
                }
            )
            await send({"type": "websocket.http.response.body", "body": bytes(refusal.body)})
            return
        await send({"type": "websocket.accept"})
        await Session(self.services, self.stats, scope, receive, send).run()

    def refusal(self, scope: Scope) -> Response | None:
        """The HTTP answer refusing this upgrade, or None to accept it."""
        services = self.services
        exchange = Exchange(ENDPOINT, services.clock.time(), Headers(scope=scope))
        exchange.record.transport = "websocket"
        exchange.body_read = True  # an upgrade has no body
        exchange.peer = key_access.peer_of(scope)
        try:
            if scope["path"] != PATH:
                raise errors.NotFound(
                    f"{scope['path']} has no WebSocket endpoint; WebSockets are served on {PATH}"
                )
            if not services.settings.responses.websocket:
                raise upgrade_required(
                    "WebSocket mode is off on this gateway; send requests as POST /v1/responses"
                )
            try:
                pipeline.authenticate(services, exchange)
            except errors.PermissionDenied as denied:
                if denied.code == "address_not_allowed":  # the key's own rule, not the group's
                    raise
                raise upgrade_required(
                    f"{denied.message} (WebSocket mode serves /v1/responses only)"
                ) from None
            if services.drain.active:
                raise guards.shutting_down()
        except errors.GatewayError as error:
            # Rendered here: an upgrade refused is answered as plain HTTP by this module.
            return error_reply(
                exchange.endpoint.codec, pipeline.refusal(services, exchange, error, slot=False), {}
            )
        return None
