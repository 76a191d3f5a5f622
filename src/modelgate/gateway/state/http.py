"""What every stored-state endpoint shares: the key, the Responses error shape, the rate limit,
request bodies, query parameters and list pages.

The endpoints are the Responses API's own (``Nova`` keys; others get the 403 of ``/v1/responses``)
and answer in its error format. Each request takes a rate-limit unit of the key (they read and
write the database), and none is billed: reading stored objects is free. An id of another
account reads exactly like a missing one (``not_found``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from modelgate import errors
from modelgate.formats import CODECS, FORMATS
from modelgate.formats.jsonutil import Json
from modelgate.gateway.body import parse_object, read_limited, too_deep
from modelgate.gateway.guards import guarded
from modelgate.gateway.replies import json_reply
from modelgate.services import Services
from modelgate.storage.base import KeyRecord
from modelgate.storage.responses import ItemPage, PageRequest

log = logging.getLogger("modelgate.state")
CODEC = CODECS["responses"]
#: One path: its segments after the endpoint's prefix.
Handler = Callable[[Services, KeyRecord, Request, Sequence[str]], Awaitable[Response]]
#: Most items one list page holds (as the OpenAI API).
MAX_PAGE = 100


def not_found(what: str, ident: str) -> errors.NotFound:
    return errors.NotFound(f"{what} with id '{ident[:128]}' not found.", code="not_found")


def turned_off() -> errors.NotFound:
    return errors.NotFound(
        'stored responses and conversations are turned off on this gateway (responses.store = "off")',
        code="not_found",
    )


async def serve(services: Services, request: Request, segments: Sequence[str], handler: Handler) -> Response:
    """``handler`` behind the guards of every API route (``gateway.guards``: admission,
    authenticate, the Responses format's key groups, a rate-limit unit); every refusal in the
    Responses error shape."""

    async def run(key: KeyRecord) -> Response:
        if services.settings.responses.store == "off":
            raise turned_off()
        return await handler(services, key, request, segments)

    return await guarded(services, FORMATS[CODEC.name], request, run)


def method_not_allowed(request: Request, allowed: Sequence[str]) -> errors.MethodNotAllowed:
    return errors.MethodNotAllowed(
        f"{request.method} is not allowed on {request.url.path}", headers={"allow": ", ".join(allowed)}
    )


def no_endpoint(request: Request) -> errors.NotFound:
    return errors.NotFound(f"no endpoint {request.method} {request.url.path[:256]}")


async def read_json(services: Services, request: Request) -> Json:
    """The body: at most ``responses.max_object_bytes`` (and ``server.max_body_bytes``), a JSON
    object nested at most ``server.max_json_depth`` levels."""
    server = services.settings.server
    limit = min(server.max_body_bytes, services.settings.responses.max_object_bytes)
    raw = await read_limited(request.stream(), request.headers.get("content-length"), limit)
    if len(raw) > server.offload_body_bytes:
        return await services.offload.run_on_body(_parse_checked, raw, server.max_json_depth)
    return _parse_checked(raw, server.max_json_depth)


def _parse_checked(raw: bytes, depth: int) -> Json:
    body = parse_object(raw)
    if too_deep(body, depth):
        raise errors.InvalidRequest(f"request body is nested too deeply: at most {depth} levels")
    return body


def loads(data: bytes) -> Json:
    value = orjson.loads(data)
    return value if isinstance(value, dict) else {}


def page_request(request: Request, *, default_order: str = "desc") -> PageRequest:
    """The cursor page a list request asks for, as the OpenAI list endpoints page: ``after`` (an
    item id), ``limit`` (1-100, default 20), ``order`` (``asc``/``desc``). The store reads that
    page alone (``storage.item_pages``)."""
    query = request.query_params
    order = query.get("order", default_order)
    if order not in ("asc", "desc"):
        raise errors.InvalidRequest("order must be 'asc' or 'desc'", param="order")
    return PageRequest(_limit(query.get("limit")), order == "asc", query.get("after") or None)


def unknown_cursor(after: str) -> errors.InvalidRequest:
    return errors.InvalidRequest(f"after: no item with id '{after[:128]}' in this list", param="after")


def page_reply(page: ItemPage) -> Response:
    data = [loads(item.body) for item in page.items]
    return json_reply(
        {
            "object": "list",
            "data": data,
            "first_id": data[0].get("id") if data else None,
            "last_id": data[-1].get("id") if data else None,
            "has_more": page.has_more,
        }
    )


def _limit(value: Any) -> int:
    if value is None:
        return 20
    if not isinstance(value, str) or not value.isdigit() or len(value) > 3 or not 1 <= int(value) <= MAX_PAGE:
        raise errors.InvalidRequest(f"limit must be an integer from 1 to {MAX_PAGE}", param="limit")
    return int(value)
