"""The keys search (``KeyStore.key_page(search=...)``) on SQLite and PostgreSQL alike, now served by
trigram indexes (migrations sqlite 0019 / postgresql 0024): it finds exactly what a case-blind
substring match on name, id or display prefix finds, pages in key order, follows renames and
rotations in the same transaction, keeps revoked keys findable and never crosses accounts."""

from __future__ import annotations

import secrets

from modelgate.storage.base import KeyRecord, Store
from modelgate.storage.records import KeyControls
from tests.storage.test_contract import NOW, new_key, setup_key

NAMES = [
    "Notebook Runner", "notebook-runner-2", "CI deploy", "ci_bot", "50% off", "5_f", "100%_sure",
    'say "hi"', "back\\slash", "Zürich ops", "ab", "x", "", "NEAR(a b)", "id:odd", "a*b^c", "-minus+plus",
    "ORacle AND more", "aaaaaa", "ba",
]  # fmt: skip
QUERIES = [
    "notebook", "NOTEBOOK", "Runner-2", "ci", "CI_", "_", "%", "50%", "5_f", "%_", "\\", 'say "', '"', "zür",
    "ab", "a", "b", "x", "id:", "near(", "*", "^", "-", "+", "and", "aaaa", "aaa", "sk-cs4", "SK-CS4-Q",
    "zzz-nothing", "ops", "bA", "o",
]  # fmt: skip


def substring_match(key: KeyRecord, search: str) -> bool:
    """What the search meant before any index: ``search`` in the name, id or prefix, any case."""
    needle = search.lower()
    return any(needle in field.lower() for field in (key.name, key.id, key.prefix))


async def searched(store: Store, account_id: int | None, search: str, limit: int) -> list[str]:
    """Every page of a search, walked with each page's last key as the cursor."""
    out: list[str] = []
    after: tuple[float, str] | None = None
    while True:
        page = await store.key_page(account_id, limit=limit, after=after, search=search)
        out += [k.id for k in page]
        if len(page) < limit:
            return out
        after = (page[-1].created_at, page[-1].id)


async def test_search_finds_what_a_substring_match_finds_in_key_order(store: Store) -> None:
    account, first = await setup_key(store)
    other, stranger = await setup_key(store, name="notebook of another account")
    mine = [first]
    for n, name in enumerate(NAMES):
        prefix = "sk-cs4-Qr" + secrets.token_hex(1) if n % 3 == 0 else "sk-cs4-abc"
        # Pairs share a creation time: the id breaks the tie, in searches too.
        mine.append(await store.create_key(new_key(account, name=name, prefix=prefix), NOW + n // 2))
    theirs = [stranger, await store.create_key(new_key(other, name="CI deploy too"), NOW + 1)]
    in_order = sorted(mine, key=lambda k: (k.created_at, k.id))
    everyone = sorted(mine + theirs, key=lambda k: (k.created_at, k.id))
    for search in [*QUERIES, first.id.upper(), mine[5].id[-7:]]:
        expected = [k.id for k in in_order if substring_match(k, search)]
        for limit in (2, 100):
            assert await searched(store, account.id, search, limit) == expected, (search, limit)
        # Operator-wide: every account's keys, in the one key order.
        assert await searched(store, None, search, 3) == [
            k.id for k in everyone if substring_match(k, search)
        ], search
    # Another account's keys are never found from this one, whatever the search.
    assert await searched(store, account.id, "another account", 10) == []
    assert await searched(store, other.id, "notebook", 10) == [stranger.id]


async def test_search_follows_renames_and_rotations_and_finds_revoked_keys(store: Store) -> None:
    account, _ = await setup_key(store)
    renamed = await store.create_key(new_key(account, name="Alpha-Build"), NOW)
    rotated = await store.create_key(new_key(account, name="rotor", prefix="sk-cs4-OldP"), NOW + 1)
    revoked = await store.create_key(new_key(account, name="Gamma-Gone"), NOW + 2)
    assert await searched(store, account.id, "alpha-b", 10) == [renamed.id]
    await store.update_key(renamed.id, KeyControls(name="Omega-Deploy"), NOW + 3)
    await store.update_key(renamed.id, KeyControls(rpm=5), NOW + 4)  # not a rename: name unchanged
    assert await searched(store, account.id, "alpha-b", 10) == []
    assert await searched(store, account.id, "omega-d", 10) == [renamed.id]
    assert await searched(store, account.id, "deploy", 10) == [renamed.id]
    await store.rotate_key(rotated.id, secrets.token_bytes(32), "sk-cs4-NewP", "abcd", 0, NOW + 5)
    assert await searched(store, account.id, "oldp", 10) == []
    assert await searched(store, account.id, "NEWP", 10) == [rotated.id]
    await store.revoke_key(revoked.id, NOW + 6)
    found = await store.key_page(account.id, limit=10, search="gamma")
    assert [(k.id, k.state) for k in found] == [(revoked.id, "disabled")]
    # Renamed twice, back to a name it had: found by it once, not twice.
    await store.update_key(renamed.id, KeyControls(name="Alpha-Build"), NOW + 7)
    assert await searched(store, account.id, "alpha-build", 10) == [renamed.id]
    assert await searched(store, account.id, "omega", 10) == []
