"""The few request fields the gateway itself relies on, checked per wire format.

Passthrough relays everything else untouched, so only what the gateway reads is validated here
(the upstream judges the rest); each failure names the field.
"""

from __future__ import annotations

from typing import Any

from modelgate.errors import InvalidRequest, WireFormat


def _int_field(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidRequest(f"{name}: must be a non-negative integer", param=name)
    return value


def validate(fmt: WireFormat, endpoint: str, body: dict[str, Any]) -> None:
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise InvalidRequest("stream: must be a boolean", param="stream")
    if fmt == "responses":
        if not isinstance(body.get("input"), str | list):
            raise InvalidRequest("input: a string or a list of input items is required", param="input")
        _int_field(body, "max_output_tokens")
        return
    messages = body.get("messages")
    if not isinstance(messages, list) or (fmt == "chat" and not messages):
        raise InvalidRequest("messages: a list of messages is required", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise InvalidRequest(f"messages.{i}: each message needs a role", param=f"messages.{i}.role")
    if fmt == "messages" and endpoint != "count_tokens":
        if "max_tokens" not in body:
            raise InvalidRequest("max_tokens: field required", param="max_tokens")
        _int_field(body, "max_tokens")
    if fmt == "chat":
        _int_field(body, "max_tokens")
        _int_field(body, "max_completion_tokens")
        n = body.get("n")
        if n is not None and n != 1:
            raise InvalidRequest("n: only n=1 is supported", param="n")


def requested_max_tokens(fmt: WireFormat, body: dict[str, Any]) -> int | None:
    if fmt == "messages":
        return _int_field(body, "max_tokens")
    if fmt == "chat":
        explicit = _int_field(body, "max_completion_tokens")
        return explicit if explicit is not None else _int_field(body, "max_tokens")
    return _int_field(body, "max_output_tokens")
