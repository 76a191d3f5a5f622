"""Serving a Responses request that refers to stored state, before it is reserved and routed.

``admit`` runs after the request was authorized and rate-limited. It reads the stateful fields
(``formats.responses.state``), resolves ``previous_response_id`` (the whole chain), ``conversation``
and every ``item_reference`` against the store, as the key's account (anything else is a 404 that
reads exactly like a missing id), and builds the *expanded* request: the stored history inline,
no reference left. The expanded body is what the reservation bounds (history the client did not
send still costs input tokens) and what every upstream gets, with one exception decided per
attempt by ``for_provider``:

- An upstream that keeps Responses state itself (``providers[].responses_state = "upstream"``,
  kinds ``openai``/``azure-openai``) gets the client's body unchanged when everything the request
  refers to was answered through that same provider (it holds it too): today's passthrough.
- Any other upstream gets the expanded body; one of the stateful kinds configured with
  ``responses_state = "gateway"`` also gets ``store: false`` (the gateway keeps the state).
- ``prompt`` (stored prompt templates) only an upstream that keeps state can honour: elsewhere a
  400 naming it. ``background`` is a 400 everywhere (nothing here can be polled for it).

Requests that neither store nor refer to anything (``store: false``, Codex's way) are left alone:
the fields are read from the already parsed body and nothing else happens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import orjson

from modelgate import errors
from modelgate.formats import ClientRequest, FormatName
from modelgate.formats.jsonutil import Json
from modelgate.formats.responses import state as wire
from modelgate.gateway.bodies import BodyRules, Facts, analyse, analyse_in_worker
from modelgate.gateway.body import splice_top_level
from modelgate.gateway.exchange import Admitted
from modelgate.gateway.state.request_state import RequestState, state_of
from modelgate.services import Services
from modelgate.storage.base import KeyRecord
from modelgate.storage.responses import StoredItem
from modelgate.upstream.base import Dialect, Provider
from modelgate.upstream.kinds import stores_responses


@dataclass(frozen=True, slots=True)
class Planned:
    """The request's own input, planned: its items, and each one's stored JSON (None for a
    reference, resolved later). Made in a worker for a large body, so nothing proportional to
    the body's size runs on the event loop."""

    plan: wire.InputPlan
    encoded: tuple[bytes | None, ...]


def keepers(services: Services) -> frozenset[str]:
    return frozenset(p.name for p in services.settings.providers if p.keeps_responses)


def _not_found(what: str, ident: str, param: str) -> errors.NotFound:
    # One message for "never existed", "expired", "deleted" and "another account's".
    return errors.NotFound(f"{what} with id '{ident[:256]}' not found.", param=param, code="not_found")


async def admit(services: Services, admitted: Admitted) -> Admitted:
    """The request with stored state resolved (see the module docstring)."""
    config = services.settings.responses
    facts, key = admitted.facts, admitted.key
    fields = wire.state_fields(facts.body)
    if fields.background:
        raise errors.InvalidRequest(
            "background responses are not supported by this gateway; send the request without "
            "background (stream it for long answers)",
            param="background",
        )
    if config.store == "off" or not (fields.store or fields.refers or _may_refer(admitted)):
        return admitted
    planned = await _plan(services, admitted)
    history, holders = await _history(services, key, fields)
    resolved = await _resolve(services, key, planned.plan.references, holders)
    own = _own_items(planned, resolved)
    if fields.store:
        await _check_room(services, key, own)
    holder = next(iter(holders)) if len(holders) == 1 else ""
    state = RequestState(fields, fields.store, own, admitted.raw, admitted.client, holder, keepers(services))
    if not fields.refers and not resolved:
        return replace(admitted, state=state)
    raw, facts = await _expanded(services, admitted, history, planned.plan, resolved)
    if facts.invalid is not None:
        raise facts.invalid
    client = ClientRequest(admitted.client.codec, facts.body, admitted.model.id, facts.request)
    return replace(admitted, raw=raw, facts=facts, client=client, state=state)


def _may_refer(admitted: Admitted) -> bool:
    """Whether a ``store: false`` request may hold an ``item_reference`` (then it is planned)."""
    if admitted.facts.offloaded:
        return b"item_reference" in admitted.raw
    items = admitted.facts.body.get("input")
    return isinstance(items, list) and any(isinstance(i, dict) and wire.is_reference(i) for i in items)


async def _plan(services: Services, admitted: Admitted) -> Planned:
    if admitted.facts.offloaded:
        return await services.offload.run_on_body(plan_in_worker, admitted.raw)
    return plan_body(admitted.facts.body)


def plan_body(body: Json) -> Planned:
    plan = wire.plan_input(body)
    encoded = tuple(None if isinstance(i, wire.Reference) else orjson.dumps(i) for i in plan.items)
    return Planned(plan, encoded)


def plan_in_worker(raw: bytes) -> Planned:
    """``plan_body`` for a large body (runs in a worker process)."""
    return plan_body(orjson.loads(raw))


async def _history(
    services: Services, key: KeyRecord, fields: wire.StateFields
) -> tuple[list[bytes], set[str]]:
    """Stored items (JSON) that precede the request's own input, and who holds them upstream."""
    store, now = services.responses, services.clock.time()
    history: list[bytes] = []
    holders: set[str] = set()
    previous = fields.previous_response_id
    if previous is not None:
        depth = services.settings.responses.max_chain_depth
        chain = await store.response_chain(key.account_id, previous, now, depth)
        if chain is None:
            raise _not_found("Previous response", previous, "previous_response_id")
        for stored in chain:
            history.extend(i.body for i in (*stored.input_items, *stored.output_items))
        holders.add(chain[-1].holder)
    conversation = fields.conversation_id
    if conversation is not None:
        items = await store.conversation_items(key.account_id, conversation, now)
        if items is None:
            raise _not_found("Conversation", conversation, "conversation")
        history.extend(i.body for i in items)
        holders.add("")  # gateway conversations are unknown upstream: always expanded
    return history, holders


async def _resolve(
    services: Services, key: KeyRecord, references: Sequence[wire.Reference], holders: set[str]
) -> dict[str, StoredItem]:
    resolved: dict[str, StoredItem] = {}
    now = services.clock.time()
    for ref in references:
        if ref.id in resolved:
            continue
        found = await services.responses.find_item(key.account_id, ref.id, now)
        if found is None:
            raise _not_found("Item", ref.id, f"input[{ref.position}]")
        resolved[ref.id] = found.item
        holders.add(found.holder)
    return resolved


def _own_items(planned: Planned, resolved: dict[str, StoredItem]) -> tuple[StoredItem, ...]:
    own: list[StoredItem] = []
    for item, encoded in zip(planned.plan.items, planned.encoded, strict=True):
        if isinstance(item, wire.Reference):
            own.append(StoredItem(item.id, resolved[item.id].body, "input"))
        elif encoded is not None:
            own.append(StoredItem(str(item["id"]), encoded, "input"))
    return tuple(own)


async def _check_room(services: Services, key: KeyRecord, own: Sequence[StoredItem]) -> None:
    """Refuse, before anything is spent, a request whose answer could not be stored."""
    config = services.settings.responses
    size = sum(len(item.body) for item in own)
    if size > config.max_object_bytes:
        raise errors.InvalidRequest(
            f"store: this request's input ({size} bytes) is larger than a stored response may be "
            f"({config.max_object_bytes} bytes); send it with store:false",
            param="store",
            code="stored_object_too_large",
        )
    used = await services.stored_room.used(key.account_id)
    if used >= config.max_account_bytes:  # refused only on a count read now
        used = await services.stored_room.used(key.account_id, fresh=True)
    if used >= config.max_account_bytes:
        raise errors.InvalidRequest(
            f"store: this account's stored responses and conversations take {used} bytes, its limit; "
            "delete some (DELETE /v1/responses/{id}, /v1/conversations/{id}) or send store:false",
            param="store",
            code="stored_state_limit_reached",
        )


async def _expanded(
    services: Services,
    admitted: Admitted,
    history: list[bytes],
    plan: wire.InputPlan,
    resolved: dict[str, StoredItem],
) -> tuple[bytes, Facts]:
    server = services.settings.server
    billing = services.settings.billing
    rules = BodyRules(server.max_json_depth, billing.media_rules(), billing.max_web_searches_per_request)
    fmt = admitted.client.codec.name
    references = {ident: item.body for ident, item in resolved.items()}
    stored_bytes = sum(len(h) for h in history) + sum(len(r) for r in references.values())
    if admitted.facts.offloaded or len(admitted.raw) + stored_bytes > server.offload_body_bytes:
        # Large: expanded, parsed and checked in a worker, as any large body is.
        return await services.offload.run_on_body(
            expand_in_worker, admitted.raw, history, plan, references, fmt, rules
        )
    raw = orjson.dumps(wire.expand(admitted.facts.body, _parsed(history), plan, _parsed_map(references)))
    return raw, analyse(raw, fmt, False, rules)


def _parsed(items: list[bytes]) -> list[Json]:
    return [orjson.loads(i) for i in items]


def _parsed_map(items: dict[str, bytes]) -> dict[str, Json]:
    return {k: orjson.loads(v) for k, v in items.items()}


def expand_in_worker(
    raw: bytes,
    history: list[bytes],
    plan: wire.InputPlan,
    references: dict[str, bytes],
    fmt: FormatName,
    rules: BodyRules,
) -> tuple[bytes, Facts]:
    """The expanded body and its analysis, for a large one (runs in a worker process)."""
    body = orjson.loads(raw)
    expanded = orjson.dumps(wire.expand(body, _parsed(history), plan, _parsed_map(references)))
    return expanded, analyse_in_worker(expanded, fmt, False, rules)


def for_provider(admitted: Admitted, provider: Provider, dialect: Dialect) -> Admitted:
    """The request as one attempt on ``provider`` sends it (see the module docstring)."""
    state = state_of(admitted)
    if state is None:
        return admitted
    keeps = provider.name in state.keepers
    if state.fields.prompt and not keeps:
        raise errors.InvalidRequest(
            "prompt (a stored prompt template) is not supported for this model: its upstream keeps no "
            "prompts; send the instructions and input instead",
            param="prompt",
        )
    if keeps and state.original_holder == provider.name:
        # The spans a worker found are the expanded body's, not the original's.
        facts = replace(admitted.facts, spans=None)
        return replace(admitted, raw=state.original_raw, client=state.original_client, facts=facts)
    if not keeps and stores_responses(provider.kind) and dialect == admitted.client.codec.name:
        # An upstream of a stateful kind that must not keep state: the gateway does.
        raw = splice_top_level(
            admitted.raw, {"store": False}, parsed=admitted.client.body, spans=admitted.facts.spans
        )
        return replace(admitted, raw=raw, facts=replace(admitted.facts, spans=None))  # spans moved
    return admitted
