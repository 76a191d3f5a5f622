"""Building the gateway's own JSON replies: bodies, and errors rendered in a wire format."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from starlette.responses import Response

from modelgate import errors
from modelgate.formats import Codec, format_for_client, format_for_path, ids

JSON = "application/json"


def json_reply(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type=JSON, headers=dict(headers or {}))


def error_reply(codec: Codec, error: errors.GatewayError, headers: Mapping[str, str]) -> Response:
    """``error`` in ``codec``'s format, with the request id headers in ``headers`` and the error's own
    (a refusal raised to a boundary carries its request's id in its own headers)."""
    request_id = headers.get("request-id") or error.headers.get("request-id") or ids.new_request_id()
    out = {"request-id": request_id, "x-request-id": request_id, **headers, **error.headers}
    if error.spec.retryable is False:
        out.setdefault("x-should-retry", "false")
    return Response(
        codec.render_error(error, request_id),
        status_code=codec.http_status(error),
        media_type=JSON,
        headers=out,
    )


def codec_for_path(path: str, headers: Mapping[str, str], query: Mapping[str, str] | None = None) -> Codec:
    """The wire format of a refusal on ``path`` that no endpoint rendered (``formats.format_for_path``)."""
    return format_for_path(path, headers, query).codec


def codec_for_client(headers: Mapping[str, str]) -> Codec:
    """For endpoints several formats' clients call (``formats.format_for_client``)."""
    return format_for_client(headers).codec
