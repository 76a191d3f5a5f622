"""The runtime upstream store (storage.upstream_entries) on SQLite and PostgreSQL alike: every
change adds one to the generation, a snapshot reads entries and prices together, deleting what is
not there changes nothing, and a second instance sees the first one's writes."""

from __future__ import annotations

from modelgate.storage.upstream_entries import StoredEntry, StoredPrice, UpstreamStore
from modelgate.storage.upstream_store import upstream_store
from tests.storage.conftest import StoreFactory
from tests.storage.test_contract import NOW
from tests.whole_store import WholeStore


async def _store(engine: StoreFactory) -> UpstreamStore:
    opened = await engine()
    assert isinstance(opened, WholeStore)
    return upstream_store(opened.database)


async def test_changes_are_counted_and_seen_by_another_instance(engine: StoreFactory) -> None:
    first, second = await _store(engine), await _store(engine)
    assert await first.generation() == 0
    sealed = b"v1" + bytes(range(40))
    assert await first.put_entry(StoredEntry("provider", "p1", '{"config": {}}', sealed, NOW)) == 1
    assert await first.put_entry(StoredEntry("provider", "p1", '{"config": {"a": 1}}', sealed, NOW + 1)) == 2
    assert await first.put_entry(StoredEntry("alias", "fast", '"aria-haiku-4.5"', None, NOW)) == 3
    assert await first.put_price(StoredPrice("aria-haiku-4.5", NOW + 60, '{"input": 2000000}', NOW)) == 4
    assert await second.generation() == 4
    snapshot = await second.snapshot()
    assert snapshot.generation == 4
    assert [(e.kind, e.name, e.body, e.sealed) for e in snapshot.entries] == [
        ("alias", "fast", '"aria-haiku-4.5"', None),
        ("provider", "p1", '{"config": {"a": 1}}', sealed),
    ]
    assert [(p.model_id, p.effective_from, p.body) for p in snapshot.prices] == [
        ("aria-haiku-4.5", NOW + 60, '{"input": 2000000}')
    ]
    assert await second.delete_entry("provider", "nope") is None
    assert await second.delete_price("aria-haiku-4.5", NOW) is None
    assert await first.generation() == 4
    assert await second.delete_entry("provider", "p1") == 5
    assert await second.delete_price("aria-haiku-4.5", NOW + 60) == 6
    after = await first.snapshot()
    assert [e.name for e in after.entries] == ["fast"] and after.prices == () and after.generation == 6
