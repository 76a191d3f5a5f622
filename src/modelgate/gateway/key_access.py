"""A key's own access rules, checked by the authentication guard (``gateway.guards``) on every
API route, the Responses WebSocket and ``count_tokens`` included:

- ``expires_at``: from that instant on the key is refused with 401 (``key_expired``);
- ``allowed_ips``: a request whose client address (``modelgate.addresses.client_address``: the
  socket's, or ``X-Forwarded-For`` behind ``server.trusted_proxies``) is outside every range is
  refused with 403 (``address_not_allowed``), and so is one whose address is not known.

Cheap by construction: a key without rules costs two attribute reads; the ranges are compiled
once per key version by the key view, and ``X-Forwarded-For`` is read only for a key with ranges
whose connection comes from a trusted proxy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from starlette.datastructures import Headers
from starlette.types import Scope

from modelgate import errors
from modelgate.addresses import client_address
from modelgate.services import Services
from modelgate.storage.base import KeyRecord

FORWARDED_FOR = "x-forwarded-for"


def peer_of(scope: Scope) -> str | None:
    """The socket peer's address of an ASGI connection (None: the server did not say)."""
    client = scope.get("client")
    return str(client[0]) if client else None


def _forwarded(headers: Mapping[str, str]) -> Sequence[str]:
    if isinstance(headers, Headers):
        return headers.getlist(FORWARDED_FOR)
    value = headers.get(FORWARDED_FOR)
    return [value] if value is not None else []


def _rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check(
    services: Services, key: KeyRecord, now: float, headers: Mapping[str, str], peer: str | None
) -> None:
    """Refuse ``key`` if it has expired at ``now`` or the request comes from outside its ranges."""
    if key.expires_at is not None and now >= key.expires_at:
        services.telemetry.metrics.key_access_refused("expired")
        raise errors.AuthenticationFailed(
            f"this API key expired at {_rfc3339(key.expires_at)}; ask the account's owner for a new key "
            "or a later expiry",
            code="key_expired",
        )
    networks = services.keys.networks(key)
    if networks is None:
        return
    address = client_address(peer, _forwarded(headers), services.settings.server.trusted_networks)
    if address is None or address not in networks:
        services.telemetry.metrics.key_access_refused("address")
    if address is None:
        raise errors.PermissionDenied(
            "this API key is restricted to certain addresses and the client's address could not be "
            "determined",
            code="address_not_allowed",
        )
    if address not in networks:
        raise errors.PermissionDenied(
            f"this API key may not be used from {address}; its allowed address ranges do not include it",
            code="address_not_allowed",
        )
