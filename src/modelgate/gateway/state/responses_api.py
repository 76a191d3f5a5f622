"""``GET``/``DELETE /v1/responses/{id}``, ``GET /v1/responses/{id}/input_items`` and
``POST /v1/responses/{id}/cancel`` over the responses the gateway keeps (``gateway.state.keep``).

- A response reads back as the client received it (``store: true``, its
  ``previous_response_id``), whoever answered it.
- ``input_items`` lists everything the response was given as input, as the OpenAI API does: the
  input and output items of the responses it continued (``previous_response_id``, oldest first),
  then its own input (a conversation's earlier items are not repeated). Paged by ``after``/
  ``limit``/``order`` (default ``desc``).
- ``cancel`` applies to background responses, which this gateway does not run: a 400 for a
  response of the key's account, a 404 otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.requests import Request
from starlette.responses import Response

from modelgate import errors
from modelgate.gateway.replies import json_reply
from modelgate.gateway.state.http import (
    method_not_allowed,
    no_endpoint,
    not_found,
    page_reply,
    page_request,
    serve,
    unknown_cursor,
)
from modelgate.services import Services
from modelgate.storage.base import KeyRecord
from modelgate.storage.responses import UnknownCursor

PREFIX = "/v1/responses/"


async def handle(services: Services, request: Request) -> Response:
    segments = request.url.path.removeprefix(PREFIX).split("/")
    return await serve(services, request, segments, _route)


async def _route(services: Services, key: KeyRecord, request: Request, segments: Sequence[str]) -> Response:
    method = "GET" if request.method == "HEAD" else request.method
    if len(segments) == 1 and segments[0]:
        if method == "GET":
            return await _retrieve(services, key, request, segments[0])
        if method == "DELETE":
            return await _delete(services, key, segments[0])
        raise method_not_allowed(request, ("DELETE", "GET"))
    if len(segments) == 2 and segments[0] and segments[1] == "input_items":
        if method != "GET":
            raise method_not_allowed(request, ("GET",))
        return await _input_items(services, key, request, segments[0])
    if len(segments) == 2 and segments[0] and segments[1] == "cancel":
        if method != "POST":
            raise method_not_allowed(request, ("POST",))
        return await _cancel(services, key, segments[0])
    raise no_endpoint(request)


async def _retrieve(services: Services, key: KeyRecord, request: Request, response_id: str) -> Response:
    if request.query_params.get("stream") in ("true", "1", "True"):
        raise errors.InvalidRequest(
            "stream: replaying a stored response as a stream is not supported; fetch it whole",
            param="stream",
        )
    stored = await services.responses.get_response(key.account_id, response_id, services.clock.time())
    if stored is None:
        raise not_found("Response", response_id)
    return Response(stored.body, media_type="application/json")


async def _delete(services: Services, key: KeyRecord, response_id: str) -> Response:
    if not await services.responses.delete_response(key.account_id, response_id):
        raise not_found("Response", response_id)
    return json_reply({"id": response_id, "object": "response", "deleted": True})


async def _input_items(services: Services, key: KeyRecord, request: Request, response_id: str) -> Response:
    wanted = page_request(request)
    depth = services.settings.responses.max_chain_depth
    try:
        found = await services.responses.response_input_items_page(
            key.account_id, response_id, services.clock.time(), depth, wanted
        )
    except UnknownCursor:
        raise unknown_cursor(wanted.after or "") from None
    if found is None:
        raise not_found("Response", response_id)
    return page_reply(found)


async def _cancel(services: Services, key: KeyRecord, response_id: str) -> Response:
    if await services.responses.get_response(key.account_id, response_id, services.clock.time()) is None:
        raise not_found("Response", response_id)
    raise errors.InvalidRequest(
        "Only background responses can be cancelled; this gateway does not run background responses.",
        param="response_id",
    )
