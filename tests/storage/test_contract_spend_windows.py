"""Spend caps per window (5 h rolling, UTC day, UTC ISO week, and an account's month) on keys
and accounts, decided in the ledger's one reserve step, on SQLite and PostgreSQL alike.

Checked against an independent model: a seeded random walk of reserves, settles, releases and
clock steps never lets the spend of any window exceed its cap, every hold ends exactly once, and
each figure the store reports equals the model's.
"""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime

from modelgate.storage.base import (
    AccountCaps,
    KeyControls,
    Refusal,
    Reservation,
    ReserveRequest,
    Store,
)
from modelgate.storage.spend_windows import (
    BUCKET_SECONDS,
    FIVE_HOURS,
    Window,
    account_subject,
    key_subject,
    period_start,
)
from tests.storage.conftest import StoreFactory
from tests.storage.test_contract import account_of, hold, new_key, setup_key, usage_of

#: Wednesday 2026-05-27 22:00 UTC (ISO week 22 began on Monday 2026-05-25).
WED = datetime(2026, 5, 27, 22, 0, tzinfo=UTC).timestamp()
HOUR = 3600.0


async def test_a_keys_day_cap_refuses_with_its_reason_and_frees_at_midnight(store: Store) -> None:
    _, key = await setup_key(store, balance=100_000, cap_day_uc=1_000)
    assert key.window_caps == (None, 1_000, None, None)
    first = hold(key, 700, 10, now=WED)
    assert isinstance(await store.reserve(first), Reservation)
    cut = await store.reserve(hold(key, 700, 10, now=WED + 60))
    assert isinstance(cut, Reservation) and cut.granted_uc == 300  # the day's rest, not the worst case
    assert await store.reserve(hold(key, 50, 1, now=WED + 120)) == Refusal("cap_day", 0)
    # Settled after midnight: counted in the day the hold was made (it frees 500 there, not later).
    await store.settle(usage_of(first, 200, finished_at=WED + 3 * HOUR))
    use = await store.window_use(key_subject(key.id), "day", WED + 180)
    assert (use.spent_uc, use.held_uc) == (200, 300)
    assert use.resets_at == datetime(2026, 5, 28, tzinfo=UTC).timestamp()
    again = await store.reserve(hold(key, 900, 1, now=WED + 240))
    assert isinstance(again, Reservation) and again.granted_uc == 500
    tomorrow = await store.reserve(hold(key, 900, 1, now=WED + 2 * HOUR + 1))
    assert isinstance(tomorrow, Reservation) and tomorrow.granted_uc == 900
    fresh = await store.window_use(key_subject(key.id), "day", WED + 2 * HOUR + 1)
    assert (fresh.spent_uc, fresh.held_uc) == (0, 900)


async def test_the_rolling_five_hours_count_every_hold_of_the_five_hours_before(store: Store) -> None:
    _, key = await setup_key(store, balance=100_000, cap_5h_uc=1_000)
    early = hold(key, 600, 1, now=WED)
    await store.reserve(early)
    await store.settle(usage_of(early, 600))
    # Any time within the five hours (and up to one bucket after): only 400 left.
    for later in (WED + HOUR, WED + FIVE_HOURS - 1, WED + FIVE_HOURS):
        refused = await store.reserve(hold(key, 500, 401, now=later))
        assert refused == Refusal("cap_5h", 400), later
    use = await store.window_use(key_subject(key.id), "5h", WED + HOUR)
    assert use.spent_uc == 600 and use.resets_at == period_start("5h", WED) + BUCKET_SECONDS + FIVE_HOURS
    # Once the bucket is out of every five hours: the whole cap again.
    after = await store.reserve(hold(key, 1_000, 1_000, now=WED + FIVE_HOURS + BUCKET_SECONDS))
    assert isinstance(after, Reservation) and after.granted_uc == 1_000


async def test_the_week_runs_monday_to_sunday_utc(store: Store) -> None:
    _, key = await setup_key(store, balance=100_000, cap_week_uc=1_000)
    monday = datetime(2026, 5, 25, tzinfo=UTC).timestamp()
    sunday_night = datetime(2026, 5, 31, 23, 59, tzinfo=UTC).timestamp()
    assert isinstance(await store.reserve(hold(key, 1_000, 1, now=monday)), Reservation)
    assert await store.reserve(hold(key, 10, 1, now=sunday_night)) == Refusal("cap_week", 0)
    next_monday = await store.reserve(hold(key, 10, 1, now=sunday_night + 60))
    assert isinstance(next_monday, Reservation) and next_monday.granted_uc == 10


async def test_an_accounts_caps_apply_to_all_its_keys_together(store: Store) -> None:
    account, first = await setup_key(store, balance=100_000)
    second = await store.create_key(new_key(account), WED)
    updated = await store.set_account_caps(account.id, AccountCaps(monthly_cap_uc=1_500, cap_day_uc=-1))
    assert updated is not None and updated.window_caps == (None, None, None, 1_500)
    assert await store.set_account_caps(999_999, AccountCaps(cap_day_uc=5)) is None
    assert isinstance(await store.reserve(hold(first, 1_000, 1, now=WED)), Reservation)
    cut = await store.reserve(hold(second, 1_000, 1, now=WED))
    assert isinstance(cut, Reservation) and cut.granted_uc == 500
    assert await store.reserve(hold(first, 1, 1, now=WED)) == Refusal("monthly_cap", 0)
    use = await store.window_use(account_subject(account.id), "month", WED)
    assert (use.spent_uc, use.held_uc) == (0, 1_500)
    # Removed: the account's keys are bound by the balance (and their own caps) again.
    cleared = await store.set_account_caps(account.id, AccountCaps(monthly_cap_uc=-1))
    assert cleared is not None and cleared.monthly_cap_uc is None
    assert isinstance(await store.reserve(hold(second, 1_000, 1_000, now=WED)), Reservation)


async def test_the_tightest_window_binds_and_is_named(store: Store) -> None:
    account, key = await setup_key(store, balance=100_000, monthly_cap_uc=5_000, cap_week_uc=3_000)
    await store.set_account_caps(account.id, AccountCaps(cap_day_uc=2_000))
    changed = await store.update_key(key.id, KeyControls(cap_5h_uc=1_000), WED)
    assert changed is not None and changed.window_caps == (1_000, None, 3_000, 5_000)
    granted = await store.reserve(hold(key, 10_000, 1, now=WED))
    assert isinstance(granted, Reservation) and granted.granted_uc == 1_000
    assert granted.cap_remaining_after_uc == 4_000  # the month's header figure, as before
    assert await store.reserve(hold(key, 10, 1, now=WED + 60)) == Refusal("cap_5h", 0)
    await store.update_key(key.id, KeyControls(cap_5h_uc=-1), WED)
    assert isinstance(await store.reserve(hold(key, 1_000, 1_000, now=WED + 60)), Reservation)
    assert await store.reserve(hold(key, 10, 1, now=WED + 60)) == Refusal("cap_day", 0)  # account's day
    assert (await account_of(store, account.id)).reserved_uc == 2_000


async def test_under_a_window_cap_nothing_is_charged_beyond_the_hold(store: Store) -> None:
    _, key = await setup_key(store, balance=100_000, cap_day_uc=10_000)
    request = hold(key, 100, 1, now=WED)
    await store.reserve(request)
    usage = usage_of(request, 700)
    settled = await store.settle(usage)
    assert (settled.charged_uc, usage.shortfall_uc) == (100, 600)
    use = await store.window_use(key_subject(key.id), "day", WED)
    assert (use.spent_uc, use.held_uc) == (100, 0)


async def test_a_key_without_window_caps_writes_no_window_rows(store: Store) -> None:
    _, key = await setup_key(store, balance=100_000, monthly_cap_uc=1_000)
    request = hold(key, 100, 1, now=WED)
    await store.reserve(request)
    await store.settle(usage_of(request, 50))
    for window in ("5h", "day", "week", "month"):
        use = await store.window_use(key_subject(key.id), window, WED)
        assert (use.spent_uc, use.held_uc, use.resets_at) == (0, 0, None)


async def test_concurrent_holds_across_instances_never_exceed_any_window(engine: StoreFactory) -> None:
    stores = [await engine() for _ in range(3)]
    account, first = await setup_key(stores[0], balance=1_000_000, cap_5h_uc=9_000)
    second = await stores[0].create_key(new_key(account, cap_day_uc=8_000), WED)
    await stores[0].set_account_caps(account.id, AccountCaps(cap_week_uc=15_000))
    requests = [hold(first if i % 2 else second, 700, 300, now=WED + i) for i in range(120)]
    outcomes = await asyncio.gather(*(stores[i % 3].reserve(r) for i, r in enumerate(requests)))
    granted = {
        r.request_id: o.granted_uc
        for r, o in zip(requests, outcomes, strict=True)
        if isinstance(o, Reservation)
    }
    by_key = {
        k.id: sum(granted.get(r.request_id, 0) for r in requests if r.key_id == k.id) for k in (first, second)
    }
    assert by_key[first.id] <= 9_000 and by_key[second.id] <= 8_000 and sum(by_key.values()) <= 15_000
    assert sum(by_key.values()) > 15_000 - 300 or (
        by_key[first.id] > 9_000 - 300 and by_key[second.id] > 8_000 - 300
    )
    reasons = {o.reason for o in outcomes if isinstance(o, Refusal)}
    assert reasons and reasons <= {"cap_5h", "cap_day", "cap_week"}
    finishing = []
    for i, request in enumerate(r for r in requests if r.request_id in granted):
        finishing.append(stores[i % 3].settle(usage_of(request, granted[request.request_id] // 2)))
        finishing.append(stores[(i + 1) % 3].release(usage_of(request, 0)))
    settlements = await asyncio.gather(*finishing)
    assert sum(s.applied for s in settlements) == len(granted)  # each hold ended exactly once
    week = await stores[1].window_use(account_subject(account.id), "week", WED)
    assert week.held_uc == 0 and week.spent_uc == sum(s.charged_uc for s in settlements)
    assert (await account_of(stores[2], account.id)).reserved_uc == 0


async def test_random_walk_keeps_every_window_within_its_cap(store: Store) -> None:
    """Seeded random reserves, settles, releases and clock steps over hours and days, against a
    model of every hold: the spend + held of each window (by the rule of storage.spend_windows)
    never exceeds its cap, and the store's figures equal the model's."""
    rng = random.Random(31)
    caps: dict[Window, int] = {"5h": 4_000, "day": 7_000, "week": 12_000}
    account, key = await setup_key(store, balance=10_000_000, cap_5h_uc=caps["5h"], cap_day_uc=caps["day"])
    await store.set_account_caps(account.id, AccountCaps(cap_week_uc=caps["week"]))
    subjects: dict[Window, str] = {
        "5h": key_subject(key.id),
        "day": key_subject(key.id),
        "week": account_subject(account.id),
    }
    now = WED
    pending: dict[str, tuple[ReserveRequest, int]] = {}
    ended: dict[str, tuple[float, int]] = {}  # request id -> made at, charged

    def counted(window: Window, at: float) -> int:
        """The model: held + charged of holds made in the window's rows counted at ``at``."""
        if window == "5h":
            first, last = period_start("5h", at - FIVE_HOURS), period_start("5h", at)
        else:
            first = last = period_start(window, at)
        total = 0
        for made, amount in [(r.now, g) for r, g in pending.values()] + list(ended.values()):
            if first <= period_start(window, made) <= last:
                total += amount
        return total

    for _step in range(160):
        action = rng.random()
        if action < 0.5 or not pending:
            amount = rng.randint(100, 2_500)
            request = hold(key, amount, rng.randint(1, amount), now=now)
            free = min(caps[w] - counted(w, now) for w in caps)
            outcome = await store.reserve(request)
            if free >= request.minimum_uc:
                assert isinstance(outcome, Reservation) and outcome.granted_uc == min(amount, free)
                pending[request.request_id] = (request, outcome.granted_uc)
            else:
                assert isinstance(outcome, Refusal) and outcome.reason in {"cap_5h", "cap_day", "cap_week"}
        elif action < 0.75:
            request, granted = pending.pop(rng.choice(sorted(pending)))
            charge = rng.randint(0, granted + 300)
            settled = await store.settle(usage_of(request, charge))
            assert settled.applied and settled.charged_uc == min(charge, granted)
            assert not (await store.settle(usage_of(request, charge))).applied
            ended[request.request_id] = (request.now, settled.charged_uc)
        elif action < 0.9:
            request, _ = pending.pop(rng.choice(sorted(pending)))
            assert (await store.release(usage_of(request, 0))).applied
            ended[request.request_id] = (request.now, 0)
        else:
            now += rng.choice([60.0, 600.0, HOUR, 3 * HOUR])
        for window, cap in caps.items():
            use = await store.window_use(subjects[window], window, now)
            assert use.spent_uc + use.held_uc == counted(window, now) <= cap
    for request, _ in pending.values():
        await store.release(usage_of(request, 0))
    assert (await account_of(store, account.id)).reserved_uc == 0


async def test_a_cap_of_zero_refuses_every_hold(store: Store) -> None:
    account, key = await setup_key(store, balance=100_000, cap_week_uc=0)
    assert await store.reserve(hold(key, 10, 1, now=WED)) == Refusal("cap_week", 0)
    await store.update_key(key.id, KeyControls(cap_week_uc=-1), WED)
    await store.set_account_caps(account.id, AccountCaps(cap_5h_uc=0))
    assert await store.reserve(hold(key, 10, 1, now=WED)) == Refusal("cap_5h", 0)
