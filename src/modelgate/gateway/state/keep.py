"""Keeping a Responses answer: the response object, the request's input items and the answer's
output items, owned by the key's account (``storage.responses``).

Only answers that completed (``completed`` or ``incomplete``) are kept; a failed or cut one is
not. A whole answer is kept before it is returned; a streamed one before its final event is sent
(``relay.StreamResponse``'s ``keep`` hook), so a client that continues from a response the moment
it has it always finds it. Keeping never fails the request: a storage error, an answer over
``responses.max_object_bytes`` or an account at ``responses.max_account_bytes`` is logged and the
answer is delivered unkept (a whole answer says so in ``x-modelgate-stored: false``).
"""

from __future__ import annotations

import logging

import orjson

from modelgate.formats.jsonutil import Json
from modelgate.formats.responses import state as wire
from modelgate.gateway.exchange import Admitted, KeepHook
from modelgate.gateway.state.request_state import state_of
from modelgate.services import Services
from modelgate.storage.base import StorageError
from modelgate.storage.responses import NewResponse, StoredItem, appended_bytes, object_bytes
from modelgate.upstream.base import Provider

log = logging.getLogger("modelgate.state")
DAY = 86_400.0
#: Response header of a whole answer that asked to be stored and was not.
STORED_HEADER = "x-modelgate-stored"
_KEPT_STATUSES = ("completed", "incomplete")


def _echo(state_fields: wire.StateFields, response: Json, client_model: str) -> Json:
    """The response object as the gateway keeps (and, when it answered itself, returns) it."""
    out = dict(response)
    out["model"] = client_model
    out["store"] = True
    out["previous_response_id"] = state_fields.previous_response_id
    if state_fields.conversation_id is not None:
        out["conversation"] = {"id": state_fields.conversation_id}
    return out


async def keep(services: Services, admitted: Admitted, provider: Provider, response: Json) -> bool:
    """Store one completed response; True when it was stored."""
    state = state_of(admitted)
    if state is None or not state.keep:
        return False
    response_id = response.get("id")
    if not isinstance(response_id, str) or not response_id or response.get("status") not in _KEPT_STATUSES:
        return False
    config = services.settings.responses
    body = orjson.dumps(_echo(state.fields, response, admitted.model.id))
    inputs = list(state.own_items)
    outputs = [StoredItem(str(i["id"]), orjson.dumps(i), "output") for i in wire.output_items(response)]
    size = object_bytes(body, [*inputs, *outputs])
    if size > config.max_object_bytes:
        log.warning("response %s not stored: %d bytes, over responses.max_object_bytes", response_id, size)
        return False
    now = services.clock.time()
    record = NewResponse(
        id=response_id,
        account_id=admitted.key.account_id,
        key_id=admitted.key.id,
        body=body,
        input_items=inputs,
        output_items=outputs,
        previous_id=state.fields.previous_response_id,
        conversation_id=state.fields.conversation_id,
        # An upstream that keeps state was sent store:true and now holds this response too.
        holder=provider.name if provider.name in state.keepers else "",
        created_at=now,
        expires_at=now + config.ttl_days * DAY,
    )
    try:
        stored = await services.responses.save_response(record, config.max_account_bytes)
    except StorageError as exc:
        log.warning("response %s not stored: %s", response_id, exc)
        return False
    if stored:
        services.stored_room.kept(record.account_id, size + appended_bytes(record))
    else:
        log.warning(
            "response %s not stored: the account's stored state is at responses.max_account_bytes, "
            "or its conversation was deleted",
            response_id,
        )
    return stored


async def keep_whole(
    services: Services, admitted: Admitted, provider: Provider, body: bytes, headers: dict[str, str]
) -> bytes:
    """Keep a whole answer; the body to return (the gateway's own answers gain the stored echo:
    ``store``, ``previous_response_id``, ``conversation``; an upstream's stay byte for byte)."""
    state = state_of(admitted)
    if state is None or not state.keep:
        return body
    response = orjson.loads(body)
    if not isinstance(response, dict):
        return body
    if not await keep(services, admitted, provider, response):
        headers[STORED_HEADER] = "false"
        return body
    if provider.name in state.keepers:
        return body
    return orjson.dumps(_echo(state.fields, response, admitted.model.id))


def stream_keeper(services: Services, admitted: Admitted, provider: Provider) -> KeepHook | None:
    """The ``keep`` hook of a stream, or None when nothing is to be kept (the relay then does
    no work for it at all)."""
    state = state_of(admitted)
    if state is None or not state.keep:
        return None

    async def hook(response: Json) -> object:
        return await keep(services, admitted, provider, response)

    return hook
