"""The ``anthropic`` provider kind: Messages API (and its token counter) over HTTP."""

from __future__ import annotations

from collections.abc import Mapping

from modelgate.upstream.base import Dialect
from modelgate.upstream.credentials import ApiKey, Credential
from modelgate.upstream.http_provider import HttpProvider

DEFAULT_ANTHROPIC_VERSION = "2023-06-01"


class AnthropicProvider(HttpProvider):
    kind = "anthropic"
    dialects: frozenset[Dialect] = frozenset({"messages"})
    _paths: Mapping[Dialect, str] = {"messages": "/v1/messages"}
    _suffixes: Mapping[Dialect, frozenset[str]] = {"messages": frozenset({"/count_tokens"})}

    @classmethod
    def api_key_credential(cls, label: str, key: str) -> Credential:
        return ApiKey(label, key, "x-api-key")

    def _headers(self, stream: bool, client_headers: Mapping[str, str]) -> dict[str, str]:
        headers = super()._headers(stream, client_headers)
        # The client's version decides request semantics upstream (2026-10-21 rejects fields
        # 2023-06-01 accepts), so it is forwarded as sent; the gateway validated it already.
        headers["anthropic-version"] = client_headers.get("anthropic-version", DEFAULT_ANTHROPIC_VERSION)
        betas = forwarded_betas(self._config.anthropic_beta, client_headers.get("anthropic-beta"))
        if betas:
            headers["anthropic-beta"] = ",".join(betas)
        else:
            headers.pop("anthropic-beta", None)
        return headers


def forwarded_betas(policy: str | list[str], client_value: str | None) -> list[str]:
    """The client's ``anthropic-beta`` values the provider's ``anthropic_beta`` policy lets through."""
    if not client_value or policy == "drop":
        return []
    betas = [b for b in (part.strip() for part in client_value.split(",")) if b]
    if policy == "forward":
        return betas
    allowed = set(policy)
    return [b for b in betas if b in allowed]
