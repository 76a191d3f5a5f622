"""The ``vertex`` kind: Claude on Google Cloud Vertex AI (``upstream.vertex``), with Google
credentials. google-auth (the ``vertex`` extra) is imported only by the checks and the provider."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from modelgate.upstream.kind import BetasConfig, ProviderConfig

#: Vertex AI locations: ``global``, the multi-regions ``us``/``eu``, or ``<area>-<place><n>``.
_VERTEX_REGION = re.compile(r"^(global|us|eu|[a-z]+-[a-z]+[0-9]+)$")


def vertex_base_url(region: str) -> str:
    """Vertex AI's endpoint for a region: the global endpoint, a multi-region one (``us``,
    ``eu``), or the regional ``{region}-aiplatform`` host."""
    if region == "global":
        return "https://aiplatform.googleapis.com"
    if region in ("us", "eu"):
        return f"https://aiplatform.{region}.rep.googleapis.com"
    return f"https://{region}-aiplatform.googleapis.com"


class VertexConfig(ProviderConfig):
    extra: ClassVar[tuple[str, str] | None] = ("vertex", "google.auth")
    genai_name: ClassVar[str | None] = "gcp.vertex_ai"
    implementation: ClassVar[str] = "modelgate.upstream.vertex:VertexProvider"

    kind: Literal["vertex"]
    #: The location (``us-east5``, ``global``).
    region: str | None = None
    #: The Google Cloud project id.
    project: str | None = None
    #: Service-account JSON file(s) (several make a pool); none = application default credentials.
    credentials_file: str | list[str] | None = None
    #: The body's ``anthropic_version`` (default: the provider's).
    anthropic_version: str | None = None
    #: Seconds before an OAuth2 access token expires at which it is replaced (requests never
    #: carry a token about to expire).
    token_refresh_margin: float = Field(default=300.0, ge=0)
    #: Verdicts on betas that override the kind's table.
    betas: BetasConfig = Field(default_factory=BetasConfig)

    def resolved_base_url(self) -> str | None:
        if self.base_url or not self.region:
            return self.base_url
        return vertex_base_url(self.region)

    @property
    def credentials_files(self) -> tuple[str, ...]:
        if self.credentials_file is None:
            return ()
        return (
            (self.credentials_file,)
            if isinstance(self.credentials_file, str)
            else tuple(self.credentials_file)
        )

    def check_kind(self, where: str, env: Mapping[str, str]) -> None:
        if self.api_key_env is not None:
            raise ValueError(f"{where}.api_key_env: vertex uses Google credentials; use credentials_file")
        if not self.region:
            raise ValueError(
                f"{where}.region: required for kind 'vertex' (for example 'us-east5' or 'global')"
            )
        if not _VERTEX_REGION.match(self.region):
            raise ValueError(
                f"{where}.region: {self.region!r} is not a Vertex AI location (like 'us-east5' or 'global')"
            )
        if not self.project:
            raise ValueError(f"{where}.project: required for kind 'vertex' (the Google Cloud project id)")
        self.require_extra(where)
        listed = isinstance(self.credentials_file, list)
        for i, name in enumerate(self.credentials_files):
            key = f"{where}.credentials_file" + (f"[{i}]" if listed else "")
            if not Path(name).is_file():
                raise ValueError(f"{key}: file {name!r} does not exist")
        from modelgate.upstream.google_auth import load_google_credentials

        load_google_credentials(self.credentials_files, listed, self.token_refresh_margin, where)
