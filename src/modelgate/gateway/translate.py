"""Choosing the upstream dialect and building the upstream request body.

Same dialect in and out is the hot path: the client's bytes go upstream with only the fields the
gateway owns spliced in (``model``, a clamped token limit, forced stream usage). Otherwise the
request is decoded once into the internal representation and encoded in the upstream's dialect.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from modelgate import ir
from modelgate.errors import InvalidRequest, WireFormat
from modelgate.formats import CODECS, responses
from modelgate.gateway.body import splice_top_level
from modelgate.upstream.base import Deployment, Dialect, Provider

if TYPE_CHECKING:
    from modelgate.gateway.pipeline import Call

#: Dialects to try, best first, for each client format.
_PREFERENCE: dict[WireFormat, tuple[Dialect, ...]] = {
    "messages": ("messages", "chat", "responses"),
    "chat": ("chat", "messages", "responses"),
    "responses": ("responses", "chat", "messages"),
}
_LIMIT_FIELD = {"messages": "max_tokens", "responses": "max_output_tokens"}


def choose_dialect(fmt: WireFormat, provider: Provider) -> Dialect:
    for dialect in _PREFERENCE[fmt]:
        if dialect in provider.dialects:
            return dialect
    raise ValueError(f"provider {provider.name} speaks no dialect")  # pragma: no cover - config forbids


@dataclass(slots=True)
class Translation:
    """The client's request, decoded into the IR at most once, only if some attempt needs it."""

    fmt: WireFormat
    body: dict[str, Any]
    _request: ir.Request | None = None

    def request(self) -> ir.Request:
        if self._request is None:
            self._request = CODECS[self.fmt].decode_request(self.body)
        return self._request

    @property
    def namespaces(self) -> dict[str, tuple[str, str]] | None:
        """Flattened ``ns__name`` -> ``(ns, name)`` for a Responses client's namespace tools, so
        translated calls go back to the client under their original name and namespace."""
        if self.fmt != "responses":
            return None
        return responses.tool_namespaces(self.body) or None

    @property
    def client_wants_usage(self) -> bool:
        options = self.body.get("stream_options")
        return isinstance(options, dict) and options.get("include_usage") is True


def _chat_limit_field(body: dict[str, Any], provider: Provider) -> str:
    if "max_completion_tokens" in body:
        return "max_completion_tokens"
    if "max_tokens" in body or provider.kind == "openai-compatible":
        return "max_tokens"
    return "max_completion_tokens"


def build_upstream_body(
    call: Call, translation: Translation, deployment: Deployment, provider: Provider
) -> tuple[Dialect, bytes]:
    dialect = choose_dialect(call.fmt, provider)
    body = call.body
    if dialect == call.fmt:
        changes: dict[str, Any] = {}
        if body.get("model") != deployment.upstream_model:
            changes["model"] = deployment.upstream_model
        field = _chat_limit_field(body, provider) if dialect == "chat" else _LIMIT_FIELD[dialect]
        if body.get(field) != call.max_tokens:
            changes[field] = call.max_tokens
        if dialect == "chat" and call.stream and not translation.client_wants_usage:
            # The gateway always needs the usage chunk; the relay strips it again for the client.
            options = body.get("stream_options")
            changes["stream_options"] = {
                **(options if isinstance(options, dict) else {}),
                "include_usage": True,
            }
        return dialect, splice_top_level(call.raw, changes, parsed=body)
    if call.fmt == "responses":
        _refuse_hosted_tools(body, provider)
    request = translation.request()
    request.max_tokens = call.max_tokens
    request.stream = call.stream
    return dialect, orjson.dumps(CODECS[dialect].encode_request(request, deployment.upstream_model))


def _refuse_hosted_tools(body: dict[str, Any], provider: Provider) -> None:
    """Hosted tools (``web_search``, ``file_search``, ``mcp``, ...) run inside OpenAI's Responses
    API. Translated to another dialect they would silently vanish and change the answer, so the
    request is refused; a Responses-dialect upstream gets them passed through instead."""
    hosted = responses.hosted_tools(body)
    if hosted:
        raise InvalidRequest(
            f"tools: hosted tool type(s) {', '.join(sorted(set(hosted)))} are not supported for this "
            f"model: its upstream ({provider.name}) does not speak the Responses API; offer only "
            "function (or namespace) tools",
            param="tools",
        )
