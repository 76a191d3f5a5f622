"""What the secret check (modelgate.secret_file) reads and writes, on SQLite and PostgreSQL
alike: whether any credential is stored, and the one recorded fingerprint, replaced on rotation
and seen by every instance."""

from __future__ import annotations

import secrets

from modelgate.storage.base import NewKey, Store
from tests.storage.conftest import StoreFactory
from tests.storage.test_contract import NOW


async def test_credentials_are_seen_whichever_kind_is_stored(engine: StoreFactory) -> None:
    store = await engine()
    assert not await store.holds_credentials()
    await store.create_admin_token("tok_op", secrets.token_bytes(32), None, NOW)
    assert await store.holds_credentials()


async def test_keys_alone_count_as_credentials(store: Store) -> None:
    account = await store.create_account("fingerprint-keys", 0, NOW)
    await store.create_key(
        NewKey(
            id="key_fp",
            account_id=account.id,
            name="fp",
            group="Nova",
            rpm=60,
            allowed_models=None,
            monthly_cap_uc=None,
            digest=secrets.token_bytes(32),
            prefix="sk-cs4-abcd",
            last4="wxyz",
        ),
        NOW,
    )
    assert await store.holds_credentials()


async def test_one_fingerprint_is_recorded_and_replaced(engine: StoreFactory) -> None:
    first, second = await engine(), await engine()
    assert await first.secret_fingerprint() is None
    await first.record_secret_fingerprint("a" * 32, NOW)
    assert await second.secret_fingerprint() == "a" * 32
    await second.record_secret_fingerprint("b" * 32, NOW + 1)
    assert await first.secret_fingerprint() == "b" * 32
