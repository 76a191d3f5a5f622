"""The provider interface: send one request in a dialect, get back one reply of any status.

Providers do no retrying and no error mapping: they report what happened (a reply with a status,
or a transport failure raised as one of the exceptions below). The router decides what to do.
An in-process provider (the simulator) implements the same two protocols without HTTP.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from modelgate import errors
from modelgate.formats import FormatName
from modelgate.upstream.config import DeploymentConfig
from modelgate.upstream.error_mapping import UpstreamError

#: An upstream's wire format: one of ``formats.FORMATS``.
Dialect = FormatName


class UpstreamReply(Protocol):
    """One upstream response (or in-process equivalent). Owned by whoever holds it: it must be
    closed, and ``close`` is the way to abandon it (it aborts the connection if unread)."""

    status: int
    #: Lower-case header names.
    headers: Mapping[str, str]

    async def read(self) -> bytes:
        """The whole body, within the provider's total timeout."""
        ...

    def iter_chunks(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive. Raises ``IdleTimeout`` when no byte arrives within the idle
        timeout, ``UpstreamTimeout`` past the total timeout, ``StreamBroken`` on a reset or a
        malformed transfer."""
        ...

    async def close(self) -> None:
        """Idempotent. Aborts the underlying connection when the body was not fully read."""
        ...


class Provider(Protocol):
    name: str
    kind: str
    dialects: frozenset[Dialect]
    #: Chat Completions: the upstream knows only the older ``max_tokens`` limit field (compatible
    #: servers), not ``max_completion_tokens``.
    legacy_chat_limit: bool

    async def send(
        self,
        dialect: Dialect,
        body: bytes,
        *,
        stream: bool,
        client_headers: Mapping[str, str],
        path_suffix: str = "",
    ) -> UpstreamReply:
        """Send ``body`` to the dialect's endpoint (``path_suffix`` "/count_tokens" selects the
        Messages token counter). Returns replies of any status; raises ``ConnectFailed``,
        ``ConnectTimeout``, ``FirstByteTimeout`` or ``UpstreamFailed`` when no reply came."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class Redacts(Protocol):
    """Optional: a provider holding secrets removes them (and its address) from upstream text
    before the text can reach a client or a log."""

    def redact(self, text: str) -> str: ...


@runtime_checkable
class JudgesCredentials(Protocol):
    """Optional: a provider that knows which of its 4xx replies refuse its own credentials (for
    cloud kinds every 403 concerns the gateway's identity, not the client's request)."""

    def credentials_rejected(self, status: int, detail: UpstreamError) -> bool: ...


@dataclass(frozen=True, slots=True)
class CredentialStatus:
    """One credential out of rotation, as ``/health`` shows it (where it is configured, never
    the credential itself)."""

    provider: str
    credential: str
    status: Literal["refused", "cooling_down"]
    http_status: int
    #: Seconds until it is offered again (0: the next request tries it).
    back_in: float


@dataclass(frozen=True, slots=True)
class ConnectionCounts:
    """A provider's pooled upstream connections now: ``busy`` carry an exchange (at most the
    provider's ``max_concurrency``), ``idle`` are kept alive for the next, ``waiting`` requests
    queue for room."""

    busy: int
    idle: int
    waiting: int


@runtime_checkable
class ReportsConnections(Protocol):
    """Optional: a provider with a connection pool reports its use (``/metrics``)."""

    def connection_counts(self) -> ConnectionCounts: ...


@runtime_checkable
class ReportsCredentials(Protocol):
    """Optional: a provider with a credential pool reports the credentials out of rotation."""

    def credential_status(self) -> list[CredentialStatus]: ...


class BufferedReply:
    """An ``UpstreamReply`` whose body is already in memory (an error body read to judge it, or
    an answer a provider rewrote)."""

    __slots__ = ("_body", "headers", "status")

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self._body = body

    async def read(self) -> bytes:
        return self._body

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        if self._body:
            yield self._body

    async def close(self) -> None:
        return None


@dataclass(frozen=True, slots=True)
class Deployment:
    """Runtime form of ``DeploymentConfig``; hashable, so it keys health state. Two gateway
    models served by the same provider + upstream model share health, as they share the fault."""

    provider: str
    upstream_model: str
    weight: int = 1
    #: Output tokens asked of this deployment when the client omitted its limit (None: the
    #: model's). Not part of the deployment's identity: health is shared all the same.
    default_max_tokens: int | None = field(default=None, compare=False)

    @classmethod
    def from_config(cls, config: DeploymentConfig) -> Deployment:
        return cls(config.provider, config.upstream_model, config.weight, config.default_max_tokens)


# Transport failures. Subclasses of the gateway's error kinds, so an unmapped one still renders
# correctly, but distinct so the router can tell a refused connection from a reset one.


class ConnectFailed(errors.UpstreamFailed):
    """No connection could be made (refused, DNS, TLS). Nothing reached the upstream."""


class ConnectTimeout(errors.UpstreamTimeout):
    """No connection within the connect timeout (includes waiting for a pool slot)."""


class FirstByteTimeout(errors.UpstreamTimeout):
    """Connected and sent, but no response headers within the first-byte timeout."""


class IdleTimeout(errors.UpstreamTimeout):
    """The body stalled for longer than the idle timeout."""


class StreamBroken(errors.UpstreamFailed):
    """The connection was reset or the transfer was malformed while reading the body."""
