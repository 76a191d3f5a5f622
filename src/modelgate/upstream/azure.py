"""The ``azure-openai`` provider kind: Chat Completions and Responses on Azure OpenAI.

Two URL styles (``azure_api``): the v1 API, ``{endpoint}/openai/v1/chat/completions`` and
``/openai/v1/responses`` (the deployment name goes in the body's ``model``; ``api_version`` is
sent only when set), and the deployment-style API,
``/openai/deployments/{deployment}/chat/completions?api-version=...`` and
``/openai/responses?api-version=...``. The credential is an ``api-key`` header (a pool when
several ``api_key_env`` names are given) or a Microsoft Entra ID bearer token (``entra_id``).
Every 403 from Azure concerns the gateway's identity (key or RBAC role), never the client's
request: it refuses the credential.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Self
from urllib.parse import quote, urlencode

import orjson

from modelgate import errors
from modelgate.upstream.base import Dialect
from modelgate.upstream.credentials import ApiKey, Credential, Outgoing
from modelgate.upstream.error_mapping import UpstreamError
from modelgate.upstream.http_provider import HttpProvider
from modelgate.upstream.kind import ProviderConfig
from modelgate.upstream.kinds.azure import AzureOpenAIConfig

_V1_PATHS: Mapping[Dialect, str] = {
    "chat": "/openai/v1/chat/completions",
    "responses": "/openai/v1/responses",
}


class AzureOpenAIProvider(HttpProvider):
    dialects: frozenset[Dialect] = frozenset({"chat", "responses"})
    _paths: Mapping[Dialect, str] = _V1_PATHS
    _config: AzureOpenAIConfig

    @classmethod
    def from_config(cls, config: ProviderConfig, env: Mapping[str, str]) -> Self:
        if isinstance(config, AzureOpenAIConfig) and config.entra_id:
            from modelgate.upstream.azure_auth import EntraCredential  # azure-identity: only when used

            return cls(config, [EntraCredential(config.token_refresh_margin)])
        return super().from_config(config, env)

    @classmethod
    def api_key_credential(cls, label: str, key: str) -> Credential:
        return ApiKey(label, key, "api-key")

    def _prepare(
        self, dialect: Dialect, body: bytes, stream: bool, client_headers: Mapping[str, str], path_suffix: str
    ) -> Outgoing:
        config = self._config
        query = f"?{urlencode({'api-version': config.api_version})}" if config.api_version else ""
        if config.azure_api == "v1":
            path = _V1_PATHS[dialect]
        elif dialect == "responses":
            path = "/openai/responses"
        else:
            path = f"/openai/deployments/{quote(_deployment(body), safe='')}/chat/completions"
        return Outgoing(
            self._base_url + path + query, self._headers(stream, client_headers), body, encoded=True
        )

    def credentials_rejected(self, status: int, detail: UpstreamError) -> bool:
        return status in (401, 403)


def _deployment(body: bytes) -> str:
    """The deployment name: the model id the gateway put in the body."""
    try:
        model = orjson.loads(body).get("model")
    except (orjson.JSONDecodeError, AttributeError):
        raise errors.InvalidRequest("the request body is not a JSON object") from None
    if not isinstance(model, str) or not model:
        raise ValueError("azure-openai needs the deployment name in the body's model")  # gateway bug
    return model
