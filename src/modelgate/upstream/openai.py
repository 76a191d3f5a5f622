"""The ``openai`` (Chat Completions + Responses) and ``openai-compatible`` (Chat only: vLLM,
Ollama, llama.cpp server, ...) provider kinds. A new compatible server is configuration only."""

from __future__ import annotations

from collections.abc import Mapping

from modelgate.upstream.base import Dialect
from modelgate.upstream.http_provider import HttpProvider


class OpenAIProvider(HttpProvider):
    dialects: frozenset[Dialect] = frozenset({"chat", "responses"})
    _paths: Mapping[Dialect, str] = {"chat": "/v1/chat/completions", "responses": "/v1/responses"}


class OpenAICompatibleProvider(OpenAIProvider):
    dialects: frozenset[Dialect] = frozenset({"chat"})
    legacy_chat_limit = True
    _paths: Mapping[Dialect, str] = {"chat": "/v1/chat/completions"}
