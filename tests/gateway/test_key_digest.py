"""Keys are stored only as HMAC-SHA256(server secret, key): the digester's reused keyed state
gives exactly the standard HMAC, for any key and from many threads at once."""

from __future__ import annotations

import hashlib
import hmac
from concurrent.futures import ThreadPoolExecutor

import pytest

from modelgate.keys import Digester, new_api_key

SECRET = bytes(range(40))


def reference(value: str) -> bytes:
    return hmac.new(SECRET, value.encode("utf-8"), hashlib.sha256).digest()


def test_the_digest_is_the_standard_hmac_of_each_key() -> None:
    digester = Digester(SECRET)
    values = [new_api_key() for _ in range(50)] + ["", "é ключ 🔑", "x" * 10_000]
    assert [digester.digest(v) for v in values] == [reference(v) for v in values]
    # Reusing the keyed state leaves nothing of one digest in the next.
    assert digester.digest(values[0]) == reference(values[0])


def test_threads_digesting_at_once_get_the_same_answers() -> None:
    digester = Digester(SECRET)
    values = [new_api_key() for _ in range(2000)]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(digester.digest, values)) == [reference(v) for v in values]


def test_a_short_server_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 32 bytes"):
        Digester(b"short")
