"""The ``anthropic`` provider kind: Messages API (and its token counter) over HTTP.

``anthropic-beta`` goes on as the client sent it, byte for byte, unless the provider's
``anthropic_beta`` policy or ``betas`` overrides change the list (``upstream.betas``)."""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from modelgate.upstream.base import Dialect
from modelgate.upstream.betas import plan_for, split_betas, strip_fields
from modelgate.upstream.credentials import ApiKey, Credential, Outgoing
from modelgate.upstream.http_provider import HttpProvider
from modelgate.upstream.kinds.anthropic import AnthropicConfig

DEFAULT_ANTHROPIC_VERSION = "2023-06-01"


class AnthropicProvider(HttpProvider):
    dialects: frozenset[Dialect] = frozenset({"messages"})
    _paths: Mapping[Dialect, str] = {"messages": "/v1/messages"}
    _suffixes: Mapping[Dialect, frozenset[str]] = {"messages": frozenset({"/count_tokens"})}
    _config: AnthropicConfig  # the kind's model names this class, so it is built with its model

    @classmethod
    def api_key_credential(cls, label: str, key: str) -> Credential:
        return ApiKey(label, key, "x-api-key")

    def _headers(self, stream: bool, client_headers: Mapping[str, str]) -> dict[str, str]:
        headers = super()._headers(stream, client_headers)
        # The client's version decides request semantics upstream (2026-10-21 rejects fields
        # 2023-06-01 accepts), so it is forwarded as sent; the gateway validated it already.
        headers["anthropic-version"] = client_headers.get("anthropic-version", DEFAULT_ANTHROPIC_VERSION)
        headers.pop("anthropic-beta", None)
        return headers

    def _prepare(
        self, dialect: Dialect, body: bytes, stream: bool, client_headers: Mapping[str, str], path_suffix: str
    ) -> Outgoing:
        request = super()._prepare(dialect, body, stream, client_headers, path_suffix)
        value = client_headers.get("anthropic-beta")
        config = self._config
        plan = plan_for(self.kind, config.anthropic_beta, config.betas.actions(), split_betas(value))
        if plan.send:
            # Unchanged, the client's header goes on byte for byte (Anthropic's gateway guidance).
            unchanged = value is not None and plan.send == tuple(split_betas(value))
            request.headers["anthropic-beta"] = value if unchanged and value else ",".join(plan.send)
        if plan.strip_fields:  # only with a provider's betas.strip: the body is re-serialised
            try:
                data = orjson.loads(body)
            except orjson.JSONDecodeError:
                return request  # the upstream answers a broken body itself
            if isinstance(data, dict) and strip_fields(data, plan.strip_fields):
                request.body = orjson.dumps(data)
        return request
