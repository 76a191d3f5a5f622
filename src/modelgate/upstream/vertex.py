"""The ``vertex`` provider kind: Anthropic models on Google Vertex AI (Messages dialect).

``POST {endpoint}/v1/projects/{project}/locations/{region}/publishers/anthropic/models/{model}``
``:rawPredict`` (whole) or ``:streamRawPredict`` (streamed), and ``.../models/count-tokens:rawPredict``.
The body is the Messages request without ``model`` (kept for counting), with ``anthropic_version``
(default ``vertex-2023-10-16``); the betas Vertex takes (``upstream.betas``) go in the
``anthropic-beta`` header. Answers are the
Anthropic API's JSON and SSE, so a Messages client is a near-passthrough. OAuth2 bearer tokens
come from ``google_auth``. Every 403 from Vertex concerns the gateway's identity (IAM), never
the client's request: it refuses the credential.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Self
from urllib.parse import quote, unquote

import orjson

from modelgate.upstream.base import Dialect, UpstreamReply
from modelgate.upstream.cloud_claude import StreamRenamed, WholeRenamed, cloud_betas, cloud_body
from modelgate.upstream.credentials import Credential, Outgoing
from modelgate.upstream.error_mapping import UpstreamError
from modelgate.upstream.google_auth import load_google_credentials
from modelgate.upstream.http_provider import HttpProvider
from modelgate.upstream.kind import ProviderConfig
from modelgate.upstream.kinds.vertex import VertexConfig
from modelgate.upstream.transport import HttpReply

DEFAULT_VERSION = "vertex-2023-10-16"
_COUNT = "/count-tokens:rawPredict"


class VertexProvider(HttpProvider):
    dialects: frozenset[Dialect] = frozenset({"messages"})
    _paths: Mapping[Dialect, str] = {"messages": "/v1/projects"}
    _suffixes: Mapping[Dialect, frozenset[str]] = {"messages": frozenset({"/count_tokens"})}

    _config: VertexConfig

    def __init__(
        self,
        config: VertexConfig,
        credentials: str | Sequence[Credential] | None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(config, credentials, clock=clock)
        self._version = config.anthropic_version or DEFAULT_VERSION
        project, region = quote(config.project or "", safe=""), quote(config.region or "", safe="")
        self._models = (
            f"{self._base_url}/v1/projects/{project}/locations/{region}/publishers/anthropic/models"
        )

    @classmethod
    def from_config(cls, config: ProviderConfig, env: Mapping[str, str]) -> Self:
        assert isinstance(config, VertexConfig)  # the kind's model names this class
        listed = isinstance(config.credentials_file, list)
        credentials = load_google_credentials(
            config.credentials_files, listed, config.token_refresh_margin, f"provider {config.name!r}"
        )
        return cls(config, credentials)

    def _prepare(
        self, dialect: Dialect, body: bytes, stream: bool, client_headers: Mapping[str, str], path_suffix: str
    ) -> Outgoing:
        counting = path_suffix == "/count_tokens"
        model, data = cloud_body(body, version=self._version, keep=("model",) if counting else ())
        if stream:
            data["stream"] = True  # streamRawPredict streams only when the body says so too
        else:
            data.pop("stream", None)
        headers = self._headers(stream, client_headers)
        plan = cloud_betas(self.kind, self._config, data, client_headers, counting=counting)
        if plan.send:
            headers["anthropic-beta"] = ",".join(plan.send)
        if counting:
            url = self._models + _COUNT
        else:
            url = f"{self._models}/{quote(model, safe='@')}:{'streamRawPredict' if stream else 'rawPredict'}"
        return Outgoing(url, headers, orjson.dumps(data), encoded=True)

    async def _adapt(self, reply: HttpReply, request: Outgoing, stream: bool) -> UpstreamReply:
        if not 200 <= reply.status < 300 or request.url.endswith(_COUNT):
            return reply
        model = unquote(request.url.rsplit("/", 1)[1].rsplit(":", 1)[0])
        return StreamRenamed(reply, model) if stream else WholeRenamed(reply, model)

    def credentials_rejected(self, status: int, detail: UpstreamError) -> bool:
        return status in (401, 403)
