"""``GET /metrics``: the Prometheus exposition (docs/operations.md#metrics).

On the main port it requires ``Authorization: Bearer <metrics.token>`` when a token is set
(compared in constant time); on the optional loopback port (``metrics.port``) it needs none.
"""

from __future__ import annotations

import hmac

from starlette.requests import Request
from starlette.responses import Response

from modelgate import errors
from modelgate.gateway.replies import codec_for_client, error_reply
from modelgate.services import Services
from modelgate.telemetry.metrics import CONTENT_TYPE


def authorized(header: str | None, token: str) -> bool:
    scheme, _, given = (header or "").partition(" ")
    expected = token.encode()
    # Compared even when the scheme is wrong, so the answer's timing says nothing about the token.
    same = hmac.compare_digest(given.strip().encode(), expected)
    return same and scheme.lower() == "bearer"


async def metrics(services: Services, request: Request) -> Response:
    token = services.settings.metrics.token
    if token and not authorized(request.headers.get("authorization"), token):
        error = errors.AuthenticationFailed(
            "/metrics needs Authorization: Bearer <metrics.token>", headers={"www-authenticate": "Bearer"}
        )
        return error_reply(codec_for_client(request.headers), error, {})
    return Response(await services.telemetry.exposition(), media_type=CONTENT_TYPE)
