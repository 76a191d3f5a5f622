"""The messages of Responses WebSocket mode, as pure functions (docs/wire-formats.md, "Responses
over WebSocket").

A client message is ``{"type": "response.create", ...}`` with the fields of a ``POST
/v1/responses`` body at the top level next to ``type``, plus ``generate`` (``false``: a pre-warm,
nothing generated). ``prepare`` turns one into the HTTP body the request path serves: ``type``
and ``generate`` removed, ``stream: true`` (a socket always streams), and a ``previous_response_id``
naming the socket's last response (kept in memory on the connection, ``Link``) replaced by that
response's input and output items inline, so chaining works with ``store: false``.

Everything here is pure so a large message is prepared in a body worker (``modelgate.offload``),
never on the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from modelgate import errors
from modelgate.formats.jsonutil import Json
from modelgate.formats.responses import state as wire

CREATE = "response.create"
#: Sent by Codex after it recorded a response; it asks for nothing, so it is answered with nothing.
PROCESSED = "response.processed"
#: Envelope fields of a ``response.create`` that are not fields of a Responses body.
_ENVELOPE = ("type", "generate")


@dataclass(frozen=True, slots=True)
class Link:
    """The socket's last response, for the next request's ``previous_response_id``."""

    response_id: str
    #: The ``previous_response_id`` left for stored state to resolve (None: the chain is inline).
    previous_response_id: str | None
    #: Its input and output items as a JSON array: the history a request chaining from it gets.
    items: bytes


@dataclass(frozen=True, slots=True)
class Prepared:
    """One client message, read."""

    kind: str
    #: False for a pre-warm (``generate: false``).
    generate: bool = True
    #: The request body to serve (empty when ``error`` is set or the message asks for nothing).
    body: bytes = b""
    #: The request's whole input (chained history first) as a JSON array, for the next ``Link``.
    items: bytes = b"[]"
    #: ``previous_response_id`` as the request path sees it (after the socket's chain resolved).
    previous_response_id: str | None = None
    #: Why the message cannot be served (answered as an ``error`` message).
    error: errors.GatewayError | None = None
    #: ``client_metadata.traceparent`` (Codex sends each request's W3C trace context there).
    traceparent: str | None = None


def prepare(data: bytes, link: Link | None) -> Prepared:
    """Read one text message (``data``: its UTF-8 bytes); see the module docstring."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return Prepared(
            "", error=errors.InvalidRequest(f"message is not valid JSON: {exc}", code="invalid_json")
        )
    if not isinstance(value, dict):
        return Prepared("", error=errors.InvalidRequest("message must be a JSON object", code="invalid_json"))
    kind = value.get("type")
    if kind == PROCESSED:
        return Prepared(PROCESSED)
    if kind != CREATE:
        shown = kind[:64] if isinstance(kind, str) else kind
        message = (
            f"unsupported message type {shown!r}: send response.create messages"
            if kind is not None
            else "type: a message needs a type (response.create)"
        )
        return Prepared(
            str(shown or ""), error=errors.InvalidRequest(message, param="type", code="unknown_event_type")
        )
    try:
        return _create(value, link)
    except errors.GatewayError as error:
        return Prepared(CREATE, error=error)
    except orjson.JSONEncodeError:  # deeper than the encoder goes (far beyond server.max_json_depth)
        too_deep = errors.InvalidRequest("request body is nested too deeply")
        return Prepared(CREATE, error=too_deep)


def _create(value: dict[str, Any], link: Link | None) -> Prepared:
    generate = value.get("generate", True)
    if not isinstance(generate, bool):
        raise errors.InvalidRequest("generate must be a boolean", param="generate")
    if "stream_id" in value:
        raise errors.InvalidRequest(
            "stream_id (several responses at once on one socket) is not supported; send one "
            "response.create at a time, or open another socket",
            param="stream_id",
        )
    stream = value.get("stream")
    if stream is not None and stream is not True:
        raise errors.InvalidRequest("stream: a socket always streams; leave stream out", param="stream")
    body: Json = {k: v for k, v in value.items() if k not in _ENVELOPE}
    body["stream"] = True
    own = _input_items(body.get("input"))
    previous = body.get("previous_response_id")
    history: list[Any] = []
    if link is not None and isinstance(previous, str) and previous == link.response_id:
        history = orjson.loads(link.items)
        body["input"] = history + own
        if link.previous_response_id is None:
            del body["previous_response_id"]
        else:
            body["previous_response_id"] = link.previous_response_id
        previous = link.previous_response_id
    items = orjson.dumps(history + own)
    metadata = value.get("client_metadata")
    traceparent = metadata.get("traceparent") if isinstance(metadata, dict) else None
    return Prepared(
        CREATE,
        generate=generate,
        body=orjson.dumps(body),
        items=items,
        previous_response_id=previous if isinstance(previous, str) else None,
        traceparent=traceparent if isinstance(traceparent, str) and len(traceparent) < 256 else None,
    )


def _input_items(value: Any) -> list[Any]:
    """``input`` as a list of items (a string is one user message); anything else is left for
    the request path to refuse, and chains nothing."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}]
    if isinstance(value, list):
        return list(value)
    return []


def next_link(prepared: Prepared, response: Json) -> Link | None:
    """The link a completed (or pre-warmed) response leaves for the next request, or None when
    it has no id."""
    response_id = response.get("id")
    if not isinstance(response_id, str) or not response_id:
        return None
    outputs = [wire.replay(item) for item in wire.output_items(response)]
    items = prepared.items if not outputs else _concat(prepared.items, orjson.dumps(outputs))
    return Link(response_id, prepared.previous_response_id, items)


def _concat(first: bytes, second: bytes) -> bytes:
    """Two JSON arrays as one, without parsing either."""
    head, tail = first.rstrip()[:-1].rstrip(), second.lstrip()[1:]
    if head == b"[":
        return b"[" + tail
    if tail.lstrip().startswith(b"]"):
        return head + b"]"
    return head + b"," + tail


def error_message(status: int, body: bytes, headers: dict[str, str]) -> str:
    """A refusal as an ``error`` message: the HTTP status, the OpenAI error object and the
    headers an HTTP client would have seen (``retry-after``, rate-limit and request ids), the
    shape Codex and the openai SDK read (``{"type":"error","status":…,"error":{…},"headers":{…}}``)."""
    try:
        parsed = orjson.loads(body)
        error = parsed.get("error") if isinstance(parsed, dict) else None
    except orjson.JSONDecodeError:
        error = None
    if not isinstance(error, dict):
        error = {"type": "server_error", "code": None, "message": "the request failed", "param": None}
    frame = {"type": "error", "status": status, "error": error, "headers": headers}
    return orjson.dumps(frame).decode()


def event_message(kind: str, sequence_number: int, **fields: Any) -> str:
    """One server event as a text message (``type`` and ``sequence_number`` first, as on SSE)."""
    return orjson.dumps({"type": kind, "sequence_number": sequence_number, **fields}).decode()
