"""Configuration of upstream providers, model deployments and routing (pydantic v2).

These models are embedded in the gateway's configuration file; ``validate_upstreams`` checks the
cross-references a single model cannot see (deployment -> provider, api_key_env -> environment)
at start-up, so a bad file fails fast with a message naming the offending key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

ProviderKind = Literal[
    "anthropic", "openai", "openai-compatible", "bedrock", "vertex", "azure-openai", "simulator"
]

#: Kinds that speak HTTP (need ``base_url``) and kinds that cannot work without an API key.
HTTP_KINDS: frozenset[str] = frozenset(
    {"anthropic", "openai", "openai-compatible", "bedrock", "vertex", "azure-openai"}
)
KEY_REQUIRED_KINDS: frozenset[str] = frozenset({"anthropic", "openai"})
#: Kinds whose upstream implements stored Responses state (``ProviderConfig.responses_state``).
RESPONSES_STATE_KINDS: frozenset[str] = frozenset({"openai", "azure-openai"})

DEFAULT_BASE_URLS: Mapping[str, str] = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BetasConfig(_Strict):
    """Per-provider verdicts on ``anthropic-beta`` values, over the kind's table
    (``upstream.betas``): ``pass`` sends a beta as named, ``strip`` drops it with its body
    fields, ``refuse`` answers 400 naming it."""

    pass_: list[str] = Field(default_factory=list, alias="pass")
    strip: list[str] = Field(default_factory=list)
    refuse: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _names(self) -> BetasConfig:
        seen: set[str] = set()
        for name in (*self.pass_, *self.strip, *self.refuse):
            if not name or any(c in name for c in ", \t"):
                raise ValueError(f"beta names are single values without commas or spaces, not {name!r}")
            if name in seen:
                raise ValueError(f"beta {name!r} is listed more than once")
            seen.add(name)
        return self

    def actions(self) -> dict[str, Literal["pass", "strip", "refuse"]]:
        out: dict[str, Literal["pass", "strip", "refuse"]] = {b: "pass" for b in self.pass_}
        out.update({b: "strip" for b in self.strip})
        out.update({b: "refuse" for b in self.refuse})
        return out


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


class AwsCredentialConfig(_Strict):
    """One AWS identity of a ``bedrock`` credential pool: a named profile of the shared AWS
    files, or the names of the environment variables holding an access key (never the key)."""

    profile: str | None = Field(default=None, min_length=1)
    access_key_id_env: str | None = Field(default=None, min_length=1)
    secret_access_key_env: str | None = Field(default=None, min_length=1)
    session_token_env: str | None = Field(default=None, min_length=1)


class CredentialPoolConfig(_Strict):
    """How a provider's credentials are taken out and brought back (docs/upstreams.md)."""

    #: Seconds a credential rests after a 429 that named no ``retry-after``.
    throttle_cooldown: float = Field(default=10.0, ge=0)
    #: Upper bound on the rest a 429's ``retry-after`` can impose on one credential.
    max_throttle_cooldown: float = Field(default=300.0, ge=0)
    #: Seconds a refused credential (401/403) stays out before one request tries it again.
    refused_recheck: float = Field(default=600.0, ge=0)


class ProviderConfig(_Strict):
    name: str = Field(min_length=1)
    kind: ProviderKind
    #: Scheme + host (+ optional path prefix), without ``/v1``; a trailing ``/v1`` is tolerated.
    #: Defaults to the public API for ``anthropic``/``openai`` and to the regional endpoint for
    #: ``bedrock``/``vertex``; required for ``openai-compatible`` and ``azure-openai``.
    base_url: str | None = None
    #: Name(s) of the environment variable(s) holding the upstream API key(s), never the keys
    #: themselves. Several names make a credential pool.
    api_key_env: str | list[str] | None = None
    #: ``bedrock`` and ``vertex``: the cloud region (``us-east-1``; ``us-east5``, ``global``).
    region: str | None = None
    #: ``bedrock``: the AWS identities to use (a pool when several); none = the standard AWS chain.
    aws_credentials: list[AwsCredentialConfig] | None = None
    #: ``vertex``: the Google Cloud project id.
    project: str | None = None
    #: ``vertex``: service-account JSON file(s) (several make a pool); none = application default
    #: credentials.
    credentials_file: str | list[str] | None = None
    #: ``bedrock``/``vertex``: the body's ``anthropic_version`` (default per kind).
    anthropic_version: str | None = None
    #: ``azure-openai``: ``v1`` (``/openai/v1/...``) or ``deployments``
    #: (``/openai/deployments/{deployment}/...?api-version=``).
    azure_api: Literal["v1", "deployments"] = "v1"
    #: ``azure-openai``: the ``api-version`` query parameter (required with ``deployments``).
    api_version: str | None = None
    #: ``azure-openai``: authenticate with a Microsoft Entra ID token (azure-identity's default
    #: credential chain) instead of ``api-key``.
    entra_id: bool = False
    #: ``vertex`` and ``azure-openai`` with ``entra_id``: seconds before an OAuth2 access token
    #: expires at which it is replaced (requests never carry a token about to expire).
    token_refresh_margin: float = Field(default=300.0, ge=0)
    credential_pool: CredentialPoolConfig = Field(default_factory=CredentialPoolConfig)
    timeouts: TimeoutConfig = Field(default_factory=TimeoutConfig)
    #: Connections (hence requests) in flight to this provider; excess requests queue in the pool.
    max_concurrency: int = Field(default=256, ge=1)
    #: ``forward`` the client's ``anthropic-beta``, ``drop`` it, or forward only the listed betas.
    anthropic_beta: Literal["forward", "drop"] | list[str] = "forward"
    #: ``anthropic``, ``bedrock``, ``vertex``: verdicts on betas that override the kind's table.
    betas: BetasConfig = Field(default_factory=BetasConfig)
    #: Extra static headers sent on every request (cannot override the credential headers).
    headers: dict[str, str] = Field(default_factory=dict)
    #: ``openai`` and ``azure-openai``: who keeps Responses state (stored responses,
    #: ``previous_response_id``, ``prompt``). ``upstream``: the upstream does, and requests that
    #: refer to state it holds pass through unchanged; ``gateway``: the gateway alone does (an
    #: upstream with storage off, e.g. zero data retention), expands stored history into the
    #: request and sends ``store: false``. Other kinds keep nothing: the gateway always does.
    responses_state: Literal["upstream", "gateway"] = "upstream"
    #: Hosted tools (Responses ``web_search``, ``file_search``, …, Messages server tools) that a
    #: translated request offers and this upstream's dialect cannot run: ``drop`` them (named in
    #: the ``x-modelgate-dropped-tools`` header) or ``refuse`` the request (400). A
    #: ``tool_choice`` forcing such a tool is a 400 either way.
    hosted_tools: Literal["drop", "refuse"] = "drop"

    @property
    def keeps_responses(self) -> bool:
        """Whether this upstream keeps the Responses state it is sent."""
        return self.kind in RESPONSES_STATE_KINDS and self.responses_state == "upstream"

    def resolved_base_url(self) -> str | None:
        if self.base_url:
            return self.base_url
        if self.kind == "bedrock" and self.region:
            suffix = ".amazonaws.com.cn" if self.region.startswith("cn-") else ".amazonaws.com"
            return f"https://bedrock-runtime.{self.region}{suffix}"
        if self.kind == "vertex" and self.region:
            return vertex_base_url(self.region)
        return DEFAULT_BASE_URLS.get(self.kind)

    @property
    def api_key_envs(self) -> tuple[str, ...]:
        """``api_key_env`` as a tuple (empty when unset)."""
        if self.api_key_env is None:
            return ()
        return (self.api_key_env,) if isinstance(self.api_key_env, str) else tuple(self.api_key_env)

    @property
    def credentials_files(self) -> tuple[str, ...]:
        if self.credentials_file is None:
            return ()
        return (
            (self.credentials_file,)
            if isinstance(self.credentials_file, str)
            else tuple(self.credentials_file)
        )


def vertex_base_url(region: str) -> str:
    """Vertex AI's endpoint for a region: the global endpoint, a multi-region one (``us``,
    ``eu``), or the regional ``{region}-aiplatform`` host."""
    if region == "global":
        return "https://aiplatform.googleapis.com"
    if region in ("us", "eu"):
        return f"https://aiplatform.{region}.rep.googleapis.com"
    return f"https://{region}-aiplatform.googleapis.com"


class DeploymentConfig(_Strict):
    """One way to serve a gateway model: a provider and the model id that provider knows."""

    provider: str = Field(min_length=1)
    upstream_model: str = Field(min_length=1)
    weight: int = Field(default=1, ge=1)
    #: Output tokens asked of this deployment when a Chat or Responses client omits its limit
    #: (a server with a short context refuses the model's default); None: the model's default.
    default_max_tokens: int | None = Field(default=None, ge=1)


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
    providers: list[ProviderConfig] | Mapping[str, ProviderConfig],
    deployments_by_model: Mapping[str, list[DeploymentConfig]],
    env: Mapping[str, str],
) -> None:
    """Raise ``ValueError`` naming the bad key; return ``None`` when everything resolves."""
    from modelgate.upstream.kind_checks import check_provider  # imports config: a cycle at load time

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
        if not names and provider.kind in KEY_REQUIRED_KINDS:
            raise ValueError(f"{where}.api_key_env: required for kind {provider.kind!r}")
        check_provider(provider, where, env)
        if provider.kind in HTTP_KINDS and not provider.resolved_base_url():
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
