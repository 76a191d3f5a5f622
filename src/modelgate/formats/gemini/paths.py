"""Where a Gemini request keeps what other formats keep in the body or headers: the model and the
method in the path (``/v1beta/models/{model}:generateContent``), the stream flag in the method
and ``alt=sse``, the key in ``x-goog-api-key`` or the ``key`` query parameter.

The ``google-genai`` SDK calls ``/v1beta/…`` by default and ``/v1/…`` when given a base URL; both
versions are served alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from modelgate.formats.gemini.wire import invalid

API_VERSIONS = ("v1beta", "v1")
Method = Literal["generateContent", "streamGenerateContent", "countTokens"]
METHODS: tuple[Method, ...] = ("generateContent", "streamGenerateContent", "countTokens")

#: (HTTP method, path template, what it does) for every route of the format; ``{model}`` is one
#: path segment (the colon verb ends it), ``{version}`` one of ``API_VERSIONS``.
ROUTES: tuple[tuple[str, str, str], ...] = (
    ("POST", "/{version}/models/{model}:generateContent", "generateContent"),
    ("POST", "/{version}/models/{model}:streamGenerateContent", "streamGenerateContent"),
    ("POST", "/{version}/models/{model}:countTokens", "countTokens"),
    ("GET", "/{version}/models", "listModels"),
    ("GET", "/{version}/models/{model}", "getModel"),
)

#: The header the SDK sends the key in, and the query parameter curl examples use.
KEY_HEADER = "x-goog-api-key"
KEY_PARAMETER = "key"

_METHOD_BY_VERB: Mapping[str, Method] = MappingProxyType({m: m for m in METHODS})
_CALL = re.compile(r"/(v1beta|v1)/models/([^/:]+):([A-Za-z]+)")
#: A method call under ``/v1/models/``: a colon after the model, whatever the model part holds
#: (a ``%2F`` arrives decoded) and whatever the method (unknown or empty ones are refused here).
_ANY_CALL = re.compile(r"/v1/models/.*:.*", re.DOTALL)
_KEY_IN_QUERY = re.compile(r"(^|&)key=[^&]*")


@dataclass(frozen=True, slots=True)
class Call:
    version: str
    model: str
    method: Method


def parse_call(path: str) -> Call | None:
    """``/v1beta/models/aria:generateContent`` -> its parts; None for paths of another shape."""
    match = _CALL.fullmatch(path)
    if match is None:
        return None
    version, model, verb = match.groups()
    method = _METHOD_BY_VERB.get(verb)
    return Call(version, model, method) if method is not None else None


def wants_stream(method: Method, query: Mapping[str, str]) -> bool:
    """Whether the answer streams. ``streamGenerateContent`` streams Server-Sent Events with
    ``alt=sse`` (what the SDK always asks for); without it Google streams one JSON array, which
    this gateway does not: a clear 400 rather than a format the client did not expect."""
    if method != "streamGenerateContent":
        return False
    if query.get("alt") != "sse":
        raise invalid(
            "streamGenerateContent: only Server-Sent Events are supported; add ?alt=sse to the URL",
            "alt",
        )
    return True


def check_query(route_streams: bool, query: Mapping[str, str]) -> None:
    """What a route needs of the query string: ``alt=sse`` on the stream route (``wants_stream``)."""
    if route_streams:
        wants_stream("streamGenerateContent", query)


def api_key(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The client's key: the ``x-goog-api-key`` header, else the ``key`` query parameter."""
    key = headers.get(KEY_HEADER)
    if key:
        return key.strip()
    key = query.get(KEY_PARAMETER)
    return key.strip() if key else None


def is_gemini_client(headers: Mapping[str, str], query: Mapping[str, str]) -> bool:
    """Whether a request to a path other formats share (``GET /v1/models``, an unknown ``/v1``
    path) comes from a Gemini client: it sends its key the Gemini way."""
    return KEY_HEADER in headers or KEY_PARAMETER in query


def owns_path(path: str) -> bool:
    """Whether ``path`` can only be meant for this format, so a refusal on it (unknown method,
    wrong HTTP verb) is rendered in Google's shape: all of ``/v1beta``, and ``models/…:verb``
    calls under ``/v1`` (no other format's client sends a colon verb there)."""
    return path.startswith("/v1beta/") or path == "/v1beta" or _ANY_CALL.fullmatch(path) is not None


def redact_query(query_string: str) -> str:
    """A query string fit to log: the ``key`` parameter's value replaced."""
    return _KEY_IN_QUERY.sub(lambda m: m.group(1) + "key=REDACTED", query_string)
