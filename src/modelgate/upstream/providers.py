"""Build provider objects from configuration (the app factory calls this once at start).

Each HTTP kind lives in its own module, imported only when a provider of that kind is
configured: the cloud kinds import their optional SDKs (botocore, google-auth, azure-identity),
which a gateway without such providers never loads.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping

from modelgate.upstream.base import Provider
from modelgate.upstream.config import ProviderConfig
from modelgate.upstream.http_provider import HttpProvider

#: Builds an in-process provider (the simulator) from its configuration.
ProviderFactory = Callable[[ProviderConfig], Provider]

#: kind -> (module, class) of its implementation.
_HTTP_KINDS: Mapping[str, tuple[str, str]] = {
    "anthropic": ("modelgate.upstream.anthropic", "AnthropicProvider"),
    "openai": ("modelgate.upstream.openai", "OpenAIProvider"),
    "openai-compatible": ("modelgate.upstream.openai", "OpenAICompatibleProvider"),
    "bedrock": ("modelgate.upstream.bedrock", "BedrockProvider"),
    "vertex": ("modelgate.upstream.vertex", "VertexProvider"),
    "azure-openai": ("modelgate.upstream.azure", "AzureOpenAIProvider"),
}


def provider_class(kind: str) -> type[HttpProvider]:
    where = _HTTP_KINDS.get(kind)
    if where is None:
        raise ValueError(f"no implementation for provider kind {kind!r}")
    cls: type[HttpProvider] = getattr(importlib.import_module(where[0]), where[1])
    return cls


def build_provider(
    config: ProviderConfig,
    env: Mapping[str, str],
    *,
    factories: Mapping[str, ProviderFactory] | None = None,
) -> Provider:
    """``factories`` supplies kinds implemented outside this package (``simulator``); they take
    precedence, so tests can substitute any kind. Call ``validate_upstreams`` first."""
    if factories and config.kind in factories:
        return factories[config.kind](config)
    try:
        cls = provider_class(config.kind)
    except ValueError as exc:
        raise ValueError(f"provider {config.name!r}: {exc}") from None
    return cls.from_config(config, env)


def build_providers(
    configs: Iterable[ProviderConfig],
    env: Mapping[str, str],
    *,
    factories: Mapping[str, ProviderFactory] | None = None,
) -> dict[str, Provider]:
    return {c.name: build_provider(c, env, factories=factories) for c in configs}
