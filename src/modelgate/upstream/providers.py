"""Build provider objects from configuration (the app factory calls this once at start).

Each kind's model (``upstream.kinds``) names its implementation, imported only when a provider
of that kind is configured: the cloud kinds import their optional SDKs (botocore, google-auth,
azure-identity), which a gateway without such providers never loads.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping

from modelgate.upstream.base import Provider
from modelgate.upstream.http_provider import HttpProvider
from modelgate.upstream.kind import ProviderConfig

#: Builds an in-process provider (the simulator) from its configuration.
ProviderFactory = Callable[[ProviderConfig], Provider]


def provider_class(config: ProviderConfig) -> type[HttpProvider]:
    """The implementation the config's kind names (``module:Class``), imported now."""
    if not config.implementation:
        raise ValueError(f"no implementation for provider kind {config.kind!r}")
    module, _, name = config.implementation.partition(":")
    cls: type[HttpProvider] = getattr(importlib.import_module(module), name)
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
        cls = provider_class(config)
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
