"""A member's own keys (``key_owners``) as a filter, on SQLite and PostgreSQL alike: the key list's
pages (``KeyStore.key_page(owner=...)``) and the usage log, its count and its facets
(``UsageFilter.owner``), never holding another person's key, with or without the rollups."""

from __future__ import annotations

from modelgate.storage.base import KeyRecord, Store
from modelgate.storage.reports import UsageFilter
from tests.storage.test_contract import NOW, new_key
from tests.storage.test_contract_people import ISSUER, people_of
from tests.storage.test_contract_reports import DAY, MAY_1, spend, two_accounts


async def owned_pages(store: Store, account_id: int, owner: str, limit: int, search: str = "") -> list[str]:
    ids: list[str] = []
    after: tuple[float, str] | None = None
    while True:
        page = await store.key_page(account_id, limit=limit + 1, after=after, search=search, owner=owner)
        ids += [k.id for k in page[:limit]]
        if len(page) <= limit:
            return ids
        after = (page[limit - 1].created_at, page[limit - 1].id)


async def test_a_key_page_with_an_owner_holds_only_their_keys(store: Store) -> None:
    people = people_of(store)
    account, first, second, stranger = await two_accounts(store)
    mark = await people.upsert_person("person_mk", ISSUER, "sub-mk", "mk@example.com", "Mk", 0.0)
    nina = await people.upsert_person("person_nn", ISSUER, "sub-nn", "nn@example.com", "Nn", 0.0)
    keys: dict[str, list[KeyRecord]] = {mark.id: [], nina.id: []}
    for n in range(9):
        # Nina's keys sit in between Mark's, and pairs share a creation time (the id breaks the tie).
        who = mark.id if n % 3 else nina.id
        key = await store.create_key(new_key(account, name=f"{who}-{n}"), NOW + n // 2)
        await people.set_key_owner(key.id, who, account.id)
        keys[who].append(key)
    # A key Mark owns in another account stays out of this account's pages.
    await people.set_key_owner(stranger.id, mark.id, stranger.account_id)
    marks = [k.id for k in sorted(keys[mark.id], key=lambda k: (k.created_at, k.id))]
    for limit in (1, 2, 5, 100):
        assert await owned_pages(store, account.id, mark.id, limit) == marks
    assert await owned_pages(store, account.id, mark.id, 2, search=marks[3].upper()) == [marks[3]]
    assert await owned_pages(store, account.id, mark.id, 2, search=f"{nina.id}-") == []
    assert await owned_pages(store, account.id, "person_nobody", 2) == []
    everyone = await store.key_page(account.id, limit=100)
    assert {k.id for k in everyone} == {first.id, second.id} | {k.id for ks in keys.values() for k in ks}


async def test_usage_with_an_owner_counts_and_pages_only_their_keys(store: Store) -> None:
    people = people_of(store)
    account, first, second, stranger = await two_accounts(store)
    mark = await people.upsert_person("person_mu", ISSUER, "sub-mu", "mu@example.com", "Mu", 0.0)
    await people.set_key_owner(first.id, mark.id, account.id)
    await people.set_key_owner(stranger.id, "person_other", stranger.account_id)
    mine = [await spend(store, first, MAY_1 + i * 3600, 10, model="aria-haiku-4.5") for i in range(3)]
    await spend(store, second, MAY_1 + 60, 20, model="aria-sonnet-4.5", endpoint="chat")
    await spend(store, second, MAY_1 + DAY + 60, 20, status="error")
    await spend(store, stranger, MAY_1 + 120, 30)
    where = UsageFilter(account_id=account.id, owner=mark.id)
    page = await store.usage_page(where, limit=2)
    rest = await store.usage_page(where, limit=2, after=page.next)
    assert [r.request_id for r in page.records + rest.records] == mine[::-1] and rest.next is None
    assert {r.key_id for r in page.records + rest.records} == {first.id}
    # Whole UTC days are counted from the rollups, a partial day from the records: both agree.
    assert await store.usage_count(where) == 3
    assert await store.usage_count(UsageFilter(account_id=account.id, owner=mark.id, since=MAY_1)) == 3
    assert await store.usage_count(UsageFilter(account_id=account.id, owner=mark.id, since=MAY_1 + 1)) == 2
    facets = await store.usage_facets(where)
    assert (facets.models, facets.endpoints, facets.statuses) == (("aria-haiku-4.5",), ("messages",), ("ok",))
    partial = await store.usage_facets(UsageFilter(account_id=account.id, owner=mark.id, since=MAY_1 + 1))
    assert partial.models == ("aria-haiku-4.5",)
    # Nobody's keys: nothing, however the count is answered.
    nobody = UsageFilter(account_id=account.id, owner="person_nobody")
    assert (await store.usage_page(nobody, limit=5)).records == []
    assert await store.usage_count(nobody) == 0
    assert await store.usage_count(UsageFilter(account_id=account.id)) == 5
