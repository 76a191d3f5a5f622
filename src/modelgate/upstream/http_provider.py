"""The HTTP provider kinds' common base: URL per dialect, header policy, credentials, redaction.

Each kind (anthropic, openai, bedrock, vertex, azure-openai, ...) is a small subclass; the
transport (``transport.HttpClient``) and the credential pool (``pool.CredentialPool``) do the
rest.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Self
from urllib.parse import urlsplit

import orjson
import yarl

from modelgate.upstream.base import BufferedReply, ConnectionCounts, CredentialStatus, Dialect, UpstreamReply
from modelgate.upstream.credentials import CREDENTIAL_HEADERS, ApiKey, Credential, CredentialRefused, Outgoing
from modelgate.upstream.error_mapping import UpstreamError, credentials_rejected
from modelgate.upstream.kind import ProviderConfig
from modelgate.upstream.pool import CredentialPool
from modelgate.upstream.transport import HttpClient, HttpReply

#: A W3C ``traceparent`` (version 00; later versions may append fields).
TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?")
TRACESTATE_MAX = 512


def trace_context(client_headers: Mapping[str, str]) -> dict[str, str]:
    """The W3C trace context to pass upstream: the client's ``traceparent`` (the attempt span's
    when tracing is on) and ``tracestate``, when well formed; nothing otherwise."""
    parent = client_headers.get("traceparent")
    if parent is None or len(parent) > TRACESTATE_MAX or not TRACEPARENT.fullmatch(parent):
        return {}
    out = {"traceparent": parent}
    state = client_headers.get("tracestate")
    if state is not None and len(state) <= TRACESTATE_MAX:
        out["tracestate"] = state
    return out


class HttpProvider:
    """Base of the HTTP provider kinds: URL per dialect, header policy, credentials, redaction.

    ``kind`` is the configuration's (the kind's model names its implementation). Subclasses set
    ``dialects``, ``_paths`` and ``_suffixes``, add their own headers in
    ``_headers``, and may reshape the request (``_prepare``) and the reply (``_adapt``). Client
    credentials are never forwarded: subclasses copy only the client headers they name, static
    headers cannot carry credentials, and the provider's own credential is added last, by the
    credential pool, once the request is final (so signatures cover exactly what is sent).
    """

    kind: str
    dialects: frozenset[Dialect]
    legacy_chat_limit = False
    _paths: Mapping[Dialect, str]
    #: Allowed ``path_suffix`` values per dialect ("" is always allowed).
    _suffixes: Mapping[Dialect, frozenset[str]] = {}

    def __init__(
        self,
        config: ProviderConfig,
        credentials: str | Sequence[Credential] | None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        base = config.resolved_base_url()
        if base is None:
            raise ValueError(f"provider {config.name!r}: base_url is required")
        base = base.rstrip("/")
        self._base_url = base.removesuffix("/v1")
        self.name = config.name
        self.kind = config.kind
        self._config = config
        self._client = HttpClient(
            label=repr(config.name), timeouts=config.timeouts, max_concurrency=config.max_concurrency
        )
        if isinstance(credentials, str):
            credentials = [self.api_key_credential("api_key_env", credentials)]
        self._pool = (
            CredentialPool(config.name, credentials, config.credential_pool, clock) if credentials else None
        )
        # Strings that must never leave the gateway in upstream text: our address (the
        # credentials' secrets are asked of the pool each time, as tokens are refreshed).
        host = urlsplit(self._base_url).netloc
        self._secrets = tuple(s for s in (self._base_url, host) if s)

    @classmethod
    def from_config(cls, config: ProviderConfig, env: Mapping[str, str]) -> Self:
        """The provider with its credentials (API keys named by ``api_key_env``) from ``env``."""
        names = config.api_key_envs
        labels = [
            f"api_key_env[{i}]" if isinstance(config.api_key_env, list) else "api_key_env"
            for i in range(len(names))
        ]
        return cls(
            config,
            [cls.api_key_credential(label, env[name]) for label, name in zip(labels, names, strict=True)],
        )

    @classmethod
    def api_key_credential(cls, label: str, key: str) -> Credential:
        """How this kind sends an API key (``Authorization: Bearer`` unless a kind says otherwise)."""
        return ApiKey(label, key, "authorization", "Bearer ")

    def _headers(self, stream: bool, client_headers: Mapping[str, str]) -> dict[str, str]:
        headers = {k.lower(): v for k, v in self._config.headers.items()}
        for name in CREDENTIAL_HEADERS:
            headers.pop(name, None)
        headers["content-type"] = "application/json"
        headers["accept"] = "text/event-stream" if stream else "application/json"
        # Compressed SSE would be buffered by the compressor; ask for identity on streams.
        headers["accept-encoding"] = "identity" if stream else "gzip, deflate"
        headers["user-agent"] = "modelgate"
        headers.update(trace_context(client_headers))
        return headers

    def _prepare(
        self, dialect: Dialect, body: bytes, stream: bool, client_headers: Mapping[str, str], path_suffix: str
    ) -> Outgoing:
        """The request as sent, without its credential."""
        url = self._base_url + self._paths[dialect] + path_suffix
        return Outgoing(url, self._headers(stream, client_headers), body)

    async def _adapt(self, reply: HttpReply, request: Outgoing, stream: bool) -> UpstreamReply:
        """The reply in the dialect's terms (cloud kinds reframe streams and errors here)."""
        return reply

    def credentials_rejected(self, status: int, detail: UpstreamError) -> bool:
        return credentials_rejected(status, detail)

    async def send(
        self,
        dialect: Dialect,
        body: bytes,
        *,
        stream: bool,
        client_headers: Mapping[str, str],
        path_suffix: str = "",
    ) -> UpstreamReply:
        if dialect not in self.dialects:
            raise ValueError(f"provider {self.name!r} ({self.kind}) does not speak {dialect!r}")
        if path_suffix and path_suffix not in self._suffixes.get(dialect, frozenset()):
            raise ValueError(f"provider {self.name!r}: no {dialect!r} endpoint {path_suffix!r}")
        prepared = self._prepare(dialect, body, stream, client_headers, path_suffix)
        if self._pool is None:  # a keyless local server
            return await self._adapt(await self._post(prepared), prepared, stream)
        slots = self._pool.order()
        for i, slot in enumerate(slots):
            last = i == len(slots) - 1
            request = prepared if len(slots) == 1 else prepared.copy()
            try:
                await slot.credential.authorize(request)
            except CredentialRefused as exc:
                message = self.redact(exc.message)
                self._pool.refused(slot, 401, message)
                if last:
                    error = {"error": {"type": "authentication_error", "message": message}}
                    return BufferedReply(401, {"content-type": "application/json"}, orjson.dumps(error))
                continue
            reply = await self._adapt(await self._post(request), request, stream)
            judged = await self._pool.judge(
                slot, reply, last=last, refusal=self.credentials_rejected, redact=self.redact
            )
            if judged is not None:
                return judged
        raise AssertionError("a credential pool always offers a credential")  # pragma: no cover

    async def _post(self, request: Outgoing) -> HttpReply:
        url = yarl.URL(request.url, encoded=True) if request.encoded else request.url
        return await self._client.post(url, request.body, request.headers)

    def credential_status(self) -> list[CredentialStatus]:
        return self._pool.status() if self._pool is not None else []

    def connection_counts(self) -> ConnectionCounts:
        return self._client.connection_counts()

    def credential_count(self) -> int:
        """Credentials in the pool (session affinity only steers where there is a choice)."""
        return len(self._pool) if self._pool is not None else 0

    def redact(self, text: str) -> str:
        secrets = self._secrets if self._pool is None else (*self._pool.secrets(), *self._secrets)
        for secret in secrets:
            text = text.replace(secret, "[redacted]")
        return text

    async def aclose(self) -> None:
        await self._client.aclose()
        if self._pool is not None:
            await self._pool.aclose()
