"""API key and admin token format, checksum and at-rest digest.

Key: ``sk-cs4-`` + 32 random base62 characters + 6 base62 characters of CRC32 over everything
before them. The checksum lets the gateway reject typos and garbage before any lookup. At rest
only ``HMAC-SHA256(server_secret, key)`` is stored, plus a display prefix and the last four
characters; the full key exists only in the creation response.

Admin tokens use the same construction with prefixes ``mg-op-`` (operator) and ``mg-acct-``
(account owner).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import string
import zlib
from dataclasses import dataclass

BASE62 = string.digits + string.ascii_uppercase + string.ascii_lowercase
KEY_PREFIX = "sk-cs4-"
OPERATOR_TOKEN_PREFIX = "mg-op-"  # noqa: S105 - a prefix, not a secret
ACCOUNT_TOKEN_PREFIX = "mg-acct-"  # noqa: S105 - a prefix, not a secret
RANDOM_LEN = 32
CHECKSUM_LEN = 6
_BASE62_SET = frozenset(BASE62)


def _base62(number: int, width: int) -> str:
    chars = []
    for _ in range(width):
        number, rem = divmod(number, 62)
        chars.append(BASE62[rem])
    return "".join(reversed(chars))


def _checksum(body: str) -> str:
    return _base62(zlib.crc32(body.encode("ascii")), CHECKSUM_LEN)


def random_base62(length: int) -> str:
    return "".join(secrets.choice(BASE62) for _ in range(length))


def _new_secret(prefix: str) -> str:
    body = prefix + random_base62(RANDOM_LEN)
    return body + _checksum(body)


def _well_formed(value: str, prefix: str) -> bool:
    if len(value) != len(prefix) + RANDOM_LEN + CHECKSUM_LEN or not value.startswith(prefix):
        return False
    tail = value[len(prefix) :]
    if not _BASE62_SET.issuperset(tail):
        return False
    body, check = value[:-CHECKSUM_LEN], value[-CHECKSUM_LEN:]
    return hmac.compare_digest(_checksum(body), check)


def new_api_key() -> str:
    return _new_secret(KEY_PREFIX)


def is_well_formed_key(value: str) -> bool:
    """Prefix, length, alphabet and checksum: no lookup, no secret involved."""
    return _well_formed(value, KEY_PREFIX)


def new_admin_token(*, operator: bool) -> str:
    return _new_secret(OPERATOR_TOKEN_PREFIX if operator else ACCOUNT_TOKEN_PREFIX)


def is_well_formed_admin_token(value: str) -> bool:
    return _well_formed(value, OPERATOR_TOKEN_PREFIX) or _well_formed(value, ACCOUNT_TOKEN_PREFIX)


@dataclass(frozen=True, slots=True)
class KeyDisplay:
    prefix: str
    last4: str

    def __str__(self) -> str:
        return f"{self.prefix}…{self.last4}"


def display_of(key: str) -> KeyDisplay:
    """What may be shown after creation: the fixed prefix plus 4 random characters, and the end."""
    return KeyDisplay(prefix=key[: len(KEY_PREFIX) + 4], last4=key[-4:])


def admin_token_display(token: str) -> KeyDisplay:
    """The same for an admin token: ``mg-op-`` or ``mg-acct-`` plus 4 random characters, and the end
    (8 of the token's 32 random characters, as for keys)."""
    fixed = OPERATOR_TOKEN_PREFIX if token.startswith(OPERATOR_TOKEN_PREFIX) else ACCOUNT_TOKEN_PREFIX
    return KeyDisplay(prefix=token[: len(fixed) + 4], last4=token[-4:])


class Digester:
    """HMAC-SHA256 of secrets under the server secret; the only form secrets are stored in."""

    __slots__ = ("_keyed",)

    def __init__(self, server_secret: bytes) -> None:
        if len(server_secret) < 32:
            raise ValueError("the server secret must be at least 32 bytes")
        # The HMAC keyed once; each digest copies it (half the cost of keying it every time,
        # once per authenticated request). Copying never changes it: safe from any thread.
        self._keyed = hmac.new(server_secret, digestmod=hashlib.sha256)

    def digest(self, value: str) -> bytes:
        keyed = self._keyed.copy()
        keyed.update(value.encode("utf-8"))
        return keyed.digest()


def new_key_id() -> str:
    return "key_" + random_base62(16)
