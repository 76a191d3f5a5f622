"""``GET /v1/models`` and ``GET /v1/models/{id}``: the key's models, never aliases (docs/architecture.md §2).

The item shape is the union both SDKs accept; the list carries ``has_more: false`` (Anthropic
pagination) and ``first_id``/``last_id``. A format with a list shape of its own
(``Format.models_page``, ``Format.model_object``) answers in it on its own paths
(``Format.model_paths``) and on these shared ones when it claims the client (its key header or
query parameter). Behind the guards of every API route (``gateway.guards``), the key only; errors
come in the format of the calling SDK family.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from modelgate import errors
from modelgate.formats import Format, format_for_client, format_for_path
from modelgate.gateway import policy
from modelgate.gateway.guards import KEY_ONLY, guarded
from modelgate.gateway.replies import json_reply
from modelgate.services import Services
from modelgate.storage.base import KeyRecord


async def list_models(services: Services, request: Request, fmt: Format | None = None) -> Response:
    """The key's models in ``fmt``'s shape (default: the calling client's format)."""
    shape = fmt or format_for_client(request.headers, request.query_params)

    async def run(key: KeyRecord) -> Response:
        visible = policy.visible_models(services.catalogue, key)
        if shape.models_page is not None:
            return json_reply(shape.models_page(visible, request.query_params))
        data = [m.listing() for m in visible]
        return json_reply(
            {
                "object": "list",
                "data": data,
                "has_more": False,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
            }
        )

    return await guarded(services, shape, request, run, KEY_ONLY)


async def get_model(
    services: Services, request: Request, model_id: str, fmt: Format | None = None
) -> Response:
    # A path only one format's clients call (a colon verb under /v1/models/) is answered in it.
    shape = fmt or format_for_path(request.url.path, request.headers, request.query_params)

    async def run(key: KeyRecord) -> Response:
        for model in policy.visible_models(services.catalogue, key):
            if model.id == model_id:
                if shape.model_object is not None:
                    return json_reply(shape.model_object(model))
                return json_reply(model.listing())
        shown = model_id[: policy.MAX_MODEL_NAME]
        raise errors.NotFound(f"model {shown} is not available for this key", param="model")

    return await guarded(services, shape, request, run, KEY_ONLY)
