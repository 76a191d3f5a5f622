"""Building the gateway's own JSON replies: bodies, and errors rendered in a wire format."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from starlette.responses import Response

from modelgate import errors
from modelgate.formats import CODECS, Codec, ids

JSON = "application/json"


def json_reply(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type=JSON, headers=dict(headers or {}))


def error_reply(codec: Codec, error: errors.GatewayError, headers: Mapping[str, str]) -> Response:
    """``error`` in ``codec``'s format, with the request id headers in ``headers`` and the error's own."""
    request_id = headers.get("request-id") or ids.new_request_id()
    out = {"request-id": request_id, "x-request-id": request_id, **headers, **error.headers}
    if error.spec.retryable is False:
        out.setdefault("x-should-retry", "false")
    return Response(
        codec.render_error(error, request_id),
        status_code=error.status_for(codec.name),
        media_type=JSON,
        headers=out,
    )


def codec_for_path(path: str, headers: Mapping[str, str]) -> Codec:
    """The wire format of a refusal on ``path`` that no endpoint rendered (unknown paths, wrong
    methods, the HTTP layer's own refusals): Messages under ``/v1/messages``, else by client."""
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return CODECS["messages"]
    return codec_for_client(headers)


def codec_for_client(headers: Mapping[str, str]) -> Codec:
    """For endpoints both SDK families call (``/v1/models``, unknown ``/v1`` paths): Anthropic
    clients send a version header or ``x-api-key``."""
    if "anthropic-version" in headers or "alpha-version" in headers or "x-api-key" in headers:
        return CODECS["messages"]
    return CODECS["chat"]
