"""The ``openai`` (Chat Completions + Responses) and ``openai-compatible`` (Chat only: vLLM,
Ollama, llama.cpp server, ...) provider kinds. A new compatible server is configuration only."""

from __future__ import annotations

from collections.abc import Mapping

from modelgate.upstream.base import Dialect
from modelgate.upstream.transport import HttpProvider


class OpenAIProvider(HttpProvider):
    kind = "openai"
    dialects: frozenset[Dialect] = frozenset({"chat", "responses"})
    _paths: Mapping[Dialect, str] = {"chat": "/v1/chat/completions", "responses": "/v1/responses"}

    def _headers(self, stream: bool, client_headers: Mapping[str, str]) -> dict[str, str]:
        headers = super()._headers(stream, client_headers)
        headers.pop("x-api-key", None)
        if self._api_key is not None:
            headers["authorization"] = f"Bearer {self._api_key}"
        else:
            # Local servers run keyless; make sure no static header smuggles one in by mistake.
            headers.pop("authorization", None)
        return headers


class OpenAICompatibleProvider(OpenAIProvider):
    kind = "openai-compatible"
    dialects: frozenset[Dialect] = frozenset({"chat"})
    legacy_chat_limit = True
    _paths: Mapping[Dialect, str] = {"chat": "/v1/chat/completions"}
