"""The contract for a key's expiry and address ranges and an account's ``hide_balance``, on
SQLite and PostgreSQL alike: written, read back, changed only when given, cleared."""

from __future__ import annotations

from modelgate.storage.base import NEVER_EXPIRES, KeyControls, Store
from tests.storage.test_contract import NOW, new_key


async def test_expiry_and_ranges_are_kept_changed_and_cleared(store: Store) -> None:
    account = await store.create_account("ranges", 0, NOW)
    plain = await store.create_key(new_key(account), NOW)
    assert plain.expires_at is None and plain.allowed_ips is None
    key = await store.create_key(
        new_key(account, expires_at=NOW + 3600.5, allowed_ips=("10.0.0.0/8", "2001:db8::/32")), NOW
    )
    assert key.expires_at == NOW + 3600.5 and key.allowed_ips == ("10.0.0.0/8", "2001:db8::/32")
    assert await store.get_key(key.id) == key
    assert [k for k in await store.keys_changed_since(0) if k.id == key.id] == [key]

    renamed = await store.update_key(key.id, KeyControls(name="n"), NOW)
    assert renamed is not None and (renamed.expires_at, renamed.allowed_ips) == (
        key.expires_at,
        key.allowed_ips,
    )
    moved = await store.update_key(key.id, KeyControls(expires_at=NOW + 7200, allowed_ips=("::/0",)), NOW)
    assert moved is not None and (moved.expires_at, moved.allowed_ips) == (NOW + 7200, ("::/0",))
    assert moved.version > renamed.version
    cleared = await store.update_key(key.id, KeyControls(expires_at=NEVER_EXPIRES, allowed_ips=()), NOW)
    assert cleared is not None and (cleared.expires_at, cleared.allowed_ips) == (None, None)


async def test_hide_balance_is_kept_per_account(store: Store) -> None:
    first = await store.create_account("shown", 5, NOW)
    second = await store.create_account("hidden", 5, NOW)
    assert first.hide_balance is False
    hidden = await store.set_hide_balance(second.id, True)
    assert hidden is not None and hidden.hide_balance and hidden.balance_uc == 5
    assert (await store.get_account(second.id)) == hidden
    assert (await store.find_account("hidden")) == hidden
    assert [a.hide_balance for a in await store.list_accounts() if a.id in (first.id, second.id)] == [
        False,
        True,
    ]
    topped = await store.top_up(second.id, 1, "note", NOW)
    assert topped.hide_balance is True
    shown = await store.set_hide_balance(second.id, False)
    assert shown is not None and not shown.hide_balance
    assert await store.set_hide_balance(10**9, True) is None
