"""The ``anthropic`` provider kind: Messages API (and its token counter) over HTTP."""

from __future__ import annotations

from collections.abc import Mapping

from modelgate.upstream.base import Dialect
from modelgate.upstream.transport import HttpProvider

DEFAULT_ANTHROPIC_VERSION = "2023-06-01"


class AnthropicProvider(HttpProvider):
    kind = "anthropic"
    dialects: frozenset[Dialect] = frozenset({"messages"})
    _paths: Mapping[Dialect, str] = {"messages": "/v1/messages"}
    _suffixes: Mapping[Dialect, frozenset[str]] = {"messages": frozenset({"/count_tokens"})}

    def _headers(self, stream: bool, client_headers: Mapping[str, str]) -> dict[str, str]:
        headers = super()._headers(stream, client_headers)
        # The client's version decides request semantics upstream (2026-10-21 rejects fields
        # 2023-06-01 accepts), so it is forwarded as sent; the gateway validated it already.
        headers["anthropic-version"] = client_headers.get("anthropic-version", DEFAULT_ANTHROPIC_VERSION)
        beta = _beta_header(self._config.anthropic_beta, client_headers.get("anthropic-beta"))
        if beta:
            headers["anthropic-beta"] = beta
        else:
            headers.pop("anthropic-beta", None)
        headers.pop("authorization", None)
        if self._api_key is not None:
            headers["x-api-key"] = self._api_key
        return headers


def _beta_header(policy: str | list[str], client_value: str | None) -> str | None:
    if not client_value or policy == "drop":
        return None
    if policy == "forward":
        return client_value
    allowed = set(policy)
    kept = [b for b in (part.strip() for part in client_value.split(",")) if b in allowed]
    return ",".join(kept) or None
