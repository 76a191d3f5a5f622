"""Keeping a Responses answer: the response object, the request's input items and the answer's
output items, owned by the key's account (``storage.responses``).

Only answers that completed (``completed`` or ``incomplete``) are kept; a failed or cut one is
not. Where ``responses.keep_after_answer`` allows it (by default: one process on SQLite), the write
is started when the answer is complete and the answer is sent without waiting for it
(``storage.deferred_responses``; otherwise a whole answer is kept before it is returned and a
streamed one before its final event is sent): every later call on this process that
reads or writes the account's stored state waits for it first, so a client that continues from a
response the moment it has it always finds it. A whole answer whose keeping could still be refused
(it appends to a conversation, or this instance does not know the account has room) is kept before
it is returned, so ``x-modelgate-stored: false`` stays exact. Keeping never fails the request: a
storage error, an answer over ``responses.max_object_bytes`` or an account at
``responses.max_account_bytes`` is logged and the answer is delivered unkept (a whole answer kept
before it is returned says so in ``x-modelgate-stored: false``).
"""

from __future__ import annotations

import functools
import logging

import orjson

from modelgate.config import Settings
from modelgate.formats.jsonutil import Json
from modelgate.formats.responses import state as wire
from modelgate.gateway.exchange import Admitted, KeepHook
from modelgate.gateway.state.request_state import RequestState, state_of
from modelgate.services import Services
from modelgate.storage.base import StorageError
from modelgate.storage.responses import NewResponse, StoredItem, appended_bytes, object_bytes
from modelgate.upstream.base import Provider

log = logging.getLogger("modelgate.state")
DAY = 86_400.0
#: Response header of a whole answer that asked to be stored and was not.
STORED_HEADER = "x-modelgate-stored"
_KEPT_STATUSES = ("completed", "incomplete")
_REFUSED = "the account's stored state is at responses.max_account_bytes, or its conversation was deleted"


def _echo(state_fields: wire.StateFields, response: Json, client_model: str) -> Json:
    """The response object as the gateway keeps (and, when it answered itself, returns) it."""
    out = dict(response)
    out["model"] = client_model
    out["store"] = True
    out["previous_response_id"] = state_fields.previous_response_id
    if state_fields.conversation_id is not None:
        out["conversation"] = {"id": state_fields.conversation_id}
    return out


def _record(
    services: Services, admitted: Admitted, provider: Provider, state: RequestState, response: Json
) -> tuple[NewResponse, int] | None:
    """What keeping ``response`` writes, and the bytes it counts; None when it is not to be kept."""
    response_id = response.get("id")
    if not isinstance(response_id, str) or not response_id or response.get("status") not in _KEPT_STATUSES:
        return None
    config = services.settings.responses
    body = orjson.dumps(_echo(state.fields, response, admitted.model.id))
    inputs = list(state.own_items)
    outputs = [StoredItem(str(i["id"]), orjson.dumps(i), "output") for i in wire.output_items(response)]
    size = object_bytes(body, [*inputs, *outputs])
    if size > config.max_object_bytes:
        log.warning("response %s not stored: %d bytes, over responses.max_object_bytes", response_id, size)
        return None
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
    return record, size + appended_bytes(record)


async def keep(
    services: Services, admitted: Admitted, provider: Provider, response: Json, *, told: bool = True
) -> NewResponse | None:
    """Store one completed response; the record when it was stored (or is being stored).

    Where ``responses.keep_after_answer`` allows it, the write is deferred
    (``storage.deferred_responses``): always for a stream (its final event says nothing of it);
    for a whole answer (``told``: its ``x-modelgate-stored`` tells the outcome) only when the write
    cannot be refused: no conversation (which may be deleted meanwhile) and room known here."""
    state = state_of(admitted)
    if state is None or not state.keep:
        return None
    built = _record(services, admitted, provider, state, response)
    if built is None:
        return None
    record, counted = built
    limit = services.settings.responses.max_account_bytes
    room = services.stored_room
    if after_answer(services.settings) and (
        not told or (record.conversation_id is None and room.surely_fits(record.account_id, counted, limit))
    ):
        room.kept(record.account_id, counted)  # before the write ends: the next request counts it
        services.responses.save_after(record, limit, functools.partial(_kept_later, record.id))
        return record
    try:
        stored = await services.responses.save_response(record, limit)
    except StorageError as exc:
        log.warning("response %s not stored: %s", record.id, exc)
        return None
    if not stored:
        log.warning("response %s not stored: %s", record.id, _REFUSED)
        return None
    room.kept(record.account_id, counted)
    return record


def after_answer(settings: Settings) -> bool:
    """Whether stored answers may be written after they are sent (``responses.keep_after_answer``)."""
    chosen = settings.responses.keep_after_answer
    if chosen == "auto":
        # Only this process can be asked for the response next: it waits for its own writes.
        url = settings.database_url
        return settings.server.workers == 1 and (url is None or url.startswith("sqlite:"))
    return chosen == "on"


def _kept_later(response_id: str, outcome: bool | BaseException) -> None:
    """How a deferred write ended (its answer was sent already)."""
    if outcome is False:
        log.warning("response %s not stored after its answer was sent: %s", response_id, _REFUSED)
    elif outcome is not True:
        log.warning("response %s not stored after its answer was sent: %s", response_id, outcome)


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
    record = await keep(services, admitted, provider, response)
    if record is None:
        headers[STORED_HEADER] = "false"
        return body
    if provider.name in state.keepers:
        return body
    return record.body  # the stored echo, encoded once


def stream_keeper(services: Services, admitted: Admitted, provider: Provider) -> KeepHook | None:
    """The ``keep`` hook of a stream, or None when nothing is to be kept (the relay then does
    no work for it at all)."""
    state = state_of(admitted)
    if state is None or not state.keep:
        return None

    async def hook(response: Json) -> object:
        return await keep(services, admitted, provider, response, told=False) is not None

    return hook
