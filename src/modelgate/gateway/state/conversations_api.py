"""The Conversations API over the gateway's store (as the openai SDK's ``conversations`` calls it):

``POST /v1/conversations`` (optional ``items``, at most 20, and ``metadata``),
``GET``/``POST``(metadata)/``DELETE /v1/conversations/{id}``,
``GET``/``POST /v1/conversations/{id}/items`` (list paged by ``after``/``limit``/``order``, default
``desc``; add at most 20 items), ``GET``/``DELETE /v1/conversations/{id}/items/{item_id}``.

A conversation named by ``conversation`` on ``POST /v1/responses`` gives its items as the start of
the input, and the response's input and output items are appended to it (``gateway.state``). Items
are kept in the listed form (``formats.responses.state.stored_item``): each gets an id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from modelgate import errors
from modelgate.formats.jsonutil import Json
from modelgate.formats.responses import state as wire
from modelgate.gateway.replies import json_reply
from modelgate.gateway.state.http import (
    loads,
    method_not_allowed,
    no_endpoint,
    not_found,
    page_reply,
    page_request,
    read_json,
    serve,
    unknown_cursor,
)
from modelgate.gateway.state.keep import DAY
from modelgate.services import Services
from modelgate.storage.base import KeyRecord
from modelgate.storage.responses import StoredConversation, StoredItem, UnknownCursor, object_bytes

PREFIX = "/v1/conversations"
#: Items one request may add (as the OpenAI API).
MAX_ITEMS_PER_REQUEST = 20
#: Metadata: at most 16 string pairs, keys up to 64 and values up to 512 characters (OpenAI's rule).
MAX_METADATA = 16


async def handle(services: Services, request: Request) -> Response:
    rest = request.url.path.removeprefix(PREFIX)
    segments = rest.removeprefix("/").split("/") if rest else []
    return await serve(services, request, segments, _route)


async def _route(services: Services, key: KeyRecord, request: Request, segments: Sequence[str]) -> Response:
    method = "GET" if request.method == "HEAD" else request.method
    if not segments:
        if method != "POST":
            raise method_not_allowed(request, ("POST",))
        return await _create(services, key, request)
    conversation_id = segments[0]
    if not conversation_id:
        raise no_endpoint(request)
    if len(segments) == 1:
        if method == "GET":
            return await _retrieve(services, key, conversation_id)
        if method == "POST":
            return await _update(services, key, request, conversation_id)
        if method == "DELETE":
            return await _delete(services, key, conversation_id)
        raise method_not_allowed(request, ("DELETE", "GET", "POST"))
    if segments[1] != "items" or len(segments) > 3:
        raise no_endpoint(request)
    if len(segments) == 2:
        if method == "GET":
            return await _list_items(services, key, request, conversation_id)
        if method == "POST":
            return await _add_items(services, key, request, conversation_id)
        raise method_not_allowed(request, ("GET", "POST"))
    item_id = segments[2]
    if not item_id:
        raise no_endpoint(request)
    if method == "GET":
        return await _get_item(services, key, conversation_id, item_id)
    if method == "DELETE":
        return await _delete_item(services, key, conversation_id, item_id)
    raise method_not_allowed(request, ("DELETE", "GET"))


def _conversation_json(conversation: StoredConversation) -> Json:
    return {
        "id": conversation.id,
        "object": "conversation",
        "created_at": int(conversation.created_at),
        "metadata": loads(conversation.metadata),
    }


def _metadata(body: Json) -> bytes:
    metadata = body.get("metadata")
    if metadata is None:
        return b"{}"
    if (
        not isinstance(metadata, dict)
        or len(metadata) > MAX_METADATA
        or not all(
            isinstance(k, str) and len(k) <= 64 and isinstance(v, str) and len(v) <= 512
            for k, v in metadata.items()
        )
    ):
        raise errors.InvalidRequest(
            f"metadata must be an object of at most {MAX_METADATA} string values (keys up to 64, values "
            "up to 512 characters)",
            param="metadata",
        )
    return orjson.dumps(metadata)


def _items(raw: Any, *, required: bool) -> list[StoredItem]:
    if raw is None and not required:
        return []
    if not isinstance(raw, list) or (required and not raw) or len(raw) > MAX_ITEMS_PER_REQUEST:
        raise errors.InvalidRequest(
            f"items must be an array of 1 to {MAX_ITEMS_PER_REQUEST} input items", param="items"
        )
    out: list[StoredItem] = []
    for position, item in enumerate(raw):
        if not isinstance(item, dict) or wire.is_reference(item):
            raise errors.InvalidRequest(
                "each item must be an input item object (item references are not accepted here)",
                param=f"items[{position}]",
            )
        kind = item.get("type") or ("message" if "role" in item else None)
        if not isinstance(kind, str):
            raise errors.InvalidRequest("each item needs a type (or a role)", param=f"items[{position}]")
        stored = wire.stored_item(item, wire.mint_item_id)
        if not isinstance(stored.get("id"), str) or len(stored["id"]) > 256:
            raise errors.InvalidRequest(
                "an item id must be a string of at most 256 characters", param=f"items[{position}].id"
            )
        out.append(StoredItem(stored["id"], orjson.dumps(stored), "item"))
    return out


def _expiry(services: Services) -> float:
    return services.clock.time() + services.settings.responses.ttl_days * DAY


def _full() -> errors.InvalidRequest:
    return errors.InvalidRequest(
        "this account's stored responses and conversations are at their size limit; delete some first",
        code="stored_state_limit_reached",
    )


async def _create(services: Services, key: KeyRecord, request: Request) -> Response:
    body = await read_json(services, request)
    items = _items(body.get("items"), required=False)
    conversation = StoredConversation(
        wire.new_conversation_id(), key.account_id, _metadata(body), services.clock.time()
    )
    limit = services.settings.responses.max_account_bytes
    if not await services.responses.create_conversation(conversation, items, _expiry(services), limit):
        raise _full()
    services.stored_room.kept(key.account_id, object_bytes(conversation.metadata, items))
    return json_reply(_conversation_json(conversation))


async def _retrieve(services: Services, key: KeyRecord, conversation_id: str) -> Response:
    found = await services.responses.get_conversation(key.account_id, conversation_id, services.clock.time())
    if found is None:
        raise not_found("Conversation", conversation_id)
    return json_reply(_conversation_json(found))


async def _update(services: Services, key: KeyRecord, request: Request, conversation_id: str) -> Response:
    body = await read_json(services, request)
    if "metadata" not in body:
        raise errors.InvalidRequest("metadata is required", param="metadata")
    metadata = _metadata(body)
    limit = services.settings.responses.max_account_bytes
    found = await services.responses.update_conversation(
        key.account_id, conversation_id, metadata, services.clock.time(), limit
    )
    if found is None:
        raise not_found("Conversation", conversation_id)
    if found is False:
        raise _full()
    return json_reply(_conversation_json(found))


async def _delete(services: Services, key: KeyRecord, conversation_id: str) -> Response:
    if not await services.responses.delete_conversation(key.account_id, conversation_id):
        raise not_found("Conversation", conversation_id)
    return json_reply({"id": conversation_id, "object": "conversation.deleted", "deleted": True})


async def _list_items(services: Services, key: KeyRecord, request: Request, conversation_id: str) -> Response:
    wanted = page_request(request)
    try:
        found = await services.responses.conversation_items_page(
            key.account_id, conversation_id, services.clock.time(), wanted
        )
    except UnknownCursor:
        raise unknown_cursor(wanted.after or "") from None
    if found is None:
        raise not_found("Conversation", conversation_id)
    return page_reply(found)


async def _add_items(services: Services, key: KeyRecord, request: Request, conversation_id: str) -> Response:
    body = await read_json(services, request)
    items = _items(body.get("items"), required=True)
    added = await services.responses.add_conversation_items(
        key.account_id,
        conversation_id,
        items,
        services.clock.time(),
        _expiry(services),
        services.settings.responses.max_account_bytes,
    )
    if added is None:
        raise not_found("Conversation", conversation_id)
    if not added:
        raise _full()
    services.stored_room.kept(key.account_id, object_bytes(b"", items))
    data = [loads(i.body) for i in items]
    return json_reply(
        {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"],
            "last_id": data[-1]["id"],
            "has_more": False,
        }
    )


async def _get_item(services: Services, key: KeyRecord, conversation_id: str, item_id: str) -> Response:
    now = services.clock.time()
    found = await services.responses.conversation_item(key.account_id, conversation_id, item_id, now)
    if found is None:
        if await services.responses.get_conversation(key.account_id, conversation_id, now) is None:
            raise not_found("Conversation", conversation_id)
        raise not_found("Item", item_id)
    return json_reply(loads(found.body))


async def _delete_item(services: Services, key: KeyRecord, conversation_id: str, item_id: str) -> Response:
    now = services.clock.time()
    if not await services.responses.delete_conversation_item(key.account_id, conversation_id, item_id):
        if await services.responses.get_conversation(key.account_id, conversation_id, now) is None:
            raise not_found("Conversation", conversation_id)
        raise not_found("Item", item_id)
    found = await services.responses.get_conversation(key.account_id, conversation_id, now)
    if found is None:
        raise not_found("Conversation", conversation_id)
    return json_reply(_conversation_json(found))
