"""Choosing the upstream dialect and building the upstream request body.

Same dialect in and out is the hot path: the client's bytes go upstream with only the fields the
gateway owns spliced in (``model``, a clamped token limit, forced stream usage). Otherwise the
request is decoded once into the internal representation and encoded in the upstream's dialect.

Hosted tools (docs/wire-formats.md, "Hosted tools"): offering a tool is not asking for it. A
hosted tool the upstream's dialect cannot run is dropped and named (``Built.dropped``), unless
the provider's ``hosted_tools`` is ``refuse``; a ``tool_choice`` forcing one is always a 400.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import orjson

from modelgate import errors, ir
from modelgate.formats import CODECS, FORMATS, ClientRequest, FormatName
from modelgate.gateway.body import splice_top_level
from modelgate.upstream.base import Dialect, Provider
from modelgate.upstream.kinds import runs_hosted_tools

#: What a provider does with hosted tools its dialect cannot run (``providers[].hosted_tools``).
HostedToolPolicy = Literal["drop", "refuse"]


@dataclass(frozen=True, slots=True)
class Built:
    body: bytes
    #: Hosted tool types the client offered and the upstream cannot run, as the client spelled
    #: them, sorted (the ``x-modelgate-dropped-tools`` header).
    dropped: tuple[str, ...] = ()


def choose_dialect(fmt: FormatName, provider: Provider, *, web_search: bool = False) -> Dialect:
    """The provider's best dialect for the client's format. A request offering a web search
    prefers, among the dialects the provider speaks, one that can run it (a Messages client on
    an OpenAI upstream then goes to Responses rather than Chat)."""
    order = FORMATS[fmt].preferred_dialects  # best first
    if web_search:
        order = tuple(sorted(order, key=lambda d: ir.WEB_SEARCH_NAME not in CODECS[d].runs_hosted))
    for dialect in order:
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
    hosted_tools: HostedToolPolicy = "drop",
    web_searches: int = 0,
    provider_kind: str = "",
    spans: dict[str, tuple[int, int]] | None = None,
) -> Built:
    """The body to send in ``dialect``: the client's bytes with the gateway's fields spliced in
    (same dialect), or the request translated through the IR. ``web_searches``: the searches the
    request's hold covers (``billing.server_tools``); a translated web search is limited to them
    (0: no limit), so the hold stays a true upper bound. ``spans``: the body's top-level value
    spans when a worker scanned it (``bodies.Facts.spans``), so passthrough splices by offset."""
    codec = client.codec
    if dialect == codec.name:
        fields = codec.passthrough_fields(
            client.body,
            upstream_model=upstream_model,
            max_tokens=max_tokens,
            stream=stream,
            legacy_limit=legacy_limit,
        )
        return Built(splice_top_level(raw, fields, parsed=client.body, spans=spans))
    request = client.request()
    target = CODECS[dialect]
    runs = target.runs_hosted if runs_hosted_tools(provider_kind) else frozenset()
    dropped = _hosted_tools_dropped(request, runs, hosted_tools)
    request.max_tokens = max_tokens
    request.stream = stream
    # The decoded request is shared by the attempts (a failover may reach an upstream that can
    # search) and by the response encoder: what changes for this upstream changes on copies.
    sent = request
    search = request.web_search
    if search is not None and ir.WEB_SEARCH_NAME not in runs:
        sent = replace(request, web_search=None)
    elif search is not None and web_searches > 0 and (search.max_uses or web_searches + 1) > web_searches:
        sent = replace(request, web_search=replace(search, max_uses=web_searches))
    return Built(orjson.dumps(target.encode_request(sent, upstream_model)), dropped)


def _hosted_tools_dropped(
    request: ir.Request, runs_hosted: frozenset[str], policy: HostedToolPolicy
) -> tuple[str, ...]:
    search = request.web_search
    can_search = ir.WEB_SEARCH_NAME in runs_hosted
    choice = request.tool_choice
    forced = choice.hosted if choice is not None else None
    runnable = choice is not None and choice.name == ir.WEB_SEARCH_NAME and search is not None and can_search
    if forced is not None and not runnable:
        raise errors.InvalidRequest(
            f"tool_choice: forces the hosted tool {forced}, which this model's upstream cannot run; "
            "let the model choose (tool_choice auto) or use a model whose upstream has it",
            param="tool_choice",
        )
    dropped = list(request.hosted_tools)
    if search is not None and not can_search:
        dropped.append(search.client_type)
    unique = tuple(sorted(set(dropped)))
    if unique and policy == "refuse":
        raise errors.InvalidRequest(
            f"tools: hosted tool type(s) {', '.join(unique)} are not supported for this model: its "
            "upstream cannot run them; offer only function tools",
            param="tools",
        )
    return unique
