"""``Format``: everything the gateway knows about one wire format, declared by its package.

A format package exports one ``FORMAT``; ``formats.registry.FORMATS`` lists them, and everything
that used to name formats by hand is derived from it: the codecs by name, the model routes, the
credential headers, the translation preference order, error rendering (``Codec.render_error``
and ``Codec.http_status``, over the core's error kinds), which key groups a format refuses, and
which format answers a refusal on a path nobody routed. Nothing outside a format's package
branches on its name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from modelgate.catalogue import Model
from modelgate.formats.base import Codec
from modelgate.formats.jsonutil import Json
from modelgate.formats.sse import model_rewrites

_NO_PARAMS: Mapping[str, str] = MappingProxyType({})


def input_tokens_answer(count: int) -> Json:
    """The answer of a token count in the Messages shape (the default ``Format.count_answer``)."""
    return {"input_tokens": count}


@dataclass(frozen=True, slots=True)
class FormatRoute:
    """One model route of a format. ``path`` is exact (``/v1/messages``) or a template whose
    ``{name}`` parts each match one path segment, up to the literal text that follows
    (``/{version}/models/{model}:generateContent``); exact paths are found by one dict lookup."""

    path: str
    #: The name the route's usage records carry (``messages``, ``count_tokens``, ...).
    endpoint: str
    method: str = "POST"
    #: A token count: authorized and rate-limited like the rest, nothing held or billed.
    counting: bool = False
    #: Requests may refer to stored state and their answers are kept (``gateway.state``).
    stateful: bool = False
    #: The stream flag when the route fixes it (a ``:streamGenerateContent`` verb in the path); None: the
    #: format's ``stream_field`` in the body says.
    stream: bool | None = None

    @property
    def is_template(self) -> bool:
        return "{" in self.path


@dataclass(frozen=True, slots=True)
class Credentials:
    """Where a client of the format sends its key, in the order they are read."""

    #: Headers whose whole value is the key (``x-api-key``, ``x-goog-api-key``).
    headers: tuple[str, ...] = ("x-api-key",)
    #: ``Authorization: Bearer <key>`` is also read (after ``headers``).
    bearer: bool = True
    #: A query parameter carrying the key (``?key=``); never logged.
    query: str | None = None


@dataclass(frozen=True, slots=True)
class Format:
    codec: Codec
    routes: tuple[FormatRoute, ...]
    #: Upstream dialects to translate to, best first (the format itself first when it is one).
    preferred_dialects: tuple[str, ...]
    credentials: Credentials = Credentials()
    #: The top-level body field naming the model; None: the route's ``{model}`` parameter.
    model_field: str | None = "model"
    #: The top-level body field whose ``true`` asks for a stream; None: the route decides.
    stream_field: str | None = "stream"
    #: The top-level field of an answer in this format that names the model.
    reply_model_field: str = "model"
    #: Key groups this format does not serve, with the hint their 403 gives.
    refused_groups: Mapping[str, str] = field(default_factory=dict)
    #: Path prefixes only this format serves: a refusal there (unknown path, wrong method, the
    #: HTTP layer's own) is rendered in this format.
    owned_prefixes: tuple[str, ...] = ()
    #: Request headers only this format's clients send: on a path formats share (``/v1/models``,
    #: an unknown ``/v1`` path) a refusal is rendered in the format of the client.
    client_headers: tuple[str, ...] = ()
    #: The format of a refusal on a shared path when no format claims the client.
    answers_unclaimed: bool = False
    #: An upstream may speak it (a dialect); False for a format only clients speak.
    outbound: bool = True
    #: Refuses (``InvalidRequest``) what a route needs in the query string and is missing
    #: (``?alt=sse`` of a stream route); None: the format reads nothing there but its key.
    check_query: Callable[[FormatRoute, Mapping[str, str]], None] | None = None
    #: The body of a token count's answer (``{"input_tokens": n}`` unless the format says).
    count_answer: Callable[[int], Json] = input_tokens_answer
    #: Paths this format owns by their shape rather than a prefix (``/v1/models/x:verb``).
    owns_path: Callable[[str], bool] | None = None
    #: ``GET`` paths listing models in this format's own shape: exact (``/v1beta/models``) or with a
    #: ``{model}`` segment (one model). The shared ``/v1/models`` answers in it too when the
    #: format claims the client (``claims_client``).
    model_paths: tuple[str, ...] = ()
    #: One page of the key's models in the format's shape, from the query's paging parameters;
    #: None: the shared list shape (OpenAI and Anthropic SDKs).
    models_page: Callable[[Sequence[Model], Mapping[str, str]], Json] | None = None
    #: One model in the format's shape; None: the shared item shape.
    model_object: Callable[[Model], Json] | None = None

    @property
    def name(self) -> str:
        return self.codec.name

    def model_name(self, body: Json, params: Mapping[str, str] = _NO_PARAMS) -> object:
        """What the request names as its model (unchecked: ``gateway.policy`` checks it)."""
        if self.model_field is None:
            return params.get("model")
        return body.get(self.model_field)

    def wants_stream(self, body: Json, route: FormatRoute | None = None) -> bool:
        if route is not None and route.stream is not None:
            return route.stream
        return self.stream_field is not None and body.get(self.stream_field) is True

    def model_rewrites(self, upstream_model: str, client_model: str) -> tuple[tuple[bytes, bytes], ...]:
        """Byte replacements showing the client's model id where an upstream answering in this
        format wrote its own (the same-dialect passthrough)."""
        return model_rewrites(upstream_model, client_model, self.reply_model_field)

    def claims_path(self, path: str) -> bool:
        if self.owns_path is not None and self.owns_path(path):
            return True
        return any(path == p.rstrip("/") or path.startswith(p) for p in self.owned_prefixes)

    def claims_client(self, headers: Mapping[str, str], query: Mapping[str, str] | None = None) -> bool:
        """The request comes from this format's clients: a header only they send, or the key in
        the format's own query parameter (``?key=``)."""
        if any(h in headers for h in self.client_headers):
            return True
        parameter = self.credentials.query
        return parameter is not None and query is not None and parameter in query
