"""Key pages (``KeyStore.key_page``) and the key view's paged catch-up (``keys_changed_since`` with a
limit) on SQLite and PostgreSQL alike."""

from __future__ import annotations

from modelgate.storage.base import KeyRecord, Store
from tests.storage.test_contract import NOW, new_key, setup_key


async def pages(store: Store, account_id: int | None, limit: int, search: str = "") -> list[list[KeyRecord]]:
    out: list[list[KeyRecord]] = []
    after: tuple[float, str] | None = None
    while True:
        page = await store.key_page(account_id, limit=limit, after=after, search=search)
        if not page:
            return out
        out.append(page)
        after = (page[-1].created_at, page[-1].id)


async def test_key_pages_list_every_key_once_in_creation_order(store: Store) -> None:
    account, first = await setup_key(store)
    other, stranger = await setup_key(store)
    mine = [first]
    for n in range(16):
        # Pairs share a creation time: the id breaks the tie.
        mine.append(await store.create_key(new_key(account, name=f"Batch_{n}"), NOW + n // 2))
    found = await pages(store, account.id, 5)
    assert [len(p) for p in found] == [5, 5, 5, 2]
    expected = sorted(mine, key=lambda k: (k.created_at, k.id))
    assert [k.id for p in found for k in p] == [k.id for k in expected]
    everyone = [k.id for p in await pages(store, None, 7) for k in p]
    assert len(everyone) == len(set(everyone)) == 18 and stranger.id in everyone
    assert other.id != account.id


async def test_key_search_is_case_blind_and_takes_wildcards_literally(store: Store) -> None:
    account, _ = await setup_key(store)
    wanted = await store.create_key(new_key(account, name="Notebook 50%_off"), NOW)
    await store.create_key(new_key(account, name="agents"), NOW)
    for search in ("notebook", "NOTEBOOK", "50%_", wanted.id.upper()):
        assert [k.id for k in await store.key_page(account.id, limit=10, search=search)] == [wanted.id]
    assert await store.key_page(account.id, limit=10, search="5%f") == []
    assert await store.key_page(account.id, limit=10, search="_x_") == []


async def test_changes_since_a_version_come_in_pages_of_the_lowest_versions(store: Store) -> None:
    account, first = await setup_key(store)
    created = [first] + [await store.create_key(new_key(account), NOW) for _ in range(9)]
    start = created[0].version - 1
    page = await store.keys_changed_since(start, limit=4)
    assert [k.id for k in page] == [k.id for k in created[:4]]
    rest = await store.keys_changed_since(page[-1].version, limit=100)
    assert [k.id for k in rest] == [k.id for k in created[4:]]
