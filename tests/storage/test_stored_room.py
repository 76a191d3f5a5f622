"""An account's stored byte count as ``limits.stored_room`` hands it out, over both engines: read
when asked for fresh, remembered for ``max_age`` otherwise, with what this instance keeps added."""

from __future__ import annotations

from modelgate.limits.stored_room import StoredRoom
from modelgate.storage.base import Store
from tests.storage.test_contract import NOW
from tests.storage.test_contract_responses import LIMIT, item, response


class Ticks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_a_count_is_remembered_for_max_age_and_read_again_after_or_when_fresh(store: Store) -> None:
    account = await store.create_account("room-remembered", 0, NOW)
    ticks = Ticks()
    room = StoredRoom(store, 1.0, ticks)
    assert await room.used(account.id) == 0
    assert await store.save_response(
        response("resp_1", account.id, outputs=(item("m1", "a", "output"),)), LIMIT
    )
    stored = await store.state_bytes(account.id)
    assert stored > 0
    ticks.now += 0.9
    assert await room.used(account.id) == 0  # remembered
    assert await room.used(account.id, fresh=True) == stored
    assert await store.delete_response(account.id, "resp_1")
    ticks.now += 0.9
    assert await room.used(account.id) == stored  # the fresh read restarted the age
    ticks.now += 0.2
    assert await room.used(account.id) == 0


async def test_what_this_instance_keeps_is_added_to_the_remembered_count(store: Store) -> None:
    account = await store.create_account("room-kept", 0, NOW)
    room = StoredRoom(store, 60.0, Ticks())
    room.kept(account.id, 500)  # nothing remembered yet: nothing to add to
    assert await room.used(account.id) == 0
    room.kept(account.id, 500)
    room.kept(account.id, 24)
    assert await room.used(account.id) == 524
    assert await room.used(account.id, fresh=True) == 0  # the database was never written here


async def test_max_age_zero_reads_every_time(store: Store) -> None:
    account = await store.create_account("room-zero", 0, NOW)
    room = StoredRoom(store, 0.0, Ticks())
    assert await room.used(account.id) == 0
    assert await store.save_response(
        response("resp_z", account.id, outputs=(item("m1", "a", "output"),)), LIMIT
    )
    assert await room.used(account.id) == await store.state_bytes(account.id) > 0
    room.kept(account.id, 1_000)
    assert await room.used(account.id) == await store.state_bytes(account.id)


async def test_at_most_max_accounts_are_remembered(store: Store) -> None:
    ticks = Ticks()
    room = StoredRoom(store, 1.0, ticks, max_accounts=3)
    accounts = [(await store.create_account(f"room-bounded-{i}", 0, NOW)).id for i in range(5)]
    for account_id in accounts[:3]:
        await room.used(account_id)
    assert room.remembered == 3
    await room.used(accounts[3])  # all three are live: they are dropped
    assert room.remembered == 1
    ticks.now += 0.5
    await room.used(accounts[0])
    await room.used(accounts[1])
    ticks.now += 0.6  # the one of the drop has expired, the two since are live
    await room.used(accounts[4])
    assert room.remembered == 3  # only the expired one was dropped
