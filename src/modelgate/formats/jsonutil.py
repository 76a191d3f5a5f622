"""Small JSON helpers the wire formats share (they never import each other)."""

from __future__ import annotations

from typing import Any

from modelgate.errors import InvalidRequest

Json = dict[str, Any]


def is_int(value: Any) -> bool:
    """A JSON integer (``bool`` is an ``int`` in Python but not in JSON)."""
    return isinstance(value, int) and not isinstance(value, bool)


def count_of(value: Any) -> int:
    """A token count from the wire: a positive JSON integer, anything else 0."""
    return value if is_int(value) and value > 0 else 0


def as_object(value: Any) -> Json:
    return value if isinstance(value, dict) else {}


def int_field(body: Json, name: str) -> int | None:
    """An optional non-negative integer field the gateway relies on (``InvalidRequest`` otherwise)."""
    value = body.get(name)
    if value is None:
        return None
    if not is_int(value) or value < 0:
        raise InvalidRequest(f"{name}: must be a non-negative integer", param=name)
    return int(value)


def check_stream_flag(body: Json) -> None:
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise InvalidRequest("stream: must be a boolean", param="stream")


def check_messages(body: Json, *, allow_empty: bool) -> None:
    """``messages`` is a list of objects that each name a role."""
    messages = body.get("messages")
    if not isinstance(messages, list) or (not allow_empty and not messages):
        raise InvalidRequest("messages: a list of messages is required", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise InvalidRequest(f"messages.{i}: each message needs a role", param=f"messages.{i}.role")


#: The fields of a web search's approximate user location (Messages and Responses share them).
_LOCATION_FIELDS = ("city", "region", "country", "timezone")


def user_location(location: Any, param: str) -> dict[str, str]:
    """A web search's approximate user location, as both wires write it; always typed
    ``approximate``, unknown fields left out."""
    if not isinstance(location, dict):
        raise InvalidRequest(f"{param}: expected an object", param=param)
    out = {"type": "approximate"}
    for key in _LOCATION_FIELDS:
        value = location.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise InvalidRequest(f"{param}.{key}: expected a string", param=f"{param}.{key}")
        out[key] = value
    return out
