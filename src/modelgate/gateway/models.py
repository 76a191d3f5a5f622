"""``GET /v1/models`` and ``GET /v1/models/{id}``: the key's models, never aliases (DESIGN.md §2).

The item shape is the union both SDKs accept; the list carries ``has_more: false`` (Anthropic
pagination) and ``first_id``/``last_id``. Errors come in the format of the calling SDK family.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from modelgate import errors
from modelgate.gateway import policy
from modelgate.gateway.replies import codec_for_client, error_reply, json_reply
from modelgate.services import Services
from modelgate.storage.base import KeyRecord


def _key(services: Services, request: Request) -> KeyRecord:
    return services.keys.authenticate(request.headers, services.clock.time())


async def list_models(services: Services, request: Request) -> Response:
    try:
        key = _key(services, request)
    except errors.GatewayError as error:
        return error_reply(codec_for_client(request.headers), error, {})
    data = [m.listing() for m in policy.visible_models(services.catalogue, key)]
    return json_reply(
        {
            "object": "list",
            "data": data,
            "has_more": False,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }
    )


async def get_model(services: Services, request: Request, model_id: str) -> Response:
    codec = codec_for_client(request.headers)
    try:
        key = _key(services, request)
    except errors.GatewayError as error:
        return error_reply(codec, error, {})
    for model in policy.visible_models(services.catalogue, key):
        if model.id == model_id:
            return json_reply(model.listing())
    return error_reply(
        codec, errors.NotFound(f"model {model_id} is not available for this key", param="model"), {}
    )
