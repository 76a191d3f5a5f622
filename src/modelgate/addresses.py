"""Client addresses and address ranges: a key's ``allowed_ips`` and ``server.trusted_proxies``.

A range list is parsed and validated once (``parse_networks``: the admin API, the CLI, the
configuration) and compiled once into ``Networks`` (per key version in the key view, per
configuration for the proxies), so a request's check is integer masks over a short tuple, with
no parsing of the ranges.

The client address (``client_address``) is the socket's peer, unless the peer is a trusted proxy:
then ``X-Forwarded-For`` is read from its right end (what the nearest proxy appended) leftwards,
past every trusted proxy, and the first address that is not one is the client. An entry that is
not an address ends the walk with no answer (``None``): a key bound to ranges is then refused,
never let through on a guess. A peer that is not a trusted proxy cannot choose its address:
its ``X-Forwarded-For`` is not read at all.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: The most ranges one list may hold (a key's ``allowed_ips``, ``server.trusted_proxies``).
MAX_NETWORKS = 256
#: The longest range text accepted (the longest IPv6 CIDR is 43 characters).
MAX_NETWORK_TEXT = 64
#: ``X-Forwarded-For`` entries read at most, from the right; a longer chain is not walked further.
MAX_FORWARDED_HOPS = 32


class AddressError(ValueError):
    """A range or address list that cannot be used; the message says which entry and why."""


def parse_network(text: str) -> Network:
    """A CIDR (``10.0.0.0/8``, ``2001:db8::/32``) or a single address (``/32`` or ``/128``).
    Host bits are dropped (``10.1.2.3/8`` is ``10.0.0.0/8``)."""
    if not isinstance(text, str) or not text.strip():
        raise AddressError("an empty entry is not an address range")
    value = text.strip()
    if len(value) > MAX_NETWORK_TEXT:
        raise AddressError(f"{value[:MAX_NETWORK_TEXT]!r}…: too long to be an address range")
    try:
        return ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise AddressError(
            f"{value!r} is not an address range (use CIDR notation such as 203.0.113.0/24 or 2001:db8::/32)"
        ) from None


def parse_networks(texts: Iterable[str]) -> tuple[str, ...]:
    """Validated, normalised and deduplicated range texts in their given order, for storing."""
    out: list[str] = []
    for text in texts:
        normal = str(parse_network(text))
        if normal not in out:
            out.append(normal)
        if len(out) > MAX_NETWORKS:
            raise AddressError(f"at most {MAX_NETWORKS} address ranges")
    return tuple(out)


def parse_address(text: str) -> Address | None:
    """An address as a peer or ``X-Forwarded-For`` gives it; None when it is not one. An
    IPv4-mapped IPv6 address (a dual-stack socket's) is its IPv4 address."""
    value = text.strip()
    if not value or len(value) > MAX_NETWORK_TEXT:
        return None
    if value.startswith("[") and value.endswith("]"):  # "[2001:db8::1]"
        value = value[1:-1]
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@dataclass(frozen=True, slots=True)
class Networks:
    """Ranges compiled to ``(network, mask)`` integers per IP version: membership is one AND and
    one comparison per range."""

    v4: tuple[tuple[int, int], ...] = ()
    v6: tuple[tuple[int, int], ...] = ()

    @classmethod
    def compile(cls, texts: Iterable[str]) -> Networks:
        v4: list[tuple[int, int]] = []
        v6: list[tuple[int, int]] = []
        for text in texts:
            network = parse_network(text)
            target = v4 if network.version == 4 else v6
            target.append((int(network.network_address), int(network.netmask)))
        return cls(tuple(v4), tuple(v6))

    def __bool__(self) -> bool:
        return bool(self.v4 or self.v6)

    def __contains__(self, address: Address) -> bool:
        value = int(address)
        ranges = self.v4 if address.version == 4 else self.v6
        return any(value & mask == network for network, mask in ranges)


NO_NETWORKS = Networks()


def forwarded_entries(values: Sequence[str]) -> list[str]:
    """The ``X-Forwarded-For`` entries of every such header, in order (headers joined by commas,
    as RFC 9110 lets a list header be split), at most the last ``MAX_FORWARDED_HOPS``."""
    entries: list[str] = []
    for value in values:
        entries.extend(value.split(","))
    return entries[-MAX_FORWARDED_HOPS:]


def client_address(peer: str | None, forwarded: Sequence[str], trusted: Networks) -> Address | None:
    """The client's address (see the module docstring); ``forwarded`` is the ``X-Forwarded-For``
    header values, read only when ``peer`` is in ``trusted``. None: not known."""
    address = parse_address(peer) if peer else None
    if address is None or not trusted or address not in trusted:
        return address
    for entry in reversed(forwarded_entries(forwarded)):
        hop = parse_address(entry)
        if hop is None:
            return None
        if hop not in trusted:
            return hop
        address = hop
    # Every hop was a trusted proxy: the left-most one is as far as the chain is believed.
    return address
