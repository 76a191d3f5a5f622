"""Admin token lifecycle in storage, on SQLite and PostgreSQL alike: display fields, listing per
account, revocation kept once, expiry recorded, and the coarse last-used write racing safely."""

from __future__ import annotations

import asyncio
import secrets

from modelgate.storage.base import Store
from tests.storage.conftest import StoreFactory
from tests.storage.test_contract import NOW


async def test_tokens_keep_their_display_fields_and_list_per_account(store: Store) -> None:
    mine = await store.create_account("tokens-mine", 0, NOW)
    other = await store.create_account("tokens-other", 0, NOW)
    digest = secrets.token_bytes(32)
    await store.create_admin_token("tok_op", secrets.token_bytes(32), None, NOW)
    await store.create_admin_token(
        "tok_mine",
        digest,
        mine.id,
        NOW + 1,
        name="ci deploy",
        prefix="mg-acct-AbCd",
        last4="wxyz",
        created_by="tok_op",
        expires_at=NOW + 3600,
    )
    await store.create_admin_token("tok_other", secrets.token_bytes(32), other.id, NOW + 2)

    found = await store.find_admin_token(digest)
    assert found is not None and found == await store.get_admin_token("tok_mine")
    assert (found.name, found.prefix, found.last4, found.created_by) == (
        "ci deploy",
        "mg-acct-AbCd",
        "wxyz",
        "tok_op",
    )
    assert (found.expires_at, found.revoked_at, found.last_used_at) == (NOW + 3600, None, None)
    assert found.usable_at(NOW + 3599) and not found.usable_at(NOW + 3600)
    assert await store.get_admin_token("tok_missing") is None

    assert [t.id for t in await store.list_admin_tokens()] == ["tok_op", "tok_mine", "tok_other"]
    assert [t.id for t in await store.list_admin_tokens(mine.id)] == ["tok_mine"]
    assert await store.list_admin_tokens(987_654) == []


async def test_revocation_is_recorded_once_and_seen_by_every_instance(engine: StoreFactory) -> None:
    first, second = await engine(), await engine()
    digest = secrets.token_bytes(32)
    await first.create_admin_token("tok_r", digest, None, NOW)
    revoked = await first.revoke_admin_token("tok_r", NOW + 10)
    assert revoked is not None and revoked.revoked_at == NOW + 10 and not revoked.usable_at(NOW + 10)
    again = await second.revoke_admin_token("tok_r", NOW + 20)
    assert again is not None and again.revoked_at == NOW + 10  # the first revocation stands
    seen = await second.find_admin_token(digest)
    assert seen is not None and seen.revoked_at == NOW + 10
    assert await first.revoke_admin_token("tok_missing", NOW) is None
    assert await second.count_admin_tokens() == 1


async def test_last_used_is_written_at_most_once_per_interval(engine: StoreFactory) -> None:
    stores = [await engine() for _ in range(3)]
    await stores[0].create_admin_token("tok_t", secrets.token_bytes(32), None, NOW)
    # Twenty touches at the same instant from three instances: exactly one writes.
    wrote = await asyncio.gather(*(s.touch_admin_token("tok_t", NOW + 5, 60) for s in stores * 7))
    assert wrote.count(True) == 1
    token = await stores[1].get_admin_token("tok_t")
    assert token is not None and token.last_used_at == NOW + 5
    assert not await stores[2].touch_admin_token("tok_t", NOW + 64, 60)
    assert await stores[2].touch_admin_token("tok_t", NOW + 65, 60)
    token = await stores[0].get_admin_token("tok_t")
    assert token is not None and token.last_used_at == NOW + 65
    assert not await stores[0].touch_admin_token("tok_missing", NOW, 60)
