"""The ASGI application: one route table for every path, the lifespan, and the app factory.

The model routes are generated from the format registry (``formats.FORMATS``: each format's
routes, each served by ``pipeline.handle`` with its format's guards); the other API routes go
through the same guards (``gateway.guards``); the admin API's and the dashboard's routes, declared
in ``admin``, are compiled here behind admission and the admin authentication (``admin_table``).
``EdgeApp`` finds a route by exact path (a dict lookup: the model endpoints carry nearly all
traffic and every streamed chunk, so no regex walk and no middleware ``send`` wrappers sit on
their way), then by template (a format's routes with path parameters,
``/{version}/models/{model}:generateContent``, and the admin routes with ids: their parameters
reach the handler as ``path_params``), then by prefix (``/v1/models/{id}``, stored state, and
every other path under ``/admin/api`` and ``/dashboard``). Whatever should apply to every request
belongs in ``EdgeApp.__call__``, the one place every request passes. It is also the one boundary:
a refusal a route raises is rendered there in the route's shape (``Route.shape``). A path that
matches nothing is a JSON 404, a known path with another method a JSON 405 with ``allow``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from modelgate import admin, errors
from modelgate.clock import Clock
from modelgate.config import Settings
from modelgate.formats import Codec, Format, FormatRoute
from modelgate.formats.registry import MODEL_PATHS
from modelgate.formats.registry import ROUTES as MODEL_ROUTES
from modelgate.gateway import guards, health, key_view, metrics_endpoint, models, pipeline, state_metrics
from modelgate.gateway.boundary import refusal_of
from modelgate.gateway.exchange import Endpoint
from modelgate.gateway.replies import codec_for_path, error_reply
from modelgate.gateway.state import conversations_api, responses_api
from modelgate.gateway.state.http import CODEC as STATE_CODEC
from modelgate.gateway.state.step import RESPONSES_STATE
from modelgate.gateway.websocket import PATH as WEBSOCKET_PATH
from modelgate.gateway.websocket import ResponsesSocket
from modelgate.gateway.websocket.endpoint import upgrade_required
from modelgate.gateway.websocket.session import ENDPOINT
from modelgate.server import health_access
from modelgate.server.metrics_port import MetricsPort
from modelgate.server.unknown_path import unknown_path_message
from modelgate.server.whole_reply import send_response
from modelgate.services import Services

log = logging.getLogger("modelgate")

Handler = Callable[[Request], Awaitable[Response]]
#: How a route's refusals read (its error shape): a wire format's (``gateway.replies.error_reply``
#: with the format's codec) or the admin API's (``admin.render_error``).
Shape = Callable[[errors.GatewayError, Mapping[str, str]], Response]
#: A path parameter of the format routes is one segment ended by ``/`` or ``:``
#: (``/v1beta/models/{model}:generateContent``); of the admin routes, ended by ``/`` only.
FORMAT_SEGMENT = "[^/:]+"
ADMIN_SEGMENT = "[^/]+"


@dataclass(frozen=True, slots=True)
class Route:
    """``path`` exactly, or every path under it with ``prefix``, or a template with ``{name}``
    parts (each one path segment, ended by ``/`` or ``:``); ``app`` serves the matched request."""

    path: str
    methods: frozenset[str]
    app: ASGIApp
    prefix: bool = False
    #: How this route's refusals are rendered; None: in the wire format of the path and the
    #: client's headers (``gateway.replies.codec_for_path``).
    shape: Shape | None = None
    #: What one ``{name}`` part of the template matches.
    segment: str = FORMAT_SEGMENT

    @property
    def is_template(self) -> bool:
        return "{" in self.path

    def pattern(self) -> re.Pattern[str]:
        """The template as a regular expression with one named group per parameter."""
        parts = re.split(r"\{(\w+)\}", self.path)
        literal = [re.escape(p) for p in parts[0::2]]
        names = [f"(?P<{name}>{self.segment})" for name in parts[1::2]]
        return re.compile("".join(a + b for a, b in zip(literal, [*names, ""], strict=True)))


def _serving(handler: Handler) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        response = await handler(Request(scope, receive))
        with contextlib.suppress(ClientDisconnect):  # gone before the answer: nobody to tell
            await send_response(response, scope, receive, send)

    return app


def _model_route(services: Services, fmt: Format, route: FormatRoute) -> Route:
    """A format's route: served by the pipeline, with what the route fixes."""
    state = RESPONSES_STATE if route.stateful else None
    endpoint = Endpoint(fmt.codec, route.endpoint, counting=route.counting, state=state, route=route)
    return Route(
        route.path,
        frozenset({route.method}),
        _model_endpoint(services, endpoint),
        shape=codec_shape(fmt.codec),
    )


def _model_endpoint(services: Services, endpoint: Endpoint) -> ASGIApp:
    async def serve(request: Request) -> Response:
        return await pipeline.handle(services, endpoint, request)

    return _serving(serve)


def codec_shape(codec: Codec) -> Shape:
    """Refusals in ``codec``'s wire format."""

    def shape(error: errors.GatewayError, headers: Mapping[str, str]) -> Response:
        return error_reply(codec, error, headers)

    return shape


#: The stored-state endpoints answer in the Responses format whoever calls.
_STATE_SHAPE = codec_shape(STATE_CODEC)


def _with_services(
    services: Services, handler: Callable[[Services, Request], Awaitable[Response]]
) -> ASGIApp:
    async def serve(request: Request) -> Response:
        return await handler(services, request)

    return _serving(serve)


def _one_model(services: Services) -> ASGIApp:
    async def serve(request: Request) -> Response:
        model_id = request.url.path.removeprefix("/v1/models/")
        return await models.get_model(services, request, model_id)

    return _serving(serve)


def _format_models(services: Services, fmt: Format, path: str) -> Route:
    """A format's own model list (``/v1beta/models``) or one model (``…/models/{model}``)."""

    async def listing(request: Request) -> Response:
        return await models.list_models(services, request, fmt)

    async def one(request: Request) -> Response:
        return await models.get_model(services, request, request.path_params["model"], fmt)

    app = _serving(one if "{model}" in path else listing)
    return Route(path, frozenset({"GET", "HEAD"}), app, shape=codec_shape(fmt.codec))


def routes(services: Services) -> list[Route]:
    """Every path the gateway serves."""
    read = frozenset({"GET", "HEAD"})
    state_methods = frozenset({"GET", "HEAD", "POST", "DELETE"})
    table = [
        Route("/", read, _with_services(services, health.root)),
        Route("/healthz", read, _with_services(services, health.healthz)),
        Route("/health", read, _with_services(services, health_access.health)),
        Route("/readyz", read, _with_services(services, health.readyz)),
        *(_model_route(services, fmt, route) for fmt, route in MODEL_ROUTES),
        # Stored responses and conversations (gateway.state); the handlers route below the prefix.
        Route(
            "/v1/responses/",
            state_methods,
            _with_services(services, responses_api.handle),
            prefix=True,
            shape=_STATE_SHAPE,
        ),
        Route(
            "/v1/conversations",
            frozenset({"POST"}),
            _with_services(services, conversations_api.handle),
            shape=_STATE_SHAPE,
        ),
        Route(
            "/v1/conversations/",
            state_methods,
            _with_services(services, conversations_api.handle),
            prefix=True,
            shape=_STATE_SHAPE,
        ),
        Route("/v1/models", read, _with_services(services, models.list_models)),
        Route("/v1/models/", read, _one_model(services), prefix=True),
        *(_format_models(services, fmt, path) for fmt, path in MODEL_PATHS),
        Route(key_view.PATH, read, _with_services(services, key_view.key_info)),
        Route(key_view.USAGE_PATH, read, _with_services(services, key_view.key_usage)),
        *admin_table(services),
    ]
    if services.settings.metrics.enabled:
        table.append(Route("/metrics", read, _with_services(services, metrics_endpoint.metrics)))
    return table


def _admin_route(
    services: Services, api: admin.AdminAPI, declared: admin.Route, *, prefix: bool = False
) -> Route:
    """An admin route behind its guards: admission (draining, the in-flight cap), then, for a
    handler that needs it, the admin authentication (token, or session and CSRF), then the
    handler. A refusal is raised to the table's one boundary, rendered in the admin shape."""
    handlers = declared.handlers

    async def serve(request: Request) -> Response:
        handler = handlers[request.method]  # the table answered another method with its 405
        if isinstance(handler, admin.Authed):
            principal = await api.authenticate(request)
            return await api.serve(request, principal, handler.handler)
        return await handler(request)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        refusal = guards.admission_refusal(services)
        if refusal is not None:
            raise refusal
        try:  # the slot is held until the answer is sent (a CSV export streams)
            response = await serve(Request(scope, receive))
            with contextlib.suppress(ClientDisconnect):
                await send_response(response, scope, receive, send)
        finally:
            services.inflight.release()

    return Route(
        declared.path, declared.methods, app, prefix=prefix, shape=_admin_shape, segment=ADMIN_SEGMENT
    )


def _admin_shape(error: errors.GatewayError, headers: Mapping[str, str]) -> Response:
    return admin.render_error(error, headers)


def admin_table(services: Services) -> list[Route]:
    """The admin API and the dashboard in the one table: their routes, and under each prefix
    every other path (the admin API's 404, the dashboard's missing file)."""
    api = admin.AdminAPI(services)
    api.sessions.metrics.install(services.telemetry)  # once per gateway: sign-ins in /metrics
    api.usage.recent.install(services.telemetry)  # the reports' 304s and remembered tags
    unknown = admin.Route(admin.PREFIX, dict.fromkeys(admin.UNKNOWN_METHODS, admin.unknown))
    missing = admin.Route("/dashboard", dict.fromkeys(("GET", "HEAD"), admin.dashboard_missing))
    return [
        *(_admin_route(services, api, r) for r in [*api.routes(), *admin.dashboard_routes()]),
        _admin_route(services, api, unknown, prefix=True),
        _admin_route(services, api, missing, prefix=True),
    ]


def _is_upgrade(scope: Scope) -> bool:
    return any(name == b"upgrade" for name, _ in scope["headers"])


def _upgrade_refusal(services: Services, path: str) -> errors.GatewayError:
    """An upgrade served as plain HTTP (``server.websocket``): why it is not a socket."""
    if path != WEBSOCKET_PATH:
        return errors.NotFound(f"{path} has no WebSocket endpoint; send the request as plain HTTP")
    if not services.settings.responses.websocket:
        return upgrade_required("WebSocket mode is off on this gateway; send requests as POST /v1/responses")
    return errors.InvalidRequest(
        "malformed WebSocket upgrade: GET with Sec-WebSocket-Version: 13 and a Sec-WebSocket-Key "
        "of 16 base64-encoded bytes is required",
        code="invalid_websocket_upgrade",
    )


class EdgeApp:
    """The ASGI entry point (see the module docstring)."""

    def __init__(self, services: Services, table: Sequence[Route]) -> None:
        self.services = services
        #: ``GET /v1/responses`` upgraded (``gateway.websocket``).
        self.sockets = ResponsesSocket(services)
        self._exact = {r.path: r for r in table if not r.prefix and not r.is_template}
        # Each template with its literal head, tested before its pattern: most paths reaching
        # the templates (the admin API's) are ruled out for most of them by a prefix test.
        self._templates = [(r.path.partition("{")[0], r.pattern(), r) for r in table if r.is_template]
        self._prefixed = sorted((r for r in table if r.prefix), key=lambda r: -len(r.path))
        #: The serving loop, once started (signal handlers hand work to it).
        self.loop: asyncio.AbstractEventLoop | None = None
        metrics = services.settings.metrics
        self.metrics_port = (
            MetricsPort(metrics, services.telemetry) if metrics.enabled and metrics.port else None
        )

    def shape_for(
        self, path: str, headers: Mapping[str, str], query: Mapping[str, str] | None = None
    ) -> Shape:
        """How a refusal on ``path`` reads: in its route's shape (an admin path in the admin
        shape), else in the wire format of the path and the client's headers. The HTTP layer
        (``server.protocol``: 408, framing) asks here too."""
        route = self.route_for(path)
        if route is not None and route.shape is not None:
            return route.shape
        return codec_shape(codec_for_path(path, headers, query))

    def route_for(self, path: str) -> Route | None:
        route, _ = self.match(path)
        return route

    def match(self, path: str) -> tuple[Route | None, dict[str, str] | None]:
        """The route serving ``path`` and, for a template, its path parameters."""
        route = self._exact.get(path)
        if route is not None:
            return route, None
        for head, pattern, candidate in self._templates:
            if not path.startswith(head):
                continue
            found = pattern.fullmatch(path)
            if found is not None:
                return candidate, found.groupdict()
        return self._by_prefix(path), None

    def _by_prefix(self, path: str) -> Route | None:
        for candidate in self._prefixed:
            # A prefix ends at a path segment: /admin/api matches /admin/api/keys, not /admin/apix.
            prefix = candidate.path
            if path.startswith(prefix) and (
                prefix.endswith("/") or len(path) == len(prefix) or path[len(prefix)] == "/"
            ):
                return candidate
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        if kind != "http":
            if kind == "websocket":  # only GET /v1/responses upgrades (server.websocket)
                await self.sockets(scope, receive, send)
            return
        path = scope["path"]
        route, params = self.match(path)
        if route is None:
            message = unknown_path_message(scope["method"], path, Headers(scope=scope), scope["scheme"])
            await self._refuse(scope, receive, send, errors.NotFound(message))
            return
        if _is_upgrade(scope):
            # On the Responses path the answer is in its format whatever headers came with it.
            refusal = _upgrade_refusal(self.services, path)
            codec = None
            if path == WEBSOCKET_PATH:
                codec = ENDPOINT.codec
                self.sockets.stats.refused[str(codec.http_status(refusal))] += 1
            await self._refuse(scope, receive, send, refusal, codec)
            return
        if scope["method"] not in route.methods:
            error = errors.MethodNotAllowed(
                f"{scope['method']} is not allowed on {path}",
                headers={"allow": ", ".join(sorted(route.methods))},
            )
            await self._refuse(scope, receive, send, error, shape=route.shape)
            return
        if params is not None:
            scope["path_params"] = params
        try:
            await route.app(scope, receive, send)
        except Exception as exc:  # the table's boundary: a refusal raised by the route's guards or handler
            refusal = refusal_of(exc)
            # A surprise ends the connection (its state is unknown); a refusal keeps it.
            close = refusal is not exc
            await self._refuse(scope, receive, send, refusal, shape=route.shape, close=close)

    async def _refuse(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        error: errors.GatewayError,
        codec: Codec | None = None,
        *,
        shape: Shape | None = None,
        close: bool = True,
    ) -> None:
        """The one place a refusal of the route table is rendered: in ``shape`` (the route's),
        or in ``codec``'s wire format, or in that of the path and the client's headers."""
        headers = {"connection": "close"} if close else {}
        if shape is None and codec is not None:
            shape = codec_shape(codec)
        if shape is None:
            request = Request(scope, receive)
            shape = self.shape_for(scope["path"], request.headers, request.query_params)
        response = shape(error, headers)
        with contextlib.suppress(RuntimeError, OSError):  # an answer had already begun: nothing to add
            await send_response(response, scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.loop = asyncio.get_running_loop()
                try:
                    await self.services.start()
                    if self.metrics_port is not None:
                        await self.metrics_port.start()
                except Exception as exc:
                    log.exception("start-up failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.metrics_port is not None:
                    await self.metrics_port.stop()
                await self.services.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return


def create_app(
    settings: Settings, *, clock: Clock | None = None, services: Services | None = None
) -> EdgeApp:
    services = services or Services.build(settings, clock=clock)
    state_metrics.install(services)
    return EdgeApp(services, routes(services))
