"""The admin API's HTTP plumbing: its error type and shape, JSON responses, bounded bodies and its
route declarations.

Every admin response is JSON, errors are ``{"error": {"type", "message"}}``, and nothing is cached
(some responses carry a secret shown once). An admin refusal is an ``AdminError``, a
``GatewayError`` like every refusal, so the one boundary of the route table (``server.app``)
renders it, in this shape (``render_error``). The routes declared here (``Route``: a path and a
handler per method) are compiled into that one table, with their guards, by ``server.app``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import orjson
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from modelgate.errors import GatewayError

ErrorType = Literal[
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "not_found_error",
    "method_not_allowed",
    "conflict_error",
    "request_too_large",
    "upstream_error",
    "rate_limit_error",
    "unavailable_error",
    "api_error",
]
MAX_BODY_BYTES = 64 * 1024
NO_STORE = {"cache-control": "no-store", "x-content-type-options": "nosniff"}
M = TypeVar("M", bound=BaseModel)
Handler = Callable[[Request], Awaitable[Response]]


#: A refusal's admin type by its status (``AdminError``), and by its kind (any other
#: ``GatewayError`` reaching an admin route: the guards', the database's).
_KIND_OF_STATUS = {
    400: "invalid_request",
    401: "authentication",
    403: "permission",
    404: "not_found",
    405: "method_not_allowed",
    413: "request_too_large",
    429: "rate_limit",
}
_TYPE_OF_KIND: dict[str, ErrorType] = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "permission": "permission_error",
    "not_found": "not_found_error",
    "method_not_allowed": "method_not_allowed",
    "request_too_large": "request_too_large",
    "rate_limit": "rate_limit_error",
    "upstream_error": "upstream_error",
    "unavailable": "unavailable_error",
    "overloaded": "unavailable_error",
}


class AdminError(GatewayError):
    """An admin API refusal: HTTP status, error type and a message safe to show the caller."""

    def __init__(
        self, status: int, type_: ErrorType, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message, headers=dict(headers or {}), status=status)
        self.kind = _KIND_OF_STATUS.get(status, "invalid_request" if status < 500 else "api_error")
        self.type: ErrorType = type_

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.status, self.type, self.message, self.headers))


def bad_request(message: str) -> AdminError:
    return AdminError(400, "invalid_request_error", message)


def not_found(what: str, ident: object) -> AdminError:
    """The one 404 for "missing" and "not yours": same status, body shape and message form."""
    return AdminError(404, "not_found_error", f"{what} {ident} not found")


def conflict(message: str) -> AdminError:
    return AdminError(409, "conflict_error", message)


def forbidden(message: str) -> AdminError:
    return AdminError(403, "permission_error", message)


def json_response(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json", headers=NO_STORE)


def render_error(error: GatewayError, headers: Mapping[str, str] | None = None) -> Response:
    """Any refusal in the admin API's shape: an ``AdminError`` with its own type, another
    ``GatewayError`` with the type of its kind."""
    type_ = error.type if isinstance(error, AdminError) else _TYPE_OF_KIND.get(error.kind, "api_error")
    body = {"error": {"type": type_, "message": error.message}}
    return Response(
        orjson.dumps(body),
        status_code=error.http_status(),
        media_type="application/json",
        headers={**NO_STORE, **(headers or {}), **error.headers},
    )


def error_response(error: AdminError) -> Response:
    return render_error(error)


def _field_of(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "body"


async def parse_body(request: Request, model: type[M]) -> M:
    """The request body validated against ``model`` (unknown fields are refused with 400)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise AdminError(413, "request_too_large", f"request body exceeds {MAX_BODY_BYTES} bytes")
    parts: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise AdminError(413, "request_too_large", f"request body exceeds {MAX_BODY_BYTES} bytes")
        parts.append(chunk)
    raw = b"".join(parts).strip() or b"{}"
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        if first["type"] == "json_invalid":
            raise bad_request("request body is not valid JSON") from None
        if first["type"] == "model_type":
            raise bad_request("request body must be a JSON object") from None
        raise bad_request(f"{_field_of(first['loc'])}: {first['msg']}") from None


def query_int(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    # ASCII only: str.isdigit() also accepts "²" and "٣", which int() then refuses.
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
        raise bad_request(f"{name}: must be a positive integer (ASCII digits)")
    return int(raw)


def path_int(request: Request, name: str, what: str) -> int:
    """An integer id from the path; anything else is simply not found."""
    raw = str(request.path_params[name])
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
        raise not_found(what, raw[:40])
    return int(raw)


@dataclass(frozen=True, slots=True)
class Route:
    """One admin path (``{name}`` parts are one path segment each) and its handler per method;
    ``server.app`` puts it in the one route table behind the guards (a handler made by
    ``AdminAPI.authed`` runs after the admin authentication guard)."""

    path: str
    handlers: Mapping[str, Handler]

    @property
    def methods(self) -> frozenset[str]:
        return frozenset(self.handlers)


def route(path: str, handlers: Mapping[str, Handler]) -> Route:
    """One route per path; a method it does not list is the table's 405 in the admin shape."""
    return Route(path, dict(handlers))
