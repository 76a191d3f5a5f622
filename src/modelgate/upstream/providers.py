"""Build provider objects from configuration (the app factory calls this once at start)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from modelgate.upstream.anthropic import AnthropicProvider
from modelgate.upstream.base import Provider
from modelgate.upstream.config import ProviderConfig
from modelgate.upstream.openai import OpenAICompatibleProvider, OpenAIProvider
from modelgate.upstream.transport import HttpProvider

#: Builds an in-process provider (the simulator) from its configuration.
ProviderFactory = Callable[[ProviderConfig], Provider]

_HTTP_KINDS: Mapping[str, type[HttpProvider]] = {
    "anthropic": AnthropicProvider,
    "openai": OpenAIProvider,
    "openai-compatible": OpenAICompatibleProvider,
}


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
    cls = _HTTP_KINDS.get(config.kind)
    if cls is None:
        raise ValueError(f"provider {config.name!r}: no implementation for kind {config.kind!r}")
    api_key = env.get(config.api_key_env) if config.api_key_env else None
    return cls(config, api_key or None)


def build_providers(
    configs: Iterable[ProviderConfig],
    env: Mapping[str, str],
    *,
    factories: Mapping[str, ProviderFactory] | None = None,
) -> dict[str, Provider]:
    return {c.name: build_provider(c, env, factories=factories) for c in configs}
