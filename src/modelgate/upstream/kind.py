"""What every provider kind is: the settings all kinds share and the facts each kind declares.

Each kind subclasses ``ProviderConfig`` in its own module under ``upstream.kinds`` and is
registered in that package's union (discriminated on ``kind``). A kind's class declares, as class
attributes, its pip extra, its default base URL, whether its upstream keeps Responses state,
its OpenTelemetry GenAI provider name, whether an API key is required and where its
implementation lives; its ``check`` method holds its start-up checks. Nothing outside a kind's
module names the kind.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BetasConfig(Strict):
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


class TimeoutConfig(Strict):
    """Seconds. ``first_byte`` runs until the response headers arrive; ``idle`` bounds each gap
    between body chunks; ``total`` bounds the whole exchange, streaming included."""

    connect: float = Field(default=10.0, gt=0)
    first_byte: float = Field(default=60.0, gt=0)
    idle: float = Field(default=60.0, gt=0)
    total: float = Field(default=600.0, gt=0)


class CredentialPoolConfig(Strict):
    """How a provider's credentials are taken out and brought back (docs/upstreams.md)."""

    #: Seconds a credential rests after a 429 that named no ``retry-after``.
    throttle_cooldown: float = Field(default=10.0, ge=0)
    #: Upper bound on the rest a 429's ``retry-after`` can impose on one credential.
    max_throttle_cooldown: float = Field(default=300.0, ge=0)
    #: Seconds a refused credential (401/403) stays out before one request tries it again.
    refused_recheck: float = Field(default=600.0, ge=0)


class ProviderConfig(Strict):
    """The settings every kind understands; a kind's subclass adds its own and narrows ``kind``."""

    #: ``(pip extra, module it installs)`` when the kind needs an optional extra.
    extra: ClassVar[tuple[str, str] | None] = None
    #: The base URL when none is configured (``None``: the kind has no public default).
    default_base_url: ClassVar[str | None] = None
    #: Whether the kind speaks HTTP, hence needs a base URL.
    speaks_http: ClassVar[bool] = True
    #: Whether the kind cannot work without ``api_key_env``.
    key_required: ClassVar[bool] = False
    #: Whether the kind's upstream implements stored Responses state (see ``responses_state``).
    stores_responses: ClassVar[bool] = False
    #: Whether the upstream runs its dialect's hosted tools (Amazon Bedrock's InvokeModel runs no
    #: Anthropic server tools: a web search translated for it is dropped and named instead).
    runs_hosted_tools: ClassVar[bool] = True
    #: ``gen_ai.provider.name`` (the OpenTelemetry GenAI conventions' well-known value; the
    #: kind's own name when the conventions name none).
    genai_name: ClassVar[str | None] = None
    #: ``module:Class`` of the implementation, imported only when a provider of this kind is
    #: built (cloud kinds load optional SDKs); empty when the application supplies a factory.
    implementation: ClassVar[str] = ""

    name: str = Field(min_length=1)
    kind: str
    #: Scheme + host (+ optional path prefix), without ``/v1``; a trailing ``/v1`` is tolerated.
    #: Defaults to the public API for ``anthropic``/``openai`` and to the regional endpoint for
    #: ``bedrock``/``vertex``; required for ``openai-compatible`` and ``azure-openai``.
    base_url: str | None = None
    #: Name(s) of the environment variable(s) holding the upstream API key(s), never the keys
    #: themselves. Several names make a credential pool.
    api_key_env: str | list[str] | None = None
    credential_pool: CredentialPoolConfig = Field(default_factory=CredentialPoolConfig)
    timeouts: TimeoutConfig = Field(default_factory=TimeoutConfig)
    #: Connections (hence requests) in flight to this provider; excess requests queue in the pool.
    max_concurrency: int = Field(default=256, ge=1)
    #: ``forward`` the client's ``anthropic-beta``, ``drop`` it, or forward only the listed betas.
    anthropic_beta: Literal["forward", "drop"] | list[str] = "forward"
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

    #: Keys given that only other kinds understand, with those kinds ("bedrock, vertex"); set by
    #: the registry so that ``check`` names them at start-up.
    _misplaced: tuple[tuple[str, str], ...] = PrivateAttr(default=())

    @property
    def keeps_responses(self) -> bool:
        """Whether this upstream keeps the Responses state it is sent."""
        return self.stores_responses and self.responses_state == "upstream"

    @property
    def genai_provider(self) -> str:
        return self.genai_name or self.kind

    def resolved_base_url(self) -> str | None:
        return self.base_url or self.default_base_url

    @property
    def api_key_envs(self) -> tuple[str, ...]:
        """``api_key_env`` as a tuple (empty when unset)."""
        if self.api_key_env is None:
            return ()
        return (self.api_key_env,) if isinstance(self.api_key_env, str) else tuple(self.api_key_env)

    def check(self, where: str, env: Mapping[str, str]) -> None:
        """Start-up checks: raise ``ValueError`` naming the offending key. ``where`` names this
        provider in the file (``providers[0] ('name')``)."""
        for key, kinds in self._misplaced:
            raise ValueError(f"{where}.{key}: only for kind(s) {kinds}")
        self.check_kind(where, env)

    def check_kind(self, where: str, env: Mapping[str, str]) -> None:
        """The kind's own start-up checks (none by default)."""

    def require_extra(self, where: str) -> ModuleType:
        """Import the library the kind needs, or say which extra installs it."""
        if self.extra is None:
            raise ValueError(f"{where}.kind: kind {self.kind!r} needs no optional extra")
        extra, module = self.extra
        try:
            return importlib.import_module(module)
        except ImportError:
            raise ValueError(
                f"{where}.kind: kind {self.kind!r} needs the optional extra: "
                f"pip install 'modelgate[{extra}]' ({module} is not installed)"
            ) from None
