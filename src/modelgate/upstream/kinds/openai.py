"""The ``openai`` kind (Chat Completions + Responses) and ``openai-compatible`` (Chat only:
vLLM, Ollama, llama.cpp server, ...), implemented in ``upstream.openai``."""

from __future__ import annotations

from typing import ClassVar, Literal

from modelgate.upstream.kind import ProviderConfig


class OpenAIConfig(ProviderConfig):
    default_base_url: ClassVar[str | None] = "https://api.openai.com"
    key_required: ClassVar[bool] = True
    stores_responses: ClassVar[bool] = True
    genai_name: ClassVar[str | None] = "openai"
    implementation: ClassVar[str] = "modelgate.upstream.openai:OpenAIProvider"

    kind: Literal["openai"]


class OpenAICompatibleConfig(ProviderConfig):
    implementation: ClassVar[str] = "modelgate.upstream.openai:OpenAICompatibleProvider"

    kind: Literal["openai-compatible"]
