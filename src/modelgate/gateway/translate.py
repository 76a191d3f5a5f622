"""Choosing the upstream dialect and building the upstream request body.

Same dialect in and out is the hot path: the client's bytes go upstream with only the fields the
gateway owns spliced in (``model``, a clamped token limit, forced stream usage). Otherwise the
request is decoded once into the internal representation and encoded in the upstream's dialect.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from modelgate.errors import WireFormat
from modelgate.formats import CODECS, ClientRequest
from modelgate.gateway.body import splice_top_level
from modelgate.upstream.base import Dialect, Provider

#: Dialects to try, best first, for each client format.
_PREFERENCE: Mapping[WireFormat, tuple[Dialect, ...]] = {
    "messages": ("messages", "chat", "responses"),
    "chat": ("chat", "messages", "responses"),
    "responses": ("responses", "chat", "messages"),
}


def choose_dialect(fmt: WireFormat, provider: Provider) -> Dialect:
    for dialect in _PREFERENCE[fmt]:
        if dialect in provider.dialects:
            return dialect
    raise ValueError(f"provider {provider.name} speaks no dialect")  # pragma: no cover - config forbids


def build_body(
    client: ClientRequest,
    raw: bytes,
    dialect: Dialect,
    *,
    upstream_model: str,
    max_tokens: int,
    stream: bool,
    legacy_limit: bool,
) -> bytes:
    """The body to send in ``dialect``: the client's bytes with the gateway's fields spliced in
    (same dialect), or the request translated through the IR."""
    codec = client.codec
    if dialect == codec.name:
        fields = codec.passthrough_fields(
            client.body,
            upstream_model=upstream_model,
            max_tokens=max_tokens,
            stream=stream,
            legacy_limit=legacy_limit,
        )
        return splice_top_level(raw, fields, parsed=client.body)
    refusal = codec.untranslatable(client.body)
    if refusal is not None:
        raise refusal
    request = client.request()
    request.max_tokens = max_tokens
    request.stream = stream
    return orjson.dumps(CODECS[dialect].encode_request(request, upstream_model))
