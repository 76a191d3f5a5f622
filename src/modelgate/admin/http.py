"""The admin API's HTTP plumbing: its error type, JSON responses, bounded bodies and a tiny router.

Every admin response is JSON, errors are ``{"error": {"type", "message"}}``, and nothing is cached
(some responses carry a secret shown once). Routing is by path, then by method inside one Starlette
route, so a known path with a wrong method is a JSON 405 rather than Starlette's plain text.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, TypeVar

import orjson
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

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
]
MAX_BODY_BYTES = 64 * 1024
NO_STORE = {"cache-control": "no-store", "x-content-type-options": "nosniff"}
M = TypeVar("M", bound=BaseModel)
Handler = Callable[[Request], Awaitable[Response]]


class AdminError(Exception):
    """An admin API refusal: HTTP status, error type and a message safe to show the caller."""

    def __init__(
        self, status: int, type_: ErrorType, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.message = message
        self.headers = dict(headers or {})


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


def error_response(error: AdminError) -> Response:
    body = {"error": {"type": error.type, "message": error.message}}
    return Response(
        orjson.dumps(body),
        status_code=error.status,
        media_type="application/json",
        headers={**NO_STORE, **error.headers},
    )


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


def route(path: str, handlers: Mapping[str, Handler]) -> Route:
    """One Starlette route per path; methods dispatched here so a wrong method is a JSON 405."""
    allowed = ", ".join(sorted(handlers))

    async def endpoint(request: Request) -> Response:
        handler = handlers.get(request.method)
        try:
            if handler is None:
                raise AdminError(
                    405, "method_not_allowed", f"{request.method} is not allowed here", {"allow": allowed}
                )
            return await handler(request)
        except AdminError as error:
            return error_response(error)

    return Route(path, endpoint, methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"])
