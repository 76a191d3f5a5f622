"""An account's rate limits, stored by both engines (migrations sqlite 0015, postgresql 0020):
absent by default, set all three at once, cleared, audited as an account change in the same
transaction, and only accounts with a limit listed for the gateway's view."""

from __future__ import annotations

from modelgate.storage.base import AccountLimits, Store
from tests.storage.test_contract import NOW


async def test_account_limits_are_stored_listed_and_cleared(store: Store) -> None:
    plain = await store.create_account("plain", 0, NOW)
    limited = await store.create_account("limited", 0, NOW)
    assert (plain.rpm, plain.tpm, plain.max_concurrency) == (None, None, None)
    assert await store.limited_accounts() == []
    changed = await store.set_account_limits(limited.id, AccountLimits(rpm=30, tpm=9000, max_concurrency=4))
    assert changed is not None and (changed.rpm, changed.tpm, changed.max_concurrency) == (30, 9000, 4)
    assert changed.balance_uc == limited.balance_uc and changed.name == "limited"
    assert await store.get_account(limited.id) == changed
    assert [a.id for a in await store.limited_accounts()] == [limited.id]
    only_tpm = await store.set_account_limits(limited.id, AccountLimits(tpm=50))
    assert only_tpm is not None and (only_tpm.rpm, only_tpm.tpm, only_tpm.max_concurrency) == (None, 50, None)
    cleared = await store.set_account_limits(limited.id, AccountLimits())
    assert cleared is not None and await store.limited_accounts() == []
    assert await store.set_account_limits(10_000_000, AccountLimits(rpm=1)) is None
