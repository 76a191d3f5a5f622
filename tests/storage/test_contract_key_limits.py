"""A key's tokens per minute and requests in flight, stored by both engines (migrations sqlite
0008, postgresql 0013): absent by default, set at creation, changed and cleared (-1) by an update
that leaves the other controls alone, and every change bumps the key's version."""

from __future__ import annotations

from modelgate.storage.base import KeyControls, Store
from tests.storage.test_contract import NOW, setup_key


async def test_limits_are_stored_changed_and_cleared(store: Store) -> None:
    _, plain = await setup_key(store)
    assert (plain.tpm, plain.max_concurrency) == (None, None)
    _, key = await setup_key(store, tpm=90_000, max_concurrency=3, monthly_cap_uc=500)
    assert (key.tpm, key.max_concurrency, key.monthly_cap_uc) == (90_000, 3, 500)
    lowered = await store.update_key(key.id, KeyControls(tpm=1_000), NOW)
    assert lowered is not None and (lowered.tpm, lowered.max_concurrency) == (1_000, 3)
    assert lowered.version > key.version and lowered.monthly_cap_uc == 500
    cleared = await store.update_key(key.id, KeyControls(tpm=-1, max_concurrency=-1), NOW)
    assert cleared is not None and (cleared.tpm, cleared.max_concurrency) == (None, None)
    fetched = await store.get_key(key.id)
    assert fetched == cleared
    listed = {k.id: k for k in await store.list_keys(key.account_id)}
    assert listed[key.id] == cleared
