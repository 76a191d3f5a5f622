"""The one contract every storage engine passes, run against SQLite and PostgreSQL alike.

Covers every ``Store`` method and the ledger invariants of ``storage.base``; concurrency is real
(hundreds of coroutines on one store, and several stores on one database, as several gateway
instances would be).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import secrets
from collections.abc import Sequence
from typing import Any

import asyncpg
import pytest

from modelgate.storage.base import (
    Account,
    Conflict,
    KeyControls,
    KeyRecord,
    NewKey,
    Refusal,
    Reservation,
    ReserveRequest,
    StorageError,
    Store,
    UsageRecord,
)
from tests.ports import unused_port
from tests.storage.conftest import StoreFactory
from tests.storage.engines import fresh_database
from tests.whole_store import PostgresStore

NOW = 1_780_000_000.0  # 2026-05-28
MONTH = "2026-05"
_ids = itertools.count(1)


async def account_of(store: Store, account_id: int) -> Account:
    account = await store.get_account(account_id)
    assert account is not None
    return account


def new_key(account: Account, **overrides: Any) -> NewKey:
    n = next(_ids)
    key = NewKey(
        id=f"key_{n}_{secrets.token_hex(4)}",
        account_id=account.id,
        name=f"k{n}",
        group="Pro",
        rpm=60,
        allowed_models=None,
        monthly_cap_uc=None,
        digest=secrets.token_bytes(32),
        prefix="sk-cs4-abc",
        last4="wxyz",
    )
    return dataclasses.replace(key, **overrides)


def hold(
    key: KeyRecord,
    amount: int,
    minimum: int = 1,
    *,
    request_id: str | None = None,
    now: float = NOW,
    model: str = "aria-haiku-4.5",
) -> ReserveRequest:
    return ReserveRequest(
        request_id=request_id or f"req_{secrets.token_hex(8)}",
        key_id=key.id,
        account_id=key.account_id,
        month=MONTH,
        amount_uc=amount,
        minimum_uc=minimum,
        now=now,
        expires_at=now + 600,
        endpoint="messages",
        model=model,
    )


def usage_of(request: ReserveRequest, charged: int, **overrides: object) -> UsageRecord:
    record = UsageRecord(
        request_id=request.request_id,
        key_id=request.key_id,
        account_id=request.account_id,
        endpoint="messages",
        model="aria-haiku-4.5",
        month=request.month,
        status="ok",
        created_at=request.now,
        finished_at=request.now + 1,
        input_tokens=10,
        output_tokens=20,
        cache_creation_tokens=1,
        cache_read_tokens=2,
        charged_uc=charged,
    )
    for name, value in overrides.items():
        setattr(record, name, value)
    return record


async def setup_key(
    store: Store, balance: int = 1_000_000, **key_fields: object
) -> tuple[Account, KeyRecord]:
    account = await store.create_account(f"acct-{next(_ids)}", balance, NOW)
    return account, await store.create_key(new_key(account, **key_fields), NOW)


async def assert_ledger_invariants(
    store: Store, account_id: int, *, cap_keys: Sequence[KeyRecord] = ()
) -> None:
    account = await store.get_account(account_id)
    assert account is not None
    assert account.balance_uc >= account.reserved_uc >= 0
    summary = await store.usage_summary(MONTH, account_id=account_id)
    assert account.balance_uc == await store.topups_total(account_id) - summary.charged_uc
    for key in cap_keys:
        spent, reserved = await store.month_spend(key.id, MONTH)
        assert key.monthly_cap_uc is not None and spent + reserved <= key.monthly_cap_uc


# --- lifecycle --------------------------------------------------------------------------------


async def test_migrate_twice_is_a_no_op_and_ping_answers(store: Store) -> None:
    account = await store.create_account("kept", 5, NOW)
    await store.migrate()
    await store.ping()
    assert await store.get_account(account.id) == account


async def test_several_instances_migrating_a_fresh_postgres_database_at_once() -> None:
    """PostgreSQL only: instances starting together serialise on the migrations lock."""
    async with fresh_database() as url:
        stores = [PostgresStore(url) for _ in range(6)]
        try:
            await asyncio.gather(*(s.migrate() for s in stores))
            await stores[0].create_account("one", 1, NOW)
            conn = await asyncpg.connect(url)
            try:
                applied = [
                    r[0] for r in await conn.fetch("SELECT version FROM schema_migrations ORDER BY version")
                ]
            finally:
                await conn.close()
            assert applied == sorted(set(applied)) and applied[0] == "0001_initial"
            assert len(await stores[5].list_accounts()) == 1
        finally:
            await asyncio.gather(*(s.close() for s in stores))


async def test_unreachable_postgres_is_a_storage_error() -> None:
    store = PostgresStore(f"postgresql://nobody@127.0.0.1:{unused_port()}/none")
    with pytest.raises(StorageError):
        await store.ping()
    await store.close()


# --- accounts ---------------------------------------------------------------------------------


async def test_accounts_create_get_find_list_and_top_up(store: Store) -> None:
    a = await store.create_account("alpha", 2_000_000, NOW)
    b = await store.create_account("beta", 0, NOW + 1)
    assert (a.name, a.balance_uc, a.reserved_uc, a.created_at) == ("alpha", 2_000_000, 0, NOW)
    assert a.available_uc == 2_000_000
    assert await store.get_account(a.id) == a
    assert await store.find_account("beta") == b
    assert await store.get_account(b.id + 1000) is None and await store.find_account("gamma") is None
    assert [x.id for x in await store.list_accounts()] == [a.id, b.id]
    with pytest.raises(Conflict):
        await store.create_account("alpha", 0, NOW)
    topped = await store.top_up(b.id, 750, "invoice 7", NOW + 2)
    assert topped.balance_uc == 750 and topped.id == b.id
    await store.top_up(a.id, 1, "", NOW + 3)
    assert await store.topups_total(a.id) == 2_000_001  # the opening balance counts as a top-up
    assert await store.topups_total(b.id) == 750


# --- keys -------------------------------------------------------------------------------------


async def test_create_get_and_list_keys(store: Store) -> None:
    account, key = await setup_key(
        store, allowed_models=("aria-haiku-4.5", "aria-sonnet-4.6"), monthly_cap_uc=500
    )
    other = await store.create_account("other", 0, NOW)
    second = await store.create_key(new_key(other, group="Nova", rpm=7), NOW + 1)
    assert key.allowed_models == ("aria-haiku-4.5", "aria-sonnet-4.6") and key.monthly_cap_uc == 500
    assert key.state == "active" and key.version > 0 and key.previous_digest is None
    assert isinstance(key.digest, bytes) and key.created_at == NOW
    assert await store.get_key(key.id) == key and await store.get_key("key_missing") is None
    assert second.group == "Nova" and second.rpm == 7 and second.version > key.version
    assert [k.id for k in await store.list_keys()] == [key.id, second.id]
    assert [k.id for k in await store.list_keys(account.id)] == [key.id]
    with pytest.raises(Conflict):
        await store.create_key(new_key(account, id=key.id), NOW)
    with pytest.raises(Conflict):
        await store.create_key(new_key(account, digest=key.digest), NOW)


async def test_update_key_changes_only_what_is_given_and_can_clear(store: Store) -> None:
    _, key = await setup_key(store, allowed_models=("aria-haiku-4.5",), monthly_cap_uc=500)
    renamed = await store.update_key(key.id, KeyControls(name="renamed"), NOW)
    assert renamed is not None and renamed.name == "renamed" and renamed.version > key.version
    assert (renamed.rpm, renamed.allowed_models, renamed.monthly_cap_uc) == (60, ("aria-haiku-4.5",), 500)
    changed = await store.update_key(key.id, KeyControls(rpm=5, allowed_models=(), monthly_cap_uc=-1), NOW)
    assert changed is not None and (changed.rpm, changed.allowed_models, changed.monthly_cap_uc) == (
        5,
        None,
        None,
    )
    capped = await store.update_key(key.id, KeyControls(monthly_cap_uc=9, allowed_models=("x",)), NOW)
    assert capped is not None and capped.monthly_cap_uc == 9 and capped.allowed_models == ("x",)
    assert await store.update_key("key_missing", KeyControls(name="x"), NOW) is None


async def test_rotate_key_with_and_without_grace(store: Store) -> None:
    _, key = await setup_key(store)
    new_digest = secrets.token_bytes(32)
    rotated = await store.rotate_key(key.id, new_digest, "sk-cs4-new", "abcd", 3600, NOW + 10)
    assert rotated is not None and rotated.digest == new_digest and rotated.prefix == "sk-cs4-new"
    assert rotated.last4 == "abcd" and rotated.rotated_at == NOW + 10
    assert rotated.previous_digest == key.digest and rotated.previous_expires_at == NOW + 3610
    assert rotated.version > key.version
    again = await store.rotate_key(key.id, secrets.token_bytes(32), "p", "l", 0, NOW + 20)
    assert again is not None and again.previous_digest is None and again.previous_expires_at is None
    assert await store.rotate_key("key_missing", secrets.token_bytes(32), "p", "l", 0, NOW) is None
    await store.revoke_key(key.id, NOW + 30)
    assert await store.rotate_key(key.id, secrets.token_bytes(32), "p", "l", 0, NOW) is None


async def test_revoke_key_disables_it_once_and_leaves_other_keys(store: Store) -> None:
    account, key = await setup_key(store)
    other = await store.create_key(new_key(account), NOW)
    revoked = await store.revoke_key(key.id, NOW + 5)
    assert revoked is not None and revoked.state == "disabled" and revoked.revoked_at == NOW + 5
    assert revoked.version > other.version
    again = await store.revoke_key(key.id, NOW + 6)
    assert again == revoked  # no new version, the first revocation time stays
    assert (await store.get_key(other.id)) == other
    assert await store.revoke_key("key_missing", NOW) is None


async def test_keys_changed_since_returns_later_versions_in_order(store: Store) -> None:
    account, first = await setup_key(store)
    second = await store.create_key(new_key(account), NOW)
    assert [k.id for k in await store.keys_changed_since(0)] == [first.id, second.id]
    mark = second.version
    assert await store.keys_changed_since(mark) == []
    await store.revoke_key(first.id, NOW)
    await store.update_key(second.id, KeyControls(rpm=3), NOW)
    changed = await store.keys_changed_since(mark)
    assert [k.id for k in changed] == [first.id, second.id]
    assert changed[0].version < changed[1].version and changed[0].state == "disabled"


async def test_concurrent_key_writes_from_several_instances_get_distinct_ordered_versions(
    engine: StoreFactory,
) -> None:
    stores = [await engine() for _ in range(3)]
    account, key = await setup_key(stores[0])
    writes = [stores[i % 3].update_key(key.id, KeyControls(rpm=1 + i), NOW) for i in range(30)] + [
        stores[i % 3].create_key(new_key(account), NOW) for i in range(30)
    ]
    results = await asyncio.gather(*writes)
    versions = [r.version for r in results if r is not None]
    assert len(versions) == 60 and len(set(versions)) == 60
    seen = await stores[1].keys_changed_since(0)
    assert [k.version for k in seen] == sorted(k.version for k in seen)


# --- admin tokens -----------------------------------------------------------------------------


async def test_admin_tokens(store: Store) -> None:
    account = await store.create_account("owner", 0, NOW)
    assert await store.count_admin_tokens() == 0
    operator, owner = secrets.token_bytes(32), secrets.token_bytes(32)
    await store.create_admin_token("tok_op", operator, None, NOW)
    await store.create_admin_token("tok_owner", owner, account.id, NOW + 1)
    found = await store.find_admin_token(owner)
    assert found is not None and (found.id, found.account_id, found.created_at) == (
        "tok_owner",
        account.id,
        NOW + 1,
    )
    op = await store.find_admin_token(operator)
    assert op is not None and op.account_id is None
    assert await store.find_admin_token(secrets.token_bytes(32)) is None
    assert await store.count_admin_tokens() == 2
    with pytest.raises(Conflict):
        await store.create_admin_token("tok_op", secrets.token_bytes(32), None, NOW)


# --- ledger -----------------------------------------------------------------------------------


async def test_reserve_grants_the_worst_case_when_it_fits(store: Store) -> None:
    account, key = await setup_key(store, balance=1_000, monthly_cap_uc=800)
    request = hold(key, 300, 10)
    granted = await store.reserve(request)
    assert granted == Reservation(request.request_id, 300, 700, 500)
    assert (await account_of(store, account.id)).reserved_uc == 300
    assert await store.month_spend(key.id, MONTH) == (0, 300)
    assert await store.pending_reservations() == 1
    with pytest.raises(Conflict):  # one reservation per request id
        await store.reserve(hold(key, 1, 1, request_id=request.request_id))


async def test_reserve_grants_what_is_affordable_down_to_the_minimum(store: Store) -> None:
    _, key = await setup_key(store, balance=1_000)
    partial = await store.reserve(hold(key, 1_500, 100))
    assert isinstance(partial, Reservation) and partial.granted_uc == 1_000 and partial.balance_after_uc == 0
    assert partial.cap_remaining_after_uc is None
    refused = await store.reserve(hold(key, 50, 1))
    assert refused == Refusal("balance", 0)


async def test_reserve_refuses_below_the_minimum_naming_balance_or_cap(store: Store) -> None:
    _, capped = await setup_key(store, balance=10_000, monthly_cap_uc=100)
    assert await store.reserve(hold(capped, 500, 101)) == Refusal("monthly_cap", 100)
    cut = await store.reserve(hold(capped, 500, 60))
    assert isinstance(cut, Reservation) and cut.granted_uc == 100 and cut.cap_remaining_after_uc == 0
    assert await store.reserve(hold(capped, 5, 1)) == Refusal("monthly_cap", 0)
    _, poor = await setup_key(store, balance=40, monthly_cap_uc=1_000)
    assert await store.reserve(hold(poor, 500, 41)) == Refusal("balance", 40)
    assert await store.reserve(hold(_missing_key(poor), 5, 1)) == Refusal("balance", 0)


def _missing_key(key: KeyRecord) -> KeyRecord:
    from dataclasses import replace

    return replace(key, id="key_missing")


async def test_settle_charges_releases_the_rest_and_is_idempotent(store: Store) -> None:
    account, key = await setup_key(store, balance=1_000, monthly_cap_uc=900)
    request = hold(key, 400)
    await store.reserve(request)
    first = await store.settle(usage_of(request, 150))
    assert (
        first.applied
        and first.charged_uc == 150
        and first.balance_uc == 850
        and first.cap_remaining_uc == 750
    )
    second = await store.settle(usage_of(request, 300))
    assert not second.applied and second.charged_uc == 0 and second.balance_uc == 850
    assert second.cap_remaining_uc == 750
    released = await store.release(usage_of(request, 0))
    assert not released.applied
    assert (await account_of(store, account.id)).reserved_uc == 0
    assert await store.month_spend(key.id, MONTH) == (150, 0)
    assert await store.pending_reservations() == 0
    records = await store.usage_records(MONTH, key_id=key.id)
    assert len(records) == 1 and records[0] == usage_of(request, 150)
    await assert_ledger_invariants(store, account.id, cap_keys=[key])


async def test_a_reserve_and_its_settle_submitted_together_apply_in_order(store: Store) -> None:
    """Never sent by the gateway (a settle follows its reserve's answer), but a batch holding both
    must treat them in order: the hold is made, then settled; nothing stays held."""
    account, key = await setup_key(store, balance=1_000)
    request = hold(key, 400)
    reserved, settled = await asyncio.gather(store.reserve(request), store.settle(usage_of(request, 150)))
    assert isinstance(reserved, Reservation) and reserved.granted_uc == 400
    assert settled.applied and settled.charged_uc == 150 and settled.balance_uc == 850
    assert (await account_of(store, account.id)).reserved_uc == 0
    assert await store.pending_reservations() == 0
    assert await store.month_spend(key.id, MONTH) == (150, 0)


async def test_settlement_reports_the_available_balance_and_free_cap(store: Store) -> None:
    _, key = await setup_key(store, balance=1_000, monthly_cap_uc=800)
    first, second = hold(key, 300), hold(key, 200)
    await store.reserve(first)
    await store.reserve(second)
    settled = await store.settle(usage_of(first, 100))
    # 900 left, 200 still held by the second request; cap 800 - spent 100 - held 200.
    assert (settled.balance_uc, settled.cap_remaining_uc) == (700, 500)
    replay = await store.settle(usage_of(first, 100))
    assert (replay.applied, replay.balance_uc, replay.cap_remaining_uc) == (False, 700, 500)


async def test_settle_beyond_the_hold_charges_only_what_is_free_and_records_the_shortfall(
    store: Store,
) -> None:
    # An upstream that reports more than the hold (the input bound should prevent it): the real
    # cost is charged as far as the account's free balance goes, never past it (issue #11).
    account, key = await setup_key(store, balance=1_000)
    other = hold(key, 300)
    await store.reserve(other)  # held by another request: not free
    request = hold(key, 100)
    await store.reserve(request)
    usage = usage_of(request, 5_000)
    settled = await store.settle(usage)
    assert settled.charged_uc == 700 and usage.charged_uc == 700 and usage.shortfall_uc == 4_300
    assert settled.balance_uc == 0
    [record] = await store.usage_records(MONTH, key_id=key.id)
    assert (record.charged_uc, record.shortfall_uc) == (700, 4_300)
    await assert_ledger_invariants(store, account.id)


async def test_settle_beyond_the_hold_stops_at_the_keys_free_cap(store: Store) -> None:
    account, key = await setup_key(store, balance=10_000, monthly_cap_uc=500)
    request = hold(key, 100)
    await store.reserve(request)
    usage = usage_of(request, 2_000)
    settled = await store.settle(usage)
    assert (settled.charged_uc, usage.shortfall_uc, settled.cap_remaining_uc) == (500, 1_500, 0)
    await assert_ledger_invariants(store, account.id, cap_keys=[key])


async def test_settle_within_the_hold_has_no_shortfall(store: Store) -> None:
    _, key = await setup_key(store, balance=1_000)
    request = hold(key, 100)
    await store.reserve(request)
    usage = usage_of(request, 60)
    assert (await store.settle(usage)).charged_uc == 60 and usage.shortfall_uc == 0


async def test_release_charges_nothing_and_writes_a_zero_usage_record(store: Store) -> None:
    account, key = await setup_key(store, balance=1_000)
    request = hold(key, 700)
    await store.reserve(request)
    released = await store.release(usage_of(request, 999, status="upstream_error"))
    assert released.applied and released.charged_uc == 0 and released.balance_uc == 1_000
    assert not (await store.settle(usage_of(request, 10))).applied
    [record] = await store.usage_records(MONTH, account_id=account.id)
    assert record.charged_uc == 0 and record.status == "upstream_error"
    assert (await account_of(store, account.id)).available_uc == 1_000


async def test_settlement_of_an_unknown_request_changes_nothing(store: Store) -> None:
    account, key = await setup_key(store, balance=1_000, monthly_cap_uc=300)
    outcome = await store.settle(usage_of(hold(key, 10), 10))
    assert outcome.applied is False and outcome.balance_uc == 1_000 and outcome.cap_remaining_uc == 300
    assert await store.usage_records(MONTH, account_id=account.id) == []


async def test_settlement_books_the_reservations_month_key_and_account(store: Store) -> None:
    account, key = await setup_key(store, balance=1_000)
    _, stranger = await setup_key(store, balance=1_000)
    request = hold(key, 100)
    await store.reserve(request)
    # Finished after the month turned, and carrying the wrong key: the reservation is the authority
    # (so it is for what the request was for and when it began, e.g. for a sweeper's placeholders).
    usage = usage_of(
        request,
        40,
        month="2026-06",
        key_id=stranger.id,
        account_id=stranger.account_id,
        endpoint="unknown",
        model="unknown",
        created_at=NOW + 99,
    )
    await store.settle(usage)
    assert (usage.month, usage.key_id, usage.account_id) == (MONTH, key.id, account.id)
    assert (usage.endpoint, usage.model, usage.created_at) == ("messages", "aria-haiku-4.5", NOW)
    (record,) = await store.usage_records(MONTH, key_id=key.id)
    assert (record.endpoint, record.model, record.created_at) == ("messages", "aria-haiku-4.5", NOW)
    assert await store.month_spend(key.id, MONTH) == (40, 0)
    assert await store.month_spend(stranger.id, MONTH) == (0, 0)
    await assert_ledger_invariants(store, account.id)
    await assert_ledger_invariants(store, stranger.account_id)
    assert (await store.usage_summary(MONTH, key_id=key.id)).charged_uc == 40
    assert (await store.usage_summary("2026-06", key_id=key.id)).requests == 0


async def test_pending_reservations_are_listed_a_page_at_a_time_in_request_id_order(store: Store) -> None:
    account, key = await setup_key(store, balance=10_000)
    requests = [hold(key, 100, now=NOW + i) for i in range(5)]
    for request in requests:
        await store.reserve(request)
    everything = sorted((r.request_id, key.id, account.id, MONTH) for r in requests)
    listed, after = [], ""
    while page := await store.pending_reservation_page(after, 2):
        assert len(page) <= 2
        listed += page
        after = page[-1][0]
    assert listed == everything


async def test_expired_reservations_are_listed_oldest_first_and_release_cleanly(store: Store) -> None:
    account, key = await setup_key(store, balance=10_000)
    old = [hold(key, 100, now=NOW + i) for i in range(3)]
    fresh = hold(key, 100, now=NOW + 10_000)
    for request in [*reversed(old), fresh]:
        await store.reserve(request)
    expired = await store.expired_reservations(NOW + 5_000)
    assert expired == [(r.request_id, key.id, account.id, MONTH) for r in old]
    assert await store.expired_reservations(NOW + 5_000, limit=1) == expired[:1]
    # Sweepers on every instance may release the same reservation at once: one applies.
    outcomes = await asyncio.gather(*(store.release(usage_of(old[0], 0, status="expired")) for _ in range(5)))
    assert sum(o.applied for o in outcomes) == 1
    assert await store.pending_reservations() == 3
    await assert_ledger_invariants(store, account.id)


async def test_usage_summary_and_records_filter_by_month_account_and_key(store: Store) -> None:
    account, key = await setup_key(store, balance=100_000)
    other_key = await store.create_key(new_key(account), NOW)
    other_account, stranger = await setup_key(store, balance=100_000)
    for k, model, charged, at in [
        (key, "aria-haiku-4.5", 10, NOW),
        (key, "aria-sonnet-4.6", 20, NOW + 1),
        (other_key, "aria-haiku-4.5", 30, NOW + 2),
        (stranger, "aria-haiku-4.5", 40, NOW + 3),
    ]:
        request = hold(k, 100, now=at, model=model)
        await store.reserve(request)
        await store.settle(usage_of(request, charged))
    summary = await store.usage_summary(MONTH, account_id=account.id)
    assert (summary.requests, summary.charged_uc, summary.input_tokens, summary.output_tokens) == (
        3,
        60,
        30,
        60,
    )
    assert (summary.cache_creation_tokens, summary.cache_read_tokens) == (3, 6)
    assert summary.by_model == {"aria-haiku-4.5": 40, "aria-sonnet-4.6": 20}
    assert (await store.usage_summary(MONTH, key_id=key.id)).charged_uc == 30
    assert (await store.usage_summary(MONTH)).charged_uc == 100
    empty = await store.usage_summary("2020-01")
    assert (empty.requests, empty.charged_uc, empty.by_model) == (0, 0, {})
    newest_first = await store.usage_records(MONTH, account_id=account.id)
    assert [r.charged_uc for r in newest_first] == [30, 20, 10]
    assert [r.charged_uc for r in await store.usage_records(MONTH, account_id=account.id, limit=2)] == [
        30,
        20,
    ]
    assert [r.charged_uc for r in await store.usage_records(MONTH, key_id=stranger.id)] == [40]
    assert other_account.id != account.id


async def test_month_spend_is_per_key_and_month(store: Store) -> None:
    _, key = await setup_key(store, balance=1_000)
    assert await store.month_spend(key.id, MONTH) == (0, 0)
    request = hold(key, 100)
    await store.reserve(request)
    await store.settle(usage_of(request, 60))
    assert await store.month_spend(key.id, MONTH) == (60, 0)
    assert await store.month_spend(key.id, "2026-06") == (0, 0)


# --- concurrency: one database, many requests, several instances ------------------------------


async def test_concurrent_reservations_across_instances_never_overshoot_balance_or_cap(
    engine: StoreFactory,
) -> None:
    stores = [await engine() for _ in range(3)]
    account, capped = await setup_key(stores[0], balance=50_000, monthly_cap_uc=20_000)
    uncapped = await stores[0].create_key(new_key(account), NOW)
    requests = [hold(capped if i % 2 else uncapped, 700, 300) for i in range(200)]
    outcomes = await asyncio.gather(*(stores[i % 3].reserve(r) for i, r in enumerate(requests)))
    granted = {
        r.request_id: o.granted_uc
        for r, o in zip(requests, outcomes, strict=True)
        if isinstance(o, Reservation)
    }
    capped_total = sum(granted.get(r.request_id, 0) for r in requests if r.key_id == capped.id)
    assert capped_total <= 20_000 and sum(granted.values()) <= 50_000
    assert sum(granted.values()) > 50_000 - 300  # refused only when less than the minimum was left
    assert any(isinstance(o, Refusal) and o.reason == "monthly_cap" for o in outcomes)
    current = await stores[1].get_account(account.id)
    assert current is not None and current.reserved_uc == sum(granted.values())
    # Settle each twice from different instances at once, and race a release against it.
    finishing = []
    for i, request in enumerate(r for r in requests if r.request_id in granted):
        charge = granted[request.request_id] // 2
        finishing.append(stores[i % 3].settle(usage_of(request, charge)))
        finishing.append(stores[(i + 1) % 3].settle(usage_of(request, charge)))
        finishing.append(stores[(i + 2) % 3].release(usage_of(request, 0)))
    settlements = await asyncio.gather(*finishing)
    assert sum(s.applied for s in settlements) == len(granted)
    assert await stores[2].pending_reservations() == 0
    records = await stores[0].usage_records(MONTH, account_id=account.id, limit=1000)
    assert len(records) == len(granted)
    await assert_ledger_invariants(stores[2], account.id, cap_keys=[capped])


async def test_random_ledger_operations_keep_every_invariant(store: Store) -> None:
    """A seeded random walk over reserve/settle/release/top-up/cap changes; checks after each step."""
    import random

    rng = random.Random(7)
    account, capped = await setup_key(store, balance=5_000, monthly_cap_uc=3_000)
    uncapped = await store.create_key(new_key(account), NOW)
    pending: dict[str, ReserveRequest] = {}
    for _step in range(150):
        action = rng.random()
        if action < 0.45 or not pending:
            key = rng.choice([capped, uncapped])
            amount = rng.randint(1, 1_500)
            request = hold(key, amount, rng.randint(1, amount))
            outcome = await store.reserve(request)
            if isinstance(outcome, Reservation):
                assert request.minimum_uc <= outcome.granted_uc <= amount
                pending[request.request_id] = request
        elif action < 0.8:
            request = pending.pop(rng.choice(sorted(pending)))
            await store.settle(usage_of(request, rng.randint(0, 2_000)))
        elif action < 0.93:
            request = pending.pop(rng.choice(sorted(pending)))
            await store.release(usage_of(request, 0))
        elif action < 0.97:
            await store.top_up(account.id, rng.randint(1, 2_000), "random", NOW)
        else:
            # Caps only rise here: lowering one below the spend is allowed but breaks "spent +
            # reserved <= cap" by the operator's hand, not by the ledger.
            new_cap = rng.randint(capped.monthly_cap_uc or 0, 6_000)
            updated = await store.update_key(capped.id, KeyControls(monthly_cap_uc=new_cap), NOW)
            assert updated is not None
            capped = updated
        current = await store.get_account(account.id)
        assert current is not None and current.balance_uc >= current.reserved_uc >= 0
        assert await store.pending_reservations() == len(pending)
        await assert_ledger_invariants(store, account.id, cap_keys=[capped])
    for request in pending.values():
        await store.release(usage_of(request, 0))
    assert (await account_of(store, account.id)).reserved_uc == 0
    await assert_ledger_invariants(store, account.id, cap_keys=[capped])


async def test_a_top_up_past_the_maximum_balance_is_refused_and_changes_nothing(store: Store) -> None:
    from modelgate.storage.base import MAX_UC, AmountTooLarge

    account = await store.create_account(f"acct-{next(_ids)}", MAX_UC - 10, NOW)
    with pytest.raises(AmountTooLarge):
        await store.top_up(account.id, 11, "too much", NOW)
    after = await store.get_account(account.id)
    assert after is not None and after.balance_uc == MAX_UC - 10 and isinstance(after.balance_uc, int)
    assert await store.topups_total(account.id) == MAX_UC - 10
    assert (await store.top_up(account.id, 10, "exactly", NOW)).balance_uc == MAX_UC
