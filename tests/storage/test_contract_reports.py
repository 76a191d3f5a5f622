"""The usage reports every engine implements (``storage.reports``), on SQLite and PostgreSQL alike:
the filtered, keyset-paged usage log, per-day totals by model, top keys and per-key activity."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from modelgate.storage.base import Account, KeyRecord, Store
from modelgate.storage.reports import UsageCursor, UsageFilter
from tests.storage.test_contract import hold, new_key, setup_key, usage_of

DAY = 86_400.0
MAY_1 = datetime(2026, 5, 1, tzinfo=UTC).timestamp()


async def spend(
    store: Store,
    key: KeyRecord,
    at: float,
    charged: int,
    *,
    model: str = "aria-haiku-4.5",
    endpoint: str = "messages",
    status: str = "ok",
) -> str:
    """One request of ``key`` that started at ``at`` and was charged ``charged`` µc."""
    month = datetime.fromtimestamp(at, UTC).strftime("%Y-%m")
    # The hold carries endpoint, model and month; the usage record takes them from it.
    request = replace(hold(key, 1_000, now=at, model=model), month=month, endpoint=endpoint)
    await store.reserve(request)
    settled = await store.settle(usage_of(request, charged, status=status, endpoint=endpoint, model=model))
    assert settled.applied
    return request.request_id


async def two_accounts(store: Store) -> tuple[Account, KeyRecord, KeyRecord, KeyRecord]:
    account, first = await setup_key(store, balance=10_000_000)
    second = await store.create_key(new_key(account, name="second"), MAY_1)
    _, stranger = await setup_key(store, balance=10_000_000)
    return account, first, second, stranger


async def test_usage_log_pages_newest_first_with_a_stable_cursor(store: Store) -> None:
    account, first, second, stranger = await two_accounts(store)
    ids = [await spend(store, first if i % 2 else second, MAY_1 + i * 60, 10 + i) for i in range(7)]
    await spend(store, stranger, MAY_1 + 30, 999)
    scope = UsageFilter(account_id=account.id)

    page = await store.usage_page(scope, limit=3)
    assert [r.request_id for r in page.records] == ids[::-1][:3]
    assert page.next == UsageCursor(page.records[-1].created_at, page.records[-1].request_id)
    # A record arriving meanwhile does not shift the next page.
    await spend(store, first, MAY_1 + 3_600, 1)
    page2 = await store.usage_page(scope, limit=3, after=page.next)
    assert [r.request_id for r in page2.records] == ids[::-1][3:6]
    last = await store.usage_page(scope, limit=3, after=page2.next)
    assert [r.request_id for r in last.records] == [ids[0]] and last.next is None
    assert await store.usage_count(scope) == 8
    assert await store.usage_count(UsageFilter()) == 9
    exact = await store.usage_page(scope, limit=8)
    assert len(exact.records) == 8 and exact.next is None


async def test_records_with_the_same_start_page_by_request_id(store: Store) -> None:
    account, first, _, _ = await two_accounts(store)
    ids = sorted([await spend(store, first, MAY_1, 5) for _ in range(5)], reverse=True)
    seen: list[str] = []
    cursor = None
    while True:
        page = await store.usage_page(UsageFilter(account_id=account.id), limit=2, after=cursor)
        seen += [r.request_id for r in page.records]
        if page.next is None:
            break
        cursor = page.next
    assert seen == ids


async def test_usage_log_filters_by_key_model_endpoint_status_and_dates(store: Store) -> None:
    account, first, second, stranger = await two_accounts(store)
    a = await spend(store, first, MAY_1 + 10, 1, model="aria-sonnet-4.6", endpoint="chat")
    b = await spend(store, first, MAY_1 + DAY + 10, 2, status="client_disconnected")
    c = await spend(store, second, MAY_1 + 2 * DAY + 10, 3, endpoint="count_tokens")
    d = await spend(store, first, MAY_1 + 31 * DAY + 10, 4)  # 2026-06-01
    await spend(store, stranger, MAY_1 + DAY + 20, 5)

    async def ids(**fields: Any) -> list[str]:
        page = await store.usage_page(UsageFilter(account_id=account.id, **fields), limit=50)
        return [r.request_id for r in page.records]

    assert await ids() == [d, c, b, a]
    assert await ids(key_id=first.id) == [d, b, a]
    assert await ids(model="aria-sonnet-4.6") == [a]
    assert await ids(endpoint="count_tokens") == [c]
    assert await ids(status="client_disconnected") == [b]
    assert await ids(since=MAY_1 + DAY, until=MAY_1 + 3 * DAY) == [c, b]
    # A range across a month boundary, and an empty one.
    assert await ids(since=MAY_1 + 2 * DAY, until=MAY_1 + 40 * DAY) == [d, c]
    assert await ids(since=MAY_1 + 50 * DAY) == []
    assert await ids(until=MAY_1) == []
    assert await ids(key_id=stranger.id) == []  # another account's key inside this account's scope
    assert await store.usage_count(UsageFilter(account_id=account.id, key_id=first.id, status="ok")) == 2

    facets = await store.usage_facets(UsageFilter(account_id=account.id, model="nothing-matches"))
    assert facets.models == ("aria-haiku-4.5", "aria-sonnet-4.6")
    assert facets.endpoints == ("chat", "count_tokens", "messages")
    assert facets.statuses == ("client_disconnected", "ok")
    june = await store.usage_facets(UsageFilter(account_id=account.id, since=MAY_1 + 31 * DAY))
    assert (june.models, june.endpoints, june.statuses) == (("aria-haiku-4.5",), ("messages",), ("ok",))


async def test_daily_totals_by_model_per_utc_day(store: Store) -> None:
    account, first, second, stranger = await two_accounts(store)
    await spend(store, first, MAY_1 + 5, 10)
    await spend(store, second, MAY_1 + DAY - 1, 20)  # 23:59:59 on May 1st
    await spend(store, first, MAY_1 + DAY, 30, model="aria-sonnet-4.6")  # midnight: May 2nd
    await spend(store, first, MAY_1 + DAY + 5, 40)
    await spend(store, stranger, MAY_1 + 5, 50)
    await spend(store, first, MAY_1 + 31 * DAY, 60)  # June

    days = await store.usage_daily("2026-05", account_id=account.id)
    assert [(d.day, d.model, d.requests, d.charged_uc) for d in days] == [
        ("2026-05-01", "aria-haiku-4.5", 2, 30),
        ("2026-05-02", "aria-haiku-4.5", 1, 40),
        ("2026-05-02", "aria-sonnet-4.6", 1, 30),
    ]
    first_day = days[0]
    assert (first_day.input_tokens, first_day.output_tokens, first_day.cache_tokens) == (20, 40, 6)
    assert [d.charged_uc for d in await store.usage_daily("2026-05", key_id=second.id)] == [20]
    everyone = await store.usage_daily("2026-05")
    assert sum(d.charged_uc for d in everyone) == 150
    assert await store.usage_daily("2026-07", account_id=account.id) == []


async def test_top_keys_by_spend_with_names(store: Store) -> None:
    account, first, second, stranger = await two_accounts(store)
    third = await store.create_key(new_key(account, name="third"), MAY_1)
    for key, charged in [(first, 10), (first, 15), (second, 40), (third, 5), (stranger, 100)]:
        await spend(store, key, MAY_1 + 100, charged)
    top = await store.top_keys("2026-05", account_id=account.id, limit=2)
    assert [(t.key_id, t.name, t.requests, t.charged_uc) for t in top] == [
        (second.id, "second", 1, 40),
        (first.id, first.name, 2, 25),
    ]
    assert top[0].account_id == account.id and top[0].tokens == 33
    everyone = await store.top_keys("2026-05", limit=10)
    assert [t.key_id for t in everyone] == [stranger.id, second.id, first.id, third.id]
    assert await store.top_keys("2026-06", account_id=account.id) == []


async def test_key_activity_gives_month_spend_holds_and_last_use(store: Store) -> None:
    account, first, second, stranger = await two_accounts(store)
    await spend(store, first, MAY_1 + 100, 10)
    latest = MAY_1 + 200
    await spend(store, first, latest, 20)
    await spend(store, second, MAY_1 - DAY, 7)  # April only
    pending = hold(first, 300, now=MAY_1 + 300)
    await store.reserve(pending)

    may = await store.key_activity("2026-05", account.id)
    assert set(may) == {first.id, second.id}
    assert (may[first.id].spent_uc, may[first.id].reserved_uc) == (30, 300)
    assert may[first.id].last_used_at == latest
    assert (may[second.id].spent_uc, may[second.id].reserved_uc) == (0, 0)
    assert may[second.id].last_used_at == MAY_1 - DAY  # last used in an earlier month
    assert stranger.id in await store.key_activity("2026-05")
    unused = await store.create_key(new_key(account), MAY_1)
    assert (await store.key_activity("2026-05", account.id))[unused.id].last_used_at is None
