"""The ``azure-openai`` kind: Azure OpenAI (``upstream.azure``), with an ``api-key`` or a
Microsoft Entra ID token (azure-identity, the ``azure`` extra, imported only with ``entra_id``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import Field

from modelgate.upstream.kind import ProviderConfig


class AzureOpenAIConfig(ProviderConfig):
    extra: ClassVar[tuple[str, str] | None] = ("azure", "azure.identity")
    stores_responses: ClassVar[bool] = True
    genai_name: ClassVar[str | None] = "azure.ai.openai"
    implementation: ClassVar[str] = "modelgate.upstream.azure:AzureOpenAIProvider"

    kind: Literal["azure-openai"]
    #: ``v1`` (``/openai/v1/...``) or ``deployments``
    #: (``/openai/deployments/{deployment}/...?api-version=``).
    azure_api: Literal["v1", "deployments"] = "v1"
    #: The ``api-version`` query parameter (required with ``deployments``).
    api_version: str | None = None
    #: Authenticate with a Microsoft Entra ID token (azure-identity's default credential chain)
    #: instead of ``api-key``.
    entra_id: bool = False
    #: With ``entra_id``: seconds before an access token expires at which it is replaced.
    token_refresh_margin: float = Field(default=300.0, ge=0)

    def check_kind(self, where: str, env: Mapping[str, str]) -> None:
        if self.entra_id and self.api_key_env is not None:
            raise ValueError(f"{where}.entra_id: use either api_key_env or entra_id, not both")
        if not self.entra_id and self.api_key_env is None:
            raise ValueError(
                f"{where}.api_key_env: required for kind 'azure-openai' (or set entra_id = true)"
            )
        if self.azure_api == "deployments" and not self.api_version:
            raise ValueError(
                f"{where}.api_version: required with azure_api = 'deployments' (like '2024-10-21')"
            )
        if self.entra_id:
            self.require_extra(where)
