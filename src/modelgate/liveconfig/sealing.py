"""Credential values at rest: AES-GCM under a key derived (HKDF-SHA256) from the server secret.

A sealed value is ``v1 || nonce (12 bytes) || ciphertext+tag``, bound to its entry's name as
associated data, so a sealed blob copied onto another provider's row does not open. A database
alone (a backup, a dump) does not reveal the credentials; the secret file or setting does, which
is why both are kept apart (docs/operations.md#the-secret-file). Rotating the secret makes sealed
credentials unreadable: they must be entered again.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

_VERSION = b"v1"
_INFO = b"modelgate upstream credentials v1"
_NONCE = 12
_TAG = 16


class SealBroken(ValueError):
    """A sealed value does not open under this secret (rotated, or the row was tampered with)."""


class Sealer:
    def __init__(self, secret: bytes) -> None:
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(secret)
        self._aead = AESGCM(key)

    def seal(self, name: str, values: Mapping[str, str]) -> bytes:
        nonce = os.urandom(_NONCE)
        return _VERSION + nonce + self._aead.encrypt(nonce, orjson.dumps(dict(values)), name.encode())

    def open(self, name: str, blob: bytes) -> dict[str, str]:
        if not blob.startswith(_VERSION) or len(blob) < len(_VERSION) + _NONCE + _TAG:
            raise SealBroken(f"provider {name!r}: stored credentials in an unknown form; enter them again")
        nonce = blob[len(_VERSION) : len(_VERSION) + _NONCE]
        try:
            plain = self._aead.decrypt(nonce, blob[len(_VERSION) + _NONCE :], name.encode())
        except InvalidTag:
            raise SealBroken(
                f"provider {name!r}: the stored credentials do not open with this server's secret "
                "(was it rotated?); enter them again"
            ) from None
        values = orjson.loads(plain)
        return {str(k): str(v) for k, v in values.items()}
