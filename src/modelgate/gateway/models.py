"""``GET /v1/models`` and ``GET /v1/models/{id}``: the key's models, never aliases (docs/architecture.md §2).

The item shape is the union both SDKs accept; the list carries ``has_more: false`` (Anthropic
pagination) and ``first_id``/``last_id``. Behind the guards of every API route (``gateway.guards``),
the key only; errors come in the format of the calling SDK family.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from modelgate import errors
from modelgate.formats import format_for_client
from modelgate.gateway import policy
from modelgate.gateway.guards import KEY_ONLY, guarded
from modelgate.gateway.replies import json_reply
from modelgate.services import Services
from modelgate.storage.base import KeyRecord


async def list_models(services: Services, request: Request) -> Response:
    async def run(key: KeyRecord) -> Response:
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

    return await guarded(services, format_for_client(request.headers), request, run, KEY_ONLY)


async def get_model(services: Services, request: Request, model_id: str) -> Response:
    async def run(key: KeyRecord) -> Response:
        for model in policy.visible_models(services.catalogue, key):
            if model.id == model_id:
                return json_reply(model.listing())
        raise errors.NotFound(f"model {model_id} is not available for this key", param="model")

    return await guarded(services, format_for_client(request.headers), request, run, KEY_ONLY)
