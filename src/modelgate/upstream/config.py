"""Configuration of upstream providers, model deployments and routing (pydantic v2).

These models are embedded in the gateway's configuration file; ``validate_upstreams`` checks the
cross-references a single model cannot see (deployment -> provider, api_key_env -> environment)
at start-up, so a bad file fails fast with a message naming the offending key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from modelgate.upstream.kind import BetasConfig, CredentialPoolConfig, ProviderConfig, Strict, TimeoutConfig
from modelgate.upstream.kinds import ProviderSettings, parse_provider

__all__ = [
    "BetasConfig",
    "CredentialPoolConfig",
    "DeploymentConfig",
    "ProviderConfig",
    "ProviderSettings",
    "RoutingConfig",
    "SimulatorConfig",
    "TimeoutConfig",
    "parse_provider",
    "validate_upstreams",
]


class SimulatorConfig(BaseModel):
    """The built-in simulator upstream (deterministic text; labelled as a simulator everywhere)."""

    model_config = ConfigDict(extra="forbid")

    #: Milliseconds before the first byte.
    latency_ms: float = Field(0.0, ge=0)
    #: Output pacing; 0 means as fast as possible.
    tokens_per_second: float = Field(0.0, ge=0)
    #: Words of reply text when the request's max_tokens allows.
    reply_words: int = Field(24, ge=1)
    #: Request bodies larger than this are simulated in a worker process (as the gateway does
    #: with ``server.offload_body_bytes``), so the in-process simulator never stalls the loop.
    offload_body_bytes: int = Field(256 * 1024, ge=1024)


class DeploymentConfig(Strict):
    """One way to serve a gateway model: a provider and the model id that provider knows."""

    provider: str = Field(min_length=1)
    upstream_model: str = Field(min_length=1)
    weight: int = Field(default=1, ge=1)
    #: Output tokens asked of this deployment when a Chat or Responses client omits its limit
    #: (a server with a short context refuses the model's default); None: the model's default.
    default_max_tokens: int | None = Field(default=None, ge=1)


class RoutingConfig(Strict):
    """Retry, failover and cooldown policy shared by all models.

    Retry budget (Finagle's ``RetryBudget``): every first attempt deposits ``retry_budget_ratio``
    tokens, every retry withdraws one; deposits and withdrawals older than ``retry_budget_window``
    seconds are forgotten, and a reserve of ``retry_budget_min_per_second * window`` tokens keeps
    low-traffic routes retrying. So over any window, retries ≤ ratio * requests + reserve: a full
    outage multiplies upstream load by at most ``1 + ratio`` (plus the reserve), never by
    ``max_attempts``.
    """

    max_attempts: int = Field(default=3, ge=1)
    #: Full-jitter exponential backoff: sleep uniform(0, min(max, base * 2^retry)).
    backoff_base: float = Field(default=0.05, ge=0)
    backoff_max: float = Field(default=2.0, ge=0)
    #: An upstream ``retry-after`` longer than this is not waited for: fail over or give up.
    retry_after_cap: float = Field(default=5.0, ge=0)
    #: Seconds a deployment is skipped after ``failures_to_cooldown`` consecutive failures.
    cooldown: float = Field(default=30.0, ge=0)
    failures_to_cooldown: int = Field(default=3, ge=1)
    retry_budget_ratio: float = Field(default=0.2, ge=0)
    retry_budget_min_per_second: float = Field(default=10.0, ge=0)
    retry_budget_window: float = Field(default=10.0, gt=0)
    #: Session affinity (``upstream.affinity``): ``session`` keeps a session on the deployment
    #: and pool credential that served it, so the upstream's prompt cache is read, not rewritten;
    #: ``off`` routes each request alone (weighted random deployment, round-robin credential).
    affinity: Literal["session", "off"] = "session"
    #: Seconds a session's pin is kept after its last request (upstream prompt caches live 5 min
    #: to 1 h).
    affinity_ttl_seconds: float = Field(default=600.0, gt=0)
    #: Pins kept per gateway instance (least recently used dropped first).
    affinity_max_sessions: int = Field(default=100_000, ge=1)


def validate_upstreams(
    providers: Sequence[ProviderConfig] | Mapping[str, ProviderConfig],
    deployments_by_model: Mapping[str, list[DeploymentConfig]],
    env: Mapping[str, str],
) -> None:
    """Raise ``ValueError`` naming the bad key; return ``None`` when everything resolves."""
    items = list(providers.values()) if isinstance(providers, Mapping) else list(providers)
    by_name: dict[str, ProviderConfig] = {}
    for i, provider in enumerate(items):
        where = f"providers[{i}] ({provider.name!r})"
        if provider.name in by_name:
            raise ValueError(f"{where}.name: duplicate provider name {provider.name!r}")
        by_name[provider.name] = provider
        names = provider.api_key_envs
        if isinstance(provider.api_key_env, list) and not names:
            raise ValueError(f"{where}.api_key_env: an empty list names no credential")
        if len(set(names)) != len(names):
            raise ValueError(f"{where}.api_key_env: a variable is listed twice")
        for j, name in enumerate(names):
            key = f"{where}.api_key_env" + (f"[{j}]" if isinstance(provider.api_key_env, list) else "")
            if not env.get(name):
                raise ValueError(f"{key}: environment variable {name!r} is not set")
        if not names and provider.key_required:
            raise ValueError(f"{where}.api_key_env: required for kind {provider.kind!r}")
        provider.check(where, env)
        if provider.speaks_http and not provider.resolved_base_url():
            raise ValueError(f"{where}.base_url: required for kind {provider.kind!r}")
        base = provider.resolved_base_url()
        if base is not None and not base.startswith(("http://", "https://")):
            raise ValueError(f"{where}.base_url: must start with http:// or https://, got {base!r}")
    for model, deployments in deployments_by_model.items():
        if not deployments:
            raise ValueError(f"deployments[{model!r}]: at least one deployment is required")
        for j, deployment in enumerate(deployments):
            if deployment.provider not in by_name:
                raise ValueError(
                    f"deployments[{model!r}][{j}].provider: unknown provider {deployment.provider!r}"
                )
