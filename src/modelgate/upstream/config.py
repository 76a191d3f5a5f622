"""Configuration of upstream providers, model deployments and routing (pydantic v2).

These models are embedded in the gateway's configuration file; ``validate_upstreams`` checks the
cross-references a single model cannot see (deployment -> provider, api_key_env -> environment)
at start-up, so a bad file fails fast with a message naming the offending key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ProviderKind = Literal["anthropic", "openai", "openai-compatible", "simulator"]

#: Kinds that speak HTTP (need ``base_url``) and kinds that cannot work without a credential.
HTTP_KINDS: frozenset[str] = frozenset({"anthropic", "openai", "openai-compatible"})
KEY_REQUIRED_KINDS: frozenset[str] = frozenset({"anthropic", "openai"})

DEFAULT_BASE_URLS: Mapping[str, str] = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TimeoutConfig(_Strict):
    """Seconds. ``first_byte`` runs until the response headers arrive; ``idle`` bounds each gap
    between body chunks; ``total`` bounds the whole exchange, streaming included."""

    connect: float = Field(default=10.0, gt=0)
    first_byte: float = Field(default=60.0, gt=0)
    idle: float = Field(default=60.0, gt=0)
    total: float = Field(default=600.0, gt=0)


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


class ProviderConfig(_Strict):
    name: str = Field(min_length=1)
    kind: ProviderKind
    #: Scheme + host (+ optional path prefix), without ``/v1``; a trailing ``/v1`` is tolerated.
    #: Defaults to the public API for ``anthropic``/``openai``; required for ``openai-compatible``.
    base_url: str | None = None
    #: Name of the environment variable holding the upstream credential (never the key itself).
    api_key_env: str | None = None
    timeouts: TimeoutConfig = Field(default_factory=TimeoutConfig)
    #: Connections (hence requests) in flight to this provider; excess requests queue in the pool.
    max_concurrency: int = Field(default=256, ge=1)
    #: ``forward`` the client's ``anthropic-beta``, ``drop`` it, or forward only the listed betas.
    anthropic_beta: Literal["forward", "drop"] | list[str] = "forward"
    #: Extra static headers sent on every request (cannot override the credential headers).
    headers: dict[str, str] = Field(default_factory=dict)

    def resolved_base_url(self) -> str | None:
        return self.base_url or DEFAULT_BASE_URLS.get(self.kind)


class DeploymentConfig(_Strict):
    """One way to serve a gateway model: a provider and the model id that provider knows."""

    provider: str = Field(min_length=1)
    upstream_model: str = Field(min_length=1)
    weight: int = Field(default=1, ge=1)


class RoutingConfig(_Strict):
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


def validate_upstreams(
    providers: list[ProviderConfig] | Mapping[str, ProviderConfig],
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
        if provider.kind in HTTP_KINDS and not provider.resolved_base_url():
            raise ValueError(f"{where}.base_url: required for kind {provider.kind!r}")
        base = provider.resolved_base_url()
        if base is not None and not base.startswith(("http://", "https://")):
            raise ValueError(f"{where}.base_url: must start with http:// or https://, got {base!r}")
        if provider.api_key_env is not None:
            if not env.get(provider.api_key_env):
                raise ValueError(
                    f"{where}.api_key_env: environment variable {provider.api_key_env!r} is not set"
                )
        elif provider.kind in KEY_REQUIRED_KINDS:
            raise ValueError(f"{where}.api_key_env: required for kind {provider.kind!r}")
    for model, deployments in deployments_by_model.items():
        if not deployments:
            raise ValueError(f"deployments[{model!r}]: at least one deployment is required")
        for j, deployment in enumerate(deployments):
            if deployment.provider not in by_name:
                raise ValueError(
                    f"deployments[{model!r}][{j}].provider: unknown provider {deployment.provider!r}"
                )
