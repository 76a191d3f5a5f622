"""The one interface every wire format implements: ``Codec`` (docs/architecture.md §5).

Callers hold a ``Codec`` and never branch on a format's name. A codec decodes and encodes requests
and responses through the internal representation (``modelgate.ir``), builds the stream objects
for its format (a decoder of upstream events, an encoder of client events, a passthrough tap),
renders errors, and knows the few request fields the gateway itself relies on.

What the client asked shapes some encodings (the Responses echo of the request and its namespace
tools, the Chat usage chunk); that travels in one explicit ``ClientRequest`` instead of per-format
keyword arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from modelgate import ir
from modelgate.errors import GatewayError, InvalidRequest
from modelgate.formats.jsonutil import Json

#: Removes secrets from upstream text (the provider's key and address, anything key-shaped).
Redact = Callable[[str], str]


class TokenEstimator(Protocol):
    """Output tokens of relayed deltas when the upstream never reported them
    (``billing.estimate.DELTA_ESTIMATOR``; formats do not import billing)."""

    def text(self, text: str) -> int: ...


class StreamDecoder(Protocol):
    """Upstream SSE bytes of one format -> IR events. Malformed input ends the stream with an
    ``ir.StreamError``, never an exception."""

    def feed(self, chunk: bytes) -> list[ir.Event]: ...
    def finish(self) -> list[ir.Event]: ...


class StreamEncoder(Protocol):
    """IR events -> client SSE bytes of one format; nothing is sent after ``Finish`` or
    ``StreamError``."""

    #: The response object the stream completed with, once its final event is encoded, for
    #: formats whose responses can be fetched again (Responses); None otherwise.
    completed: Json | None

    def encode(self, event: ir.Event) -> bytes: ...
    def ping(self) -> bytes: ...


class StreamTap(Protocol):
    """Same-dialect passthrough: relays upstream SSE bytes with only the model id rewritten and
    reads on the way what billing needs. Each event's JSON is parsed at most once.

    ``feed`` and ``finish`` return whole events only. An event whose data is not JSON is never
    forwarded: ``malformed`` turns True and nothing after it is relayed (the client's SSE parser
    would fail before it could learn why).
    """

    usage: ir.Usage | None
    stop_reason: ir.StopReason | None
    #: The upstream sent its final event.
    finished: bool
    #: An in-band error the upstream sent (already relayed to the client).
    error: ir.StreamError | None
    malformed: bool
    #: The upstream's final response object (model id as the upstream sent it), once its final
    #: event passed, for formats whose responses can be fetched again (Responses); else None.
    completed: Json | None

    @property
    def output_tokens(self) -> int:
        """Output tokens relayed so far, estimated per delta; exact for the simulator."""
        ...

    def feed(self, chunk: bytes) -> bytes: ...
    def finish(self) -> bytes: ...
    def error_frame(self, err: GatewayError) -> bytes:
        """The gateway's own in-band error, continuing this stream (ids, sequence numbers)."""
        ...


class Codec(Protocol):
    """One wire format. Formats never import each other; they meet only in ``modelgate.ir``."""

    #: The format's name in ``formats.registry.FORMATS`` (and a provider's dialect names).
    name: str
    #: Top-level fields the gateway itself reads (authorization, limits, billing, usage options):
    #: each must appear once, and they are all a large offloaded body's caller gets back.
    control_fields: frozenset[str]
    #: The format's response objects repeat the request (tools, instructions, limits): encoding
    #: a translated answer needs the decoded request, not only the control fields.
    echoes_request: bool
    #: Hosted tools of the IR its request encoder gives an upstream to run (``ir.WEB_SEARCH_NAME``);
    #: the others a translated request offers are dropped or refused (``gateway.translate``).
    runs_hosted: frozenset[str]

    # requests -------------------------------------------------------------------------------
    def check_headers(self, headers: Mapping[str, str], versions: Sequence[str]) -> None:
        """Refuse (``InvalidRequest``) what the format requires in headers and is missing."""
        ...

    def validate(self, body: Json, *, counting: bool = False) -> None:
        """The fields the gateway relies on; passthrough leaves the rest to the upstream.
        ``counting``: a token-count request (no output limit needed)."""
        ...

    def requested_max_tokens(self, body: Json) -> int | None: ...

    def wants_stream_usage(self, body: Json) -> bool:
        """Whether the client asked to see usage in its stream (always, where the format has it
        built in)."""
        ...

    def offers_web_search(self, body: Json) -> bool:
        """Whether the body offers a hosted web search (a cheap look at its tools)."""
        ...

    def decode_request(self, body: Json) -> ir.Request: ...
    def encode_request(self, req: ir.Request, upstream_model: str) -> Json: ...

    def passthrough_fields(
        self, body: Json, *, upstream_model: str, max_tokens: int, stream: bool, legacy_limit: bool
    ) -> Json:
        """Top-level fields to splice into the client's bytes for a same-dialect upstream: the
        model, the output limit (``legacy_limit``: the upstream only knows the older field name),
        and forced stream usage. Empty when nothing changes."""
        ...

    # responses ------------------------------------------------------------------------------
    def usage_of(self, body: Any) -> ir.Usage:
        """Usage of a whole response body in this format (passthrough reads only this)."""
        ...

    def decode_response(self, body: Json) -> ir.Response: ...
    def encode_response(self, resp: ir.Response, client: ClientRequest) -> Json: ...
    def new_response_id(self) -> str: ...
    def new_tool_call_id(self) -> str: ...

    # streams --------------------------------------------------------------------------------
    def stream_decoder(self) -> StreamDecoder: ...
    def stream_encoder(self, client: ClientRequest) -> StreamEncoder: ...
    def stream_tap(
        self, upstream_model: str, client: ClientRequest, estimate: TokenEstimator, redact: Redact | None
    ) -> StreamTap:
        """The passthrough tap; ``redact`` scrubs the upstream's error events after decoding them."""
        ...

    # errors ---------------------------------------------------------------------------------
    def http_status(self, err: GatewayError) -> int:
        """The status ``err`` is answered with on this format (``GatewayError.http_status``)."""
        ...

    def render_error(self, err: GatewayError, request_id: str) -> bytes: ...


class ClientRequest:
    """The client's request as the encoders of its format need it: the parsed body, the model id
    the client is shown (the canonical id, never an alias), and the IR request, decoded at most
    once and only when something needs it (same-dialect passthrough never does)."""

    __slots__ = ("_request", "body", "codec", "model")

    def __init__(self, codec: Codec, body: Json, model: str, request: ir.Request | None = None) -> None:
        self.codec = codec
        self.body = body
        self.model = model
        if request is not None:
            request.model = model
        self._request = request

    def request(self) -> ir.Request:
        if self._request is None:
            request = decode_untrusted(self.codec, self.body)
            request.model = self.model
            self._request = request
        return self._request


def decode_untrusted(codec: Codec, body: Json) -> ir.Request:
    """``codec.decode_request`` on a body from outside: a value of a shape no decoder expected
    is the request's fault, a 400, never a crash (the fuzz suite holds the decoders to it)."""
    try:
        return codec.decode_request(body)
    except GatewayError:
        raise
    except (TypeError, AttributeError, KeyError, ValueError, IndexError) as exc:
        raise InvalidRequest(
            f"request body has a field of an unexpected shape ({type(exc).__name__})"
        ) from exc
