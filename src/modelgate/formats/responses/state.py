"""What a Responses request asks of stored state, and the pure steps that serve it
(docs/reference/wire-formats.md §3.2, §3.3, §3.7): reading the stateful fields, turning input into stored items, and expanding a
request whose history lives in the store into one that carries it inline.

Items are stored in the form the API lists them (``GET /v1/responses/{id}/input_items``,
conversation items): every item has an ``id`` and a ``status``; message content is a list of
parts (a string becomes one ``input_text`` part, or ``output_text`` for the assistant). Replaying a
stored item as input drops what input does not take (a message's ``id``), so every upstream and
the gateway's own decoder accept it.

Nothing here touches storage or the network; the gateway (``gateway.state``) does the lookups and
hands the results in. All functions are pure, so a large body's work can run in a worker process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from modelgate import errors
from modelgate.formats.ids import timed_hex
from modelgate.formats.jsonutil import Json

#: Fields whose meaning lives in stored state; what the gateway reads before anything else.
STATE_FIELDS = ("previous_response_id", "conversation", "store", "background", "prompt")


@dataclass(frozen=True, slots=True)
class StateFields:
    previous_response_id: str | None
    conversation_id: str | None
    #: ``store`` as the request means it (true unless it says false).
    store: bool
    background: bool
    #: A stored prompt template is named (only an upstream that keeps prompts can honour it).
    prompt: bool

    @property
    def refers(self) -> bool:
        return self.previous_response_id is not None or self.conversation_id is not None


def state_fields(body: Mapping[str, Any]) -> StateFields:
    """The stateful fields, checked (a 400 naming the field for a value of the wrong shape)."""
    previous = body.get("previous_response_id")
    if previous is not None and (not isinstance(previous, str) or not previous):
        raise errors.InvalidRequest(
            "previous_response_id must be a response id string", param="previous_response_id"
        )
    conversation = body.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
        if not isinstance(conversation, str) or not conversation:
            raise errors.InvalidRequest(
                "conversation.id must be a conversation id string", param="conversation"
            )
    elif conversation is not None and (not isinstance(conversation, str) or not conversation):
        raise errors.InvalidRequest(
            "conversation must be a conversation id or {id: ...}", param="conversation"
        )
    if previous is not None and conversation is not None:
        raise errors.InvalidRequest(
            "previous_response_id and conversation cannot be used together", param="previous_response_id"
        )
    store = body.get("store")
    if store is not None and not isinstance(store, bool):
        raise errors.InvalidRequest("store must be a boolean", param="store")
    background = body.get("background")
    if background is not None and not isinstance(background, bool):
        raise errors.InvalidRequest("background must be a boolean", param="background")
    return StateFields(
        previous, conversation, store is not False, background is True, body.get("prompt") is not None
    )


@dataclass(frozen=True, slots=True)
class Reference:
    """An ``item_reference`` at ``position`` of the input, to be replaced by the stored item."""

    id: str
    position: int


@dataclass(frozen=True, slots=True)
class InputPlan:
    """The request's own input as stored items (references left to resolve)."""

    items: tuple[Json | Reference, ...]

    @property
    def references(self) -> tuple[Reference, ...]:
        return tuple(i for i in self.items if isinstance(i, Reference))


def plan_input(body: Mapping[str, Any], mint: Callable[[str], str] | None = None) -> InputPlan:
    """The input items in stored form, with ids minted where the client sent none."""
    new_id = mint or mint_item_id
    raw = body.get("input")
    if isinstance(raw, str):
        return InputPlan((stored_item({"role": "user", "content": raw}, new_id),))
    if not isinstance(raw, list):
        raise errors.InvalidRequest("input must be a string or an array of items", param="input")
    out: list[Json | Reference] = []
    for position, item in enumerate(raw):
        if not isinstance(item, dict):
            raise errors.InvalidRequest("each input item must be an object", param=f"input[{position}]")
        if is_reference(item):
            ref = item.get("id")
            if not isinstance(ref, str) or not ref:
                raise errors.InvalidRequest("item_reference needs an item id", param=f"input[{position}].id")
            out.append(Reference(ref, position))
        else:
            out.append(stored_item(item, new_id))
    return InputPlan(tuple(out))


def is_reference(item: Mapping[str, Any]) -> bool:
    """``{"type": "item_reference", "id": …}``, or the SDK's typeless ``{"id": …}``."""
    kind = item.get("type")
    return kind == "item_reference" or (kind is None and "role" not in item and "id" in item)


def mint_item_id(kind: str) -> str:
    prefix = {"message": "msg_", "function_call": "fc_", "function_call_output": "fco_"}.get(kind, "item_")
    return prefix + timed_hex(48)  # time first: stored items' id index grows at its end


def stored_item(item: Mapping[str, Any], mint: Callable[[str], str]) -> Json:
    """An input item in the form it is listed: with ``id`` and ``status``; message content as parts."""
    out: Json = dict(item)
    kind = out.get("type") or ("message" if "role" in out else "item")
    out["type"] = kind
    if kind == "message":
        assistant = out.get("role") == "assistant"
        content = out.get("content")
        if isinstance(content, str):
            part: Json = (
                {"type": "output_text", "text": content, "annotations": []}
                if assistant
                else {
                    "type": "input_text",
                    "text": content,
                }
            )
            out["content"] = [part]
        elif assistant and isinstance(content, list):
            out["content"] = [_output_part(p) for p in content]
    if not isinstance(out.get("id"), str) or not out["id"]:
        out["id"] = mint(kind)
    out.setdefault("status", "completed")
    return out


def _output_part(part: Any) -> Any:
    if isinstance(part, dict) and part.get("type") in ("output_text", "input_text", "text"):
        return {**part, "type": "output_text", "annotations": part.get("annotations") or []}
    return part


def output_items(response: Mapping[str, Any]) -> list[Json]:
    """The output items of a response object, each with an id."""
    out: list[Json] = []
    for item in response.get("output") or ():
        if isinstance(item, dict):
            out.append(
                item
                if isinstance(item.get("id"), str)
                else {**item, "id": mint_item_id(str(item.get("type")))}
            )
    return out


def replay(item: Mapping[str, Any]) -> Json:
    """A stored item as an input item (message input items take no ``id``)."""
    if item.get("type") == "message" and item.get("role") != "assistant":
        return {k: v for k, v in item.items() if k != "id"}
    return dict(item)


def expand(
    body: Mapping[str, Any], history: Sequence[Json], plan: InputPlan, resolved: Mapping[str, Json]
) -> Json:
    """The request with its stored history inline: ``history`` first, then its own input with
    each reference replaced by the stored item; ``previous_response_id`` and ``conversation`` go
    (their meaning is now in ``input``). Every other field stays as the client sent it."""
    out: Json = {k: v for k, v in body.items() if k not in ("previous_response_id", "conversation")}
    own = [replay(resolved[i.id]) if isinstance(i, Reference) else replay(i) for i in plan.items]
    out["input"] = [replay(h) for h in history] + own
    return out


def new_conversation_id() -> str:
    return "conv_" + timed_hex(48)


__all__ = [
    "STATE_FIELDS",
    "InputPlan",
    "Reference",
    "StateFields",
    "expand",
    "is_reference",
    "output_items",
    "plan_input",
    "replay",
    "state_fields",
    "stored_item",
]
