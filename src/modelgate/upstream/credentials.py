"""Upstream credentials: what a provider adds to a request so the upstream accepts it.

A credential is one API key, one AWS identity, one Google service account or one Entra ID
identity. It authorizes an ``Outgoing`` request in place (a header, or a signature over the whole
request) just before it is sent, so signatures always cover the final URL, headers and body.
Credentials never leave the process: ``secrets`` lists what a provider must scrub from any
upstream text before it reaches a client or a log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

from modelgate import errors


@dataclass(slots=True)
class Outgoing:
    """One request about to be sent; a credential completes its headers (lower-case names)."""

    url: str
    headers: dict[str, str]
    body: bytes
    #: The path and query as sent, already percent-encoded (what a signature must cover).
    encoded: bool = field(default=False)

    def copy(self) -> Outgoing:
        return Outgoing(self.url, dict(self.headers), self.body, self.encoded)


class Credential(Protocol):
    #: Where the credential is configured (``api_key_env[1]``), for logs and ``/health``; never
    #: the secret itself.
    label: str

    async def authorize(self, request: Outgoing) -> None:
        """Add the credential to ``request``. Raises ``CredentialRefused`` when the identity
        provider refuses it (a revoked service account), ``CredentialUnavailable`` when it
        cannot be reached."""
        ...

    def secrets(self) -> tuple[str, ...]:
        """The strings to scrub from upstream text (current tokens included)."""
        ...

    def invalidate(self) -> None:
        """The upstream refused the credential: a token is fetched anew before its next use."""
        ...

    async def aclose(self) -> None: ...


class CredentialRefused(errors.UpstreamFailed):
    """The identity provider refused the credential itself (revoked key, deleted account)."""


class CredentialUnavailable(errors.UpstreamFailed):
    """The identity provider could not be asked (unreachable, timed out); may heal by itself."""


class ApiKey:
    """A static key sent in one header (``x-api-key``, ``api-key``, or ``authorization`` with a
    ``Bearer `` prefix)."""

    __slots__ = ("_header", "_key", "_value", "label")

    def __init__(self, label: str, key: str, header: str, prefix: str = "") -> None:
        self.label = label
        self._key = key
        self._header = header
        self._value = prefix + key

    async def authorize(self, request: Outgoing) -> None:
        request.headers[self._header] = self._value

    def secrets(self) -> tuple[str, ...]:
        return (self._key,)

    def invalidate(self) -> None:
        return None  # a static key cannot be renewed

    async def aclose(self) -> None:
        return None


#: Request headers that carry credentials: never taken from static configuration or clients.
CREDENTIAL_HEADERS: tuple[str, ...] = ("authorization", "x-api-key", "api-key", "x-amz-security-token")


def quiet_library_logs(*names: str) -> None:
    """Keep the cloud SDKs' debug and info logs off: they print upstream addresses, canonical
    requests and token endpoints (never wanted in the gateway's logs, whatever its level)."""
    for name in names:
        logger = logging.getLogger(name)
        if logger.level < logging.WARNING:
            logger.setLevel(logging.WARNING)
