"""From settings to the catalogue and router that serve them, keeping what did not change.

``RoutingBuilder`` builds a router per configuration (at start, on a SIGHUP reload, on a change
through the admin API). A provider whose effective configuration and credentials are the same as
the running one's is not rebuilt: the new router shares the running provider object, so its
connection pool and credential pool (refused and resting credentials) carry on, and the router
adopts the running router's cooldowns, retry budget and session pins (``Router.adopt``).

A provider is closed once no router that holds it is in use any more: the running router always
holds its providers; a replaced one holds them until its last exchange ended (``retire``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from modelgate.catalogue import Catalogue, build_catalogue
from modelgate.config import ConfigError, Settings
from modelgate.liveconfig.overlay import references
from modelgate.offload import Offload
from modelgate.upstream.base import Deployment, Provider
from modelgate.upstream.config import validate_upstreams
from modelgate.upstream.kind import ProviderConfig
from modelgate.upstream.providers import ProviderFactory, build_provider
from modelgate.upstream.router import Router
from modelgate.upstream.simulator import SimulatorProvider


def deployments_of(settings: Settings, catalogue: Catalogue) -> dict[str, list[Deployment]]:
    """Configured deployments, plus the default provider for every other catalogue model."""
    out: dict[str, list[Deployment]] = {}
    for model_id, configs in settings.deployments.items():
        if model_id not in catalogue.models:
            raise ConfigError(f"deployments.{model_id}: not a catalogue model id")
        out[model_id] = [Deployment.from_config(c) for c in configs]
    for model_id in catalogue.models:
        if model_id not in out and settings.default_provider:
            out[model_id] = [Deployment(settings.default_provider, model_id)]
    return out


def served_catalogue(
    settings: Settings, catalogue: Catalogue, deployments: Mapping[str, list[Deployment]]
) -> Catalogue:
    """The catalogue the gateway serves. Invariant: every model in it has a deployment, so a
    request is never refused at request time for want of a route (``unrouted`` decides)."""
    unrouted = [m for m in catalogue.models if not deployments.get(m)]
    if not unrouted:
        return catalogue
    if settings.unrouted == "error":
        raise ConfigError(
            f"deployments: no deployment for catalogue model(s) {', '.join(unrouted)}; add "
            '[[deployments."<model>"]] entries, set default_provider, or set unrouted = "hide"'
        )
    return catalogue.restricted_to(set(catalogue.models) - set(unrouted))


def check_routing(settings: Settings, env: Mapping[str, str]) -> Catalogue:
    """The start-up checks of the catalogue, deployments and providers; the served catalogue."""
    try:
        catalogue = build_catalogue(settings.catalogue)
        deployments = deployments_of(settings, catalogue)
        validate_upstreams(settings.providers, settings.deployments, env)
    except ValueError as exc:  # ConfigError is one
        raise ConfigError(str(exc)) from exc
    return served_catalogue(settings, catalogue, deployments)


def _fingerprint(config: ProviderConfig, settings: Settings, env: Mapping[str, str]) -> str:
    """What makes a provider: its fields, the credentials they refer to, the simulator's knobs."""
    digest = hashlib.sha256(config.model_dump_json(by_alias=True).encode())
    dumped = config.model_dump(by_alias=True)
    for name in sorted({*config.api_key_envs, *references(dumped)}):
        digest.update(b"\0" + name.encode() + b"\0" + env.get(name, "").encode())
    if config.kind == "simulator":
        digest.update(settings.simulator.model_dump_json().encode())
    return digest.hexdigest()


class RoutingBuilder:
    def __init__(self, offload: Offload) -> None:
        self._offload = offload
        #: The running router's providers by name, with the fingerprint each was built from.
        self._running: dict[str, tuple[str, Provider]] = {}
        #: Routers (running or replaced and not yet unused) holding each provider, by identity.
        self._holders: dict[int, int] = {}

    def build(self, settings: Settings, env: Mapping[str, str]) -> tuple[Catalogue, Router, dict[str, str]]:
        """Checked (ConfigError naming the key), then built; nothing is installed yet. Returns
        the fingerprints to pass to ``installed`` once the router is swapped in. May run in a
        worker thread: it reads the running providers, never changes them."""
        catalogue = check_routing(settings, env)
        prints: dict[str, str] = {}
        providers: dict[str, Provider] = {}
        try:
            for config in settings.providers:
                prints[config.name] = fingerprint = _fingerprint(config, settings, env)
                running = self._running.get(config.name)
                if running is not None and running[0] == fingerprint:
                    providers[config.name] = running[1]
                    continue
                provider = build_provider(config, env, factories={"simulator": self._simulator(settings)})
                providers[config.name] = provider
        except ValueError as exc:  # a credential that resolved for the check and no more
            # (providers built so far opened no connection: pools open on first use)
            raise ConfigError(str(exc)) from exc
        full = build_catalogue(settings.catalogue)
        router = Router(providers, deployments_of(settings, full), settings.routing)
        return catalogue, router, prints

    def _simulator(self, settings: Settings) -> ProviderFactory:
        offload = self._offload

        def simulator(config: ProviderConfig) -> Provider:
            return SimulatorProvider(config.name, settings.simulator, offload)

        return simulator

    def installed(self, router: Router, prints: Mapping[str, str], replaced: Router | None) -> None:
        """``router`` now serves (built by ``build`` with ``prints``); ``replaced`` served before
        and is retired by the caller (``retired`` once unused)."""
        if replaced is not None:
            router.adopt(replaced)
        self._running = {name: (prints[name], p) for name, p in router.providers.items()}
        for provider in router.providers.values():
            self._holders[id(provider)] = self._holders.get(id(provider), 0) + 1

    async def retired(self, router: Router) -> None:
        """``router`` was replaced and no exchange uses it any more: close the providers no
        other router holds."""
        for provider in router.providers.values():
            left = self._holders.get(id(provider), 1) - 1
            if left > 0:
                self._holders[id(provider)] = left
                continue
            self._holders.pop(id(provider), None)
            await provider.aclose()

    async def discard(self, router: Router) -> None:
        """A router that was built and never installed: close the providers it built."""
        shared = {id(p) for _, p in self._running.values()}
        for provider in router.providers.values():
            if id(provider) not in shared and id(provider) not in self._holders:
                await provider.aclose()
