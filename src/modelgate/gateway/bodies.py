"""What the gateway reads from a request body, computed once: inline for small bodies, in a
worker process for large ones (``modelgate.offload``), so no body stalls the event loop.

``analyse`` parses the body and applies the strict input rules: valid JSON object, nesting at most
``server.max_json_depth`` levels, every control field (``Codec.control_fields``) given once, the
format's own field checks, and the input-token bound of its text and media. For a large body the
worker parses it once and finds the byte span of every top-level value by C-level searches
(``body_scan.quick_spans``) or, when a key is written more than once or with escapes, by one scan
of its bytes (``body_scan.scan_object``: depth, duplicated control fields, spans), and returns only the control fields,
the spans and figures (``Facts.offloaded``). The passthrough body is then spliced in this process
from those spans (a byte copy, no scan); only translation and the token estimate, which need the
whole document, parse it again in a worker (the functions at the end of this module).
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from modelgate import errors, ir
from modelgate.billing.estimate import count_tokens, prompt_tokens
from modelgate.billing.input_bound import MEDIA_TYPES, MediaRules, input_bound
from modelgate.billing.server_tools import web_search_bound
from modelgate.formats import CODECS, ClientRequest, FormatName
from modelgate.formats.base import Codec, decode_untrusted
from modelgate.formats.jsonutil import Json
from modelgate.gateway.body import duplicate_key, parse_object, shape
from modelgate.gateway.body_scan import canonical_spans, quick_spans, scan_object
from modelgate.gateway.translate import HostedToolPolicy, build_body
from modelgate.upstream.affinity_key import body_session
from modelgate.upstream.base import Dialect

#: Deeper than any body gets (the depth limit was applied before the scan runs).
_ANY_DEPTH = 1 << 30
#: Bodies up to this size get their spans proved by writing them back first (``canonical_spans``),
#: larger ones by the searches first (``quick_spans``), each proof the other's fallback. Measured
#: per MiB: many Claude-Code-shaped turns 0.66-0.68 ms written back against 0.99-1.02 searched
#: (1 and 10 MiB), short turns 0.47 against 0.75 at 1 MiB but 1.33 against 0.71 at 31 MiB (the
#: serialiser's 31 MiB of output no longer fits in the caches).
CANONICAL_FIRST_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class BodyRules:
    max_depth: int
    media: MediaRules
    #: ``billing.max_web_searches_per_request``: the most web searches a hold covers.
    max_web_searches: int = 0


@dataclass(frozen=True, slots=True)
class Facts:
    #: The parsed body, or only its control fields when the body was analysed in a worker.
    body: Json
    #: Upper bound on the request's input tokens (``billing.input_bound``).
    input_bound: int
    #: The format's verdict on the body's fields, raised once the model is authorized.
    invalid: errors.GatewayError | None
    offloaded: bool = False
    #: Server web searches the hold covers (``billing.server_tools``).
    web_searches: int = 0
    #: Offloaded: the IR request without its conversation (what response encoders echo).
    request: ir.Request | None = None
    #: Offloaded: the body offers a hosted web search (``Codec.offers_web_search``).
    web_search: bool = False
    #: Offloaded: the body's unscoped session key (``upstream.affinity_key.body_session``).
    session_hint: bytes | None = None
    #: Offloaded: each top-level value's byte span, keyed as parsed (``body_scan.quick_spans``),
    #: so the gateway's fields are spliced in without searching the body again.
    spans: dict[str, tuple[int, int]] | None = None


def _too_deep(rules: BodyRules) -> errors.InvalidRequest:
    return errors.InvalidRequest(
        f"request body is nested too deeply: at most {rules.max_depth} levels of objects and arrays"
    )


def _duplicated(field: str) -> errors.InvalidRequest:
    return errors.InvalidRequest(
        f"{field}: the field is given more than once; send each field once", param=field
    )


def analyse(raw: bytes, fmt: FormatName, counting: bool, rules: BodyRules) -> Facts:
    """Parse and check a body; raises ``InvalidRequest`` when it cannot be read at all (inline:
    a body up to ``server.offload_body_bytes``). One walk over the parsed containers gives the
    depth and whether any object is media-shaped (``body.shape``); duplicated control fields cost
    a C-level count per field in the usual case (``body.duplicate_key``)."""
    codec = CODECS[fmt]
    body = parse_object(raw)
    deep, media = shape(body, rules.max_depth, MEDIA_TYPES)
    if deep:
        raise _too_deep(rules)
    duplicated = duplicate_key(raw, body, codec.control_fields)
    if duplicated is not None:
        raise _duplicated(duplicated)
    return _judged(raw, body, codec, counting, rules, media)


def _structure(raw: bytes, codec: Codec, rules: BodyRules) -> tuple[Json, dict[str, tuple[int, int]], bool]:
    """The one parse, then the structural rules: the nesting depth and whether any object is
    media-shaped, by one walk over the parsed containers (``body.shape``); the top-level spans by
    writing the parsed members back and comparing them with the body (``body_scan.canonical_spans``:
    compact JSON as agents send it) and by C-level searches (``body_scan.quick_spans``), the cheaper
    for the body's size first (``CANONICAL_FIRST_BYTES``); either proves that no key is duplicated
    or respelled. Only when neither can decide does
    one scan of the bytes (``body_scan.scan_object``) find the spans and the duplicated control
    fields."""
    body = parse_object(raw)
    deep, media = shape(body, rules.max_depth, MEDIA_TYPES)
    if deep:
        raise _too_deep(rules)
    first, second = (
        (canonical_spans, quick_spans)
        if len(raw) <= CANONICAL_FIRST_BYTES
        else (quick_spans, canonical_spans)
    )
    spans = first(raw, body)
    if spans is None:
        spans = second(raw, body)
    if spans is None:
        layout = scan_object(raw, _ANY_DEPTH)
        duplicated = layout.duplicated(codec.control_fields)
        if duplicated is not None:
            raise _duplicated(duplicated)
        spans = layout.spans()
    return body, spans, media


def _judged(raw: bytes, body: Json, codec: Codec, counting: bool, rules: BodyRules, media: bool) -> Facts:
    """The format's verdict and the figures of a structurally sound body."""
    try:
        codec.validate(body, counting=counting)
        invalid = None
    except errors.GatewayError as error:
        invalid = error
    return Facts(
        body,
        input_bound(raw, body, rules.media, media=media),
        invalid,
        web_searches=web_search_bound(body, rules.max_web_searches),
    )


def analyse_in_worker(raw: bytes, fmt: FormatName, counting: bool, rules: BodyRules) -> Facts:
    """``analyse`` for a large body, returning only what is small (runs in a worker process):
    the control fields, the spans and the figures."""
    codec = CODECS[fmt]
    body, spans, media = _structure(raw, codec, rules)
    facts = _judged(raw, body, codec, counting, rules, media)
    request = None
    if facts.invalid is None and codec.echoes_request:
        try:
            request = decode_untrusted(codec, body)
        except errors.GatewayError:
            request = None  # only translation needs it, and translation will refuse the body
        else:
            request.messages = []
    return Facts(
        {k: body[k] for k in codec.control_fields if k in body},
        facts.input_bound,
        facts.invalid,
        offloaded=True,
        web_searches=facts.web_searches,
        request=request,
        web_search=codec.offers_web_search(body),
        session_hint=body_session(body),
        spans=spans,
    )


def built_in_worker(
    raw: bytes,
    control_fields: Json,
    fmt: FormatName,
    dialect: Dialect,
    upstream_model: str,
    max_tokens: int,
    stream: bool,
    legacy_limit: bool,
    hosted_tools: HostedToolPolicy,
    web_searches: int,
    provider_kind: str,
) -> tuple[bytes, tuple[str, ...]]:
    """``translate.build_body`` for a large body (runs in a worker process). Translation parses
    it (the only second parse of a large body: it needs all of it); passthrough, when the spans
    from the analysis no longer fit the body, scans it again instead."""
    codec = CODECS[fmt]
    spans = None
    if dialect == codec.name:
        body, spans = control_fields, scan_object(raw, 1 << 30).spans()
    else:
        body = orjson.loads(raw)
    client = ClientRequest(codec, body, upstream_model)
    built = build_body(
        client,
        raw,
        dialect,
        upstream_model=upstream_model,
        max_tokens=max_tokens,
        stream=stream,
        legacy_limit=legacy_limit,
        hosted_tools=hosted_tools,
        web_searches=web_searches,
        provider_kind=provider_kind,
        spans=spans,
    )
    return built.body, built.dropped


def prompt_tokens_in_worker(raw: bytes, fmt: FormatName) -> int:
    """The input estimate of a large body (``streams.estimate_input``; runs in a worker)."""
    codec = CODECS[fmt]
    try:
        return prompt_tokens(decode_untrusted(codec, orjson.loads(raw)))
    except (errors.GatewayError, ValueError, TypeError, KeyError, AttributeError):
        return count_tokens(raw.decode("utf-8", "replace"))
