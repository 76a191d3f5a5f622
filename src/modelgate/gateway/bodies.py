"""What the gateway reads from a request body, computed once: inline for small bodies, in a
worker process for large ones (``modelgate.offload``), so no body stalls the event loop.

``analyse`` parses the body and applies the strict input rules: valid JSON object, nesting at most
``server.max_json_depth`` levels, every control field (``Codec.control_fields``) given once, the
format's own field checks, and the input-token bound of its text and media. For a large body the
worker returns only the control fields and figures (``Facts.offloaded``); everything later that
needs the whole body (building the upstream body, counting its tokens) runs in a worker too, by
the functions at the end of this module.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from modelgate import errors, ir
from modelgate.billing.estimate import count_tokens, prompt_tokens
from modelgate.billing.input_bound import MediaRules, input_bound
from modelgate.billing.server_tools import web_search_bound
from modelgate.formats import CODECS, ClientRequest, FormatName
from modelgate.formats.base import decode_untrusted
from modelgate.formats.jsonutil import Json
from modelgate.gateway.body import duplicate_key, parse_object, splice_top_level, too_deep
from modelgate.gateway.translate import Built, HostedToolPolicy, build_body
from modelgate.upstream.affinity_key import body_session
from modelgate.upstream.base import Dialect


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


def analyse(raw: bytes, fmt: FormatName, counting: bool, rules: BodyRules) -> Facts:
    """Parse and check a body; raises ``InvalidRequest`` when it cannot be read at all."""
    codec = CODECS[fmt]
    body = parse_object(raw)
    if too_deep(body, rules.max_depth):
        raise errors.InvalidRequest(
            f"request body is nested too deeply: at most {rules.max_depth} levels of objects and arrays"
        )
    duplicated = duplicate_key(raw, body, codec.control_fields)
    if duplicated is not None:
        raise errors.InvalidRequest(
            f"{duplicated}: the field is given more than once; send each field once", param=duplicated
        )
    try:
        codec.validate(body, counting=counting)
        invalid = None
    except errors.GatewayError as error:
        invalid = error
    return Facts(
        body,
        input_bound(raw, body, rules.media),
        invalid,
        web_searches=web_search_bound(body, rules.max_web_searches),
    )


def analyse_in_worker(raw: bytes, fmt: FormatName, counting: bool, rules: BodyRules) -> Facts:
    """``analyse`` for a large body, returning only what is small (runs in a worker process)."""
    facts = analyse(raw, fmt, counting, rules)
    codec = CODECS[fmt]
    body = facts.body
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
    )


def upstream_body_in_worker(
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
) -> Built:
    """``translate.build_body`` for a large body (runs in a worker process)."""
    codec = CODECS[fmt]
    # Passthrough only splices control fields, found by byte search: no need to parse the body.
    body = control_fields if dialect == codec.name else orjson.loads(raw)
    client = ClientRequest(codec, body, upstream_model)
    return build_body(
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
    )


def splice_in_worker(raw: bytes, fields: Json) -> bytes:
    """``body.splice_top_level`` for a large body (runs in a worker process)."""
    return splice_top_level(raw, fields, parsed=orjson.loads(raw))


def prompt_tokens_in_worker(raw: bytes, fmt: FormatName) -> int:
    """The input estimate of a large body (``streams.estimate_input``; runs in a worker)."""
    codec = CODECS[fmt]
    try:
        return prompt_tokens(decode_untrusted(codec, orjson.loads(raw)))
    except (errors.GatewayError, ValueError, TypeError, KeyError, AttributeError):
        return count_tokens(raw.decode("utf-8", "replace"))
