"""The ``anthropic`` kind: the Messages API (``upstream.anthropic``)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from modelgate.upstream.kind import BetasConfig, ProviderConfig


class AnthropicConfig(ProviderConfig):
    default_base_url: ClassVar[str | None] = "https://api.anthropic.com"
    key_required: ClassVar[bool] = True
    genai_name: ClassVar[str | None] = "anthropic"
    implementation: ClassVar[str] = "modelgate.upstream.anthropic:AnthropicProvider"

    kind: Literal["anthropic"]
    #: Verdicts on betas that override the kind's table.
    betas: BetasConfig = Field(default_factory=BetasConfig)
