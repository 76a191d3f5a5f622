"""The ASGI application: routes, health, the model catalogue, and the app factory."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from modelgate import __version__, errors
from modelgate.admin import admin_routes
from modelgate.clock import Clock
from modelgate.config import Settings
from modelgate.errors import WireFormat
from modelgate.formats import CODECS, ids
from modelgate.gateway.pipeline import _FAMILY_OF_GROUP, handle
from modelgate.gateway.services import Services
from modelgate.storage.base import KeyRecord

JSON = "application/json"


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type=JSON, headers=headers)


def _format_of(request: Request) -> WireFormat:
    """For endpoints shared by both SDK families: Anthropic clients send a version header."""
    headers = request.headers
    if "anthropic-version" in headers or "alpha-version" in headers or "x-api-key" in headers:
        return "messages"
    return "chat"


def _error(request: Request, error: errors.GatewayError, fmt: WireFormat | None = None) -> Response:
    fmt = fmt or _format_of(request)
    request_id = ids.new_request_id()
    headers = {"request-id": request_id, "x-request-id": request_id, **error.headers}
    return Response(CODECS[fmt].render_error(error, request_id), error.status_for(fmt), headers, JSON)


def _visible_models(services: Services, key: KeyRecord) -> list[dict[str, Any]]:
    family = _FAMILY_OF_GROUP[key.group]
    allowed = key.allowed_models
    return [
        m.listing()
        for m in services.catalogue.in_family(family)  # type: ignore[arg-type]
        if allowed is None or m.id in allowed
    ]


def create_app(
    settings: Settings, *, clock: Clock | None = None, services: Services | None = None
) -> GatewayApp:
    services = services or Services.build(settings, clock=clock)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await services.start()
        try:
            yield
        finally:
            await services.stop()

    async def messages_create(request: Request) -> Response:
        return await handle(services, "messages", "messages", request)

    async def messages_count(request: Request) -> Response:
        return await handle(services, "messages", "count_tokens", request)

    async def chat_create(request: Request) -> Response:
        return await handle(services, "chat", "chat", request)

    async def responses_create(request: Request) -> Response:
        return await handle(services, "responses", "responses", request)

    async def models_list(request: Request) -> Response:
        try:
            key = services.keys.authenticate(request.headers, services.clock.time())
        except errors.GatewayError as error:
            return _error(request, error)
        data = _visible_models(services, key)
        return _json(
            {
                "object": "list",
                "data": data,
                "has_more": False,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
            }
        )

    async def models_get(request: Request) -> Response:
        try:
            key = services.keys.authenticate(request.headers, services.clock.time())
        except errors.GatewayError as error:
            return _error(request, error)
        model_id = request.path_params["model_id"]
        for item in _visible_models(services, key):
            if item["id"] == model_id:
                return _json(item)
        return _error(
            request, errors.NotFound(f"model {model_id} is not available for this key", param="model")
        )

    async def healthz(request: Request) -> Response:
        return _json({"status": "ok", "service": "modelgate", "version": __version__})

    async def health(request: Request) -> Response:
        database: dict[str, Any] = {"status": "ok", "engine": settings.resolved_database_url.split(":", 1)[0]}
        try:
            await asyncio.wait_for(services.store.ping(), timeout=2.0)
        except Exception as exc:  # any failure to answer means unhealthy, whatever the driver raised
            database = {**database, "status": "unreachable", "error": type(exc).__name__}
        upstreams = [
            {
                "name": p.name,
                "kind": p.kind,
                **({"note": "built-in simulator, not a real model"} if p.kind == "simulator" else {}),
            }
            for p in settings.providers
        ]
        deployments = [
            {
                "model": s.model,
                "provider": s.provider,
                "upstream_model": s.upstream_model,
                "status": "cooling_down" if s.cooling_for > 0 else "ok",
                "consecutive_failures": s.consecutive_failures,
            }
            for s in services.router.status()
            if s.consecutive_failures or s.cooling_for > 0
        ]
        ok = database["status"] == "ok"
        body = {
            "status": "ok" if ok else "unavailable",
            "version": __version__,
            "checks": {"database": database, "upstreams": upstreams, "unhealthy_deployments": deployments},
            "in_flight": services.inflight.in_flight,
        }
        return _json(body, 200 if ok else 503)

    async def root(request: Request) -> Response:
        if request.method == "HEAD":
            return Response(status_code=200)
        return _json({"service": "modelgate", "version": __version__, "docs": "see README.md"})

    async def not_found(request: Request) -> Response:
        return _error(request, errors.NotFound(f"no endpoint {request.method} {request.url.path}"))

    routes = [
        Route("/", root, methods=["GET", "HEAD"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/v1/messages", messages_create, methods=["POST"]),
        Route("/v1/messages/count_tokens", messages_count, methods=["POST"]),
        Route("/v1/chat/completions", chat_create, methods=["POST"]),
        Route("/v1/responses", responses_create, methods=["POST"]),
        Route("/v1/models", models_list, methods=["GET"]),
        Route("/v1/models/{model_id:path}", models_get, methods=["GET"]),
        Route("/v1/{rest:path}", not_found, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
    ]
    routes += admin_routes(services)
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.services = services
    return GatewayApp(app, services)


class GatewayApp:
    """The ASGI entry point: model requests go straight to the request path, the rest to Starlette.

    The four model endpoints carry nearly all traffic and every streamed chunk; skipping Starlette's
    routing and middleware ``send`` wrappers for them removes a layer of calls per chunk. ``handle``
    renders every error itself, so nothing is lost by skipping the middleware.
    """

    _HOT: dict[str, tuple[WireFormat, str]] = {
        "/v1/messages": ("messages", "messages"),
        "/v1/messages/count_tokens": ("messages", "count_tokens"),
        "/v1/chat/completions": ("chat", "chat"),
        "/v1/responses": ("responses", "responses"),
    }

    def __init__(self, starlette: Starlette, services: Services) -> None:
        self.starlette = starlette
        self.services = services
        self.state = starlette.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            target = self._HOT.get(scope["path"])
            if target is not None:
                response = await handle(self.services, target[0], target[1], Request(scope, receive))
                with contextlib.suppress(ClientDisconnect):  # gone before the answer: nobody to tell
                    await response(scope, receive, send)
                return
        await self.starlette(scope, receive, send)
