"""Stored Responses state on SQLite and PostgreSQL alike: ownership, order, chains, expiry,
conversations, the per-account byte limit (also under concurrency), and forgetting an account."""

from __future__ import annotations

import asyncio

import pytest

from modelgate.storage.base import Store
from modelgate.storage.responses import (
    NewResponse,
    PageRequest,
    StoredConversation,
    StoredItem,
    UnknownCursor,
    object_bytes,
)
from tests.storage.conftest import StoreFactory
from tests.storage.test_contract import NOW

LIMIT = 10_000_000
DAY = 86_400.0


def item(item_id: str, text: str, section: str = "input") -> StoredItem:
    body = b'{"id":"%s","type":"message","role":"user","content":[{"type":"input_text","text":"%s"}]}' % (
        item_id.encode(),
        text.encode(),
    )
    return StoredItem(item_id, body, section)  # type: ignore[arg-type]


def response(
    response_id: str,
    account_id: int,
    *,
    previous: str | None = None,
    conversation: str | None = None,
    inputs: tuple[StoredItem, ...] = (),
    outputs: tuple[StoredItem, ...] = (),
    created: float = NOW,
    ttl: float = DAY,
    holder: str = "",
) -> NewResponse:
    return NewResponse(
        id=response_id,
        account_id=account_id,
        key_id="key_1",
        body=b'{"id":"%s","object":"response"}' % response_id.encode(),
        input_items=inputs,
        output_items=outputs,
        previous_id=previous,
        conversation_id=conversation,
        holder=holder,
        created_at=created,
        expires_at=created + ttl,
    )


async def test_a_response_is_read_back_only_by_its_account_and_only_while_live(store: Store) -> None:
    mine = await store.create_account("state-mine", 0, NOW)
    other = await store.create_account("state-other", 0, NOW)
    saved = response(
        "resp_1",
        mine.id,
        inputs=(item("msg_in", "hi"),),
        outputs=(item("msg_out", "hello", "output"),),
        holder="openai-main",
    )
    assert await store.save_response(saved, LIMIT)

    found = await store.get_response(mine.id, "resp_1", NOW + 1)
    assert found is not None
    assert found.body == saved.body and found.holder == "openai-main" and found.created_at == NOW
    assert [i.id for i in found.input_items] == ["msg_in"]
    assert [i.id for i in found.output_items] == ["msg_out"]
    assert found.output_items[0].body == saved.output_items[0].body

    assert await store.get_response(other.id, "resp_1", NOW + 1) is None
    assert await store.get_response(mine.id, "resp_1", NOW + DAY) is None  # expired
    assert await store.find_item(other.id, "msg_out", NOW) is None
    hit = await store.find_item(mine.id, "msg_out", NOW)
    assert hit is not None and (hit.owner_id, hit.holder, hit.item.section) == (
        "resp_1",
        "openai-main",
        "output",
    )

    assert not await store.delete_response(other.id, "resp_1")
    assert await store.get_response(mine.id, "resp_1", NOW) is not None
    assert await store.delete_response(mine.id, "resp_1")
    assert await store.get_response(mine.id, "resp_1", NOW) is None
    assert await store.find_item(mine.id, "msg_out", NOW) is None
    assert await store.state_bytes(mine.id) == 0


async def test_small_and_large_responses_saved_together_are_each_kept(store: Store) -> None:
    """A small answer goes with the ledger's group commit and a large one (over 64 KiB) on the
    worker thread on SQLite; either way each is kept whole and counted."""
    account = await store.create_account("state-sizes", 0, NOW)
    small = response("resp_small", account.id, inputs=(item("s_in", "hi"),))
    large = response("resp_large", account.id, inputs=(item("l_in", "x" * 200_000),))
    kept = await asyncio.gather(store.save_response(small, LIMIT), store.save_response(large, LIMIT))
    assert list(kept) == [True, True]
    for saved in (small, large):
        got = await store.get_response(account.id, saved.id, NOW)
        assert got is not None and got.input_items == saved.input_items
    assert await store.state_bytes(account.id) == sum(
        object_bytes(r.body, r.input_items) for r in (small, large)
    )


async def test_a_chain_is_read_oldest_first_and_ends_where_a_link_is_gone(store: Store) -> None:
    account = await store.create_account("state-chain", 0, NOW)
    for n in range(1, 5):
        previous = f"resp_{n - 1}" if n > 1 else None
        await store.save_response(
            response(f"resp_{n}", account.id, previous=previous, inputs=(item(f"in_{n}", str(n)),)), LIMIT
        )
    chain = await store.response_chain(account.id, "resp_4", NOW, 100)
    assert chain is not None and [r.id for r in chain] == ["resp_1", "resp_2", "resp_3", "resp_4"]
    assert [r.input_items[0].id for r in chain] == ["in_1", "in_2", "in_3", "in_4"]
    capped = await store.response_chain(account.id, "resp_4", NOW, 2)
    assert capped is not None and [r.id for r in capped] == ["resp_3", "resp_4"]
    await store.delete_response(account.id, "resp_2")
    cut = await store.response_chain(account.id, "resp_4", NOW, 100)
    assert cut is not None and [r.id for r in cut] == ["resp_3", "resp_4"]
    assert await store.response_chain(account.id, "resp_missing", NOW, 100) is None


async def test_an_item_id_resolves_to_its_newest_copy(store: Store) -> None:
    account = await store.create_account("state-items", 0, NOW)
    await store.save_response(response("resp_a", account.id, inputs=(item("msg_x", "old"),)), LIMIT)
    await store.save_response(
        response("resp_b", account.id, inputs=(item("msg_x", "new"),), created=NOW + 5), LIMIT
    )
    hit = await store.find_item(account.id, "msg_x", NOW + 6)
    assert hit is not None and hit.owner_id == "resp_b" and b"new" in hit.item.body


async def test_conversations_keep_items_in_order_and_take_response_items(store: Store) -> None:
    account = await store.create_account("state-conv", 0, NOW)
    other = await store.create_account("state-conv-other", 0, NOW)
    conversation = StoredConversation("conv_1", account.id, b'{"topic":"x"}', NOW)
    assert await store.create_conversation(conversation, [item("it_1", "first", "item")], NOW + DAY, LIMIT)
    assert await store.get_conversation(other.id, "conv_1", NOW) is None
    got = await store.get_conversation(account.id, "conv_1", NOW)
    assert got == conversation

    assert await store.add_conversation_items(
        account.id, "conv_1", [item("it_2", "second", "item")], NOW, NOW + DAY, LIMIT
    )
    assert (
        await store.add_conversation_items(
            other.id, "conv_1", [item("it_x", "x", "item")], NOW, NOW + DAY, LIMIT
        )
        is None
    )
    saved = response(
        "resp_c",
        account.id,
        conversation="conv_1",
        inputs=(item("it_3", "q"),),
        outputs=(item("it_4", "a", "output"),),
    )
    assert await store.save_response(saved, LIMIT)
    items = await store.conversation_items(account.id, "conv_1", NOW)
    assert items is not None and [i.id for i in items] == ["it_1", "it_2", "it_3", "it_4"]
    assert {i.section for i in items} == {"item"}
    assert await store.conversation_items(other.id, "conv_1", NOW) is None

    # A response for a conversation that is gone stores nothing.
    orphan = response("resp_orphan", account.id, conversation="conv_gone", inputs=(item("o", "o"),))
    assert not await store.save_response(orphan, LIMIT)
    assert await store.get_response(account.id, "resp_orphan", NOW) is None

    assert not await store.delete_conversation_item(other.id, "conv_1", "it_2")
    assert await store.delete_conversation_item(account.id, "conv_1", "it_2")
    assert not await store.delete_conversation_item(account.id, "conv_1", "it_2")
    items = await store.conversation_items(account.id, "conv_1", NOW)
    assert items is not None and [i.id for i in items] == ["it_1", "it_3", "it_4"]

    updated = await store.update_conversation(account.id, "conv_1", b'{"topic":"y"}', NOW, LIMIT)
    assert updated and updated.metadata == b'{"topic":"y"}'
    assert await store.update_conversation(other.id, "conv_1", b"{}", NOW, LIMIT) is None
    assert not await store.delete_conversation(other.id, "conv_1")
    assert await store.delete_conversation(account.id, "conv_1")
    assert await store.get_conversation(account.id, "conv_1", NOW) is None
    # The response stays (it is its own object); only the conversation went.
    assert await store.get_response(account.id, "resp_c", NOW) is not None
    assert await store.state_bytes(account.id) == object_bytes(
        saved.body, [*saved.input_items, *saved.output_items]
    )


async def test_the_account_limit_counts_every_byte_and_is_exact_under_concurrency(
    engine: StoreFactory,
) -> None:
    stores = [await engine() for _ in range(3)]
    account = await stores[0].create_account("state-limit", 0, NOW)
    one = response("resp_pp", account.id, inputs=(item("ipp", "x" * 100),))
    size = object_bytes(one.body, one.input_items)
    limit = size * 5 + size // 2  # room for exactly five

    attempts = [
        stores[n % 3].save_response(
            response(f"resp_{n:02d}", account.id, inputs=(item(f"i{n:02d}", "x" * 100),)), limit
        )
        for n in range(20)
    ]
    results = await asyncio.gather(*attempts)
    assert results.count(True) == 5
    assert await stores[1].state_bytes(account.id) == size * 5
    # Freed bytes can be used again.
    stored = [f"resp_{n:02d}" for n, ok in enumerate(results) if ok]
    assert await stores[2].delete_response(account.id, stored[0])
    assert await stores[0].state_bytes(account.id) == size * 4
    assert await stores[0].save_response(
        response("resp_again", account.id, inputs=(item("a", "x" * 100),)), limit
    )


async def test_expired_objects_are_swept_with_their_bytes(store: Store) -> None:
    account = await store.create_account("state-sweep", 0, NOW)
    await store.save_response(response("resp_short", account.id, inputs=(item("s", "s"),), ttl=10), LIMIT)
    await store.save_response(response("resp_long", account.id, inputs=(item("l", "l"),), ttl=DAY), LIMIT)
    conversation = StoredConversation("conv_short", account.id, b"{}", NOW)
    await store.create_conversation(conversation, [item("c", "c", "item")], NOW + 10, LIMIT)
    before = await store.state_bytes(account.id)

    assert await store.sweep_state(NOW + 5, 100) == 0
    assert await store.sweep_state(NOW + 11, 100) == 2
    assert await store.get_response(account.id, "resp_short", NOW) is None  # gone, not only hidden
    assert await store.get_conversation(account.id, "conv_short", NOW) is None
    assert await store.find_item(account.id, "s", NOW) is None
    assert await store.get_response(account.id, "resp_long", NOW + 11) is not None
    long_size = before - (await store.state_bytes(account.id))
    assert long_size > 0 and await store.sweep_state(NOW + 11, 100) == 0


async def test_forgetting_an_account_deletes_all_of_its_state_and_nothing_else(store: Store) -> None:
    account = await store.create_account("state-forget", 0, NOW)
    other = await store.create_account("state-keep", 0, NOW)
    await store.save_response(response("resp_f1", account.id, inputs=(item("f1", "f"),)), LIMIT)
    await store.create_conversation(
        StoredConversation("conv_f", account.id, b"{}", NOW), [], NOW + DAY, LIMIT
    )
    await store.save_response(response("resp_k1", other.id, inputs=(item("k1", "k"),)), LIMIT)
    assert await store.forget_account_state(account.id) == 2
    assert await store.get_response(account.id, "resp_f1", NOW) is None
    assert await store.get_conversation(account.id, "conv_f", NOW) is None
    assert await store.state_bytes(account.id) == 0
    assert await store.get_response(other.id, "resp_k1", NOW) is not None


async def test_metadata_updates_count_toward_the_account_limit(store: Store) -> None:
    account = await store.create_account("state-meta", 0, NOW)
    small = b'{"k":"v"}'
    conversation = StoredConversation("conv_meta", account.id, small, NOW)
    limit = 2_000
    assert await store.create_conversation(conversation, [], NOW + DAY, limit)
    grown = b'{"k":"%s"}' % (b"x" * 1_500)
    assert await store.update_conversation(account.id, "conv_meta", grown, NOW, limit)
    assert await store.state_bytes(account.id) == len(grown)

    # Growing past the limit changes nothing, and says so.
    too_big = b'{"k":"%s"}' % (b"x" * 2_500)
    assert await store.update_conversation(account.id, "conv_meta", too_big, NOW, limit) is False
    assert await store.state_bytes(account.id) == len(grown)
    unchanged = await store.get_conversation(account.id, "conv_meta", NOW)
    assert unchanged is not None and unchanged.metadata == grown

    # Shrinking always works and frees what it frees.
    assert await store.update_conversation(account.id, "conv_meta", small, NOW, limit)
    assert await store.state_bytes(account.id) == len(small)


def _reference_page(ids: list[str], page: PageRequest) -> tuple[list[str], bool]:
    """How the list endpoints paged before the store did: the whole list in memory."""
    ordered = ids if page.ascending else ids[::-1]
    if page.after is not None:
        ordered = ordered[ordered.index(page.after) + 1 :]
    return ordered[: page.limit], len(ordered) > page.limit


async def test_conversation_items_are_paged_by_the_store_as_the_list_endpoints_page(store: Store) -> None:
    account = await store.create_account("state-page", 0, NOW)
    other = await store.create_account("state-page-other", 0, NOW)
    # A repeated id (an item added twice) pages from its first occurrence in the page's order.
    ids = [f"it_{n:03d}" for n in range(57)] + ["it_010"] + [f"it_{n:03d}" for n in range(57, 63)]
    conversation = StoredConversation("conv_page", account.id, b"{}", NOW)
    assert await store.create_conversation(
        conversation, [item(i, i, "item") for i in ids[:30]], NOW + DAY, LIMIT
    )
    assert await store.add_conversation_items(
        account.id, "conv_page", [item(i, i, "item") for i in ids[30:]], NOW, NOW + DAY, LIMIT
    )
    for ascending in (True, False):
        for limit in (1, 7, 20, 100):
            for after in (None, "it_000", "it_010", "it_033", "it_062"):
                page = PageRequest(limit, ascending, after)
                got = await store.conversation_items_page(account.id, "conv_page", NOW, page)
                assert got is not None
                assert ([i.id for i in got.items], got.has_more) == _reference_page(ids, page), page
    with pytest.raises(UnknownCursor):
        await store.conversation_items_page(account.id, "conv_page", NOW, PageRequest(5, True, "it_nope"))
    assert await store.conversation_items_page(other.id, "conv_page", NOW, PageRequest(5, True)) is None
    assert (
        await store.conversation_items_page(account.id, "conv_page", NOW + 2 * DAY, PageRequest(5, True))
        is None
    )

    newest = await store.conversation_item(account.id, "conv_page", "it_010", NOW)
    assert newest is not None and newest.id == "it_010"
    assert await store.conversation_item(account.id, "conv_page", "it_nope", NOW) is None
    assert await store.conversation_item(other.id, "conv_page", "it_010", NOW) is None


async def test_a_responses_input_items_are_paged_across_its_chain(store: Store) -> None:
    account = await store.create_account("state-chain-page", 0, NOW)
    other = await store.create_account("state-chain-page-other", 0, NOW)
    first = response("resp_p1", account.id, inputs=(item("a1", "q"),), outputs=(item("a2", "r", "output"),))
    second = response(
        "resp_p2",
        account.id,
        previous="resp_p1",
        inputs=(item("b1", "q"), item("b2", "q")),
        outputs=(item("b3", "r", "output"),),
    )
    third = response(
        "resp_p3",
        account.id,
        previous="resp_p2",
        inputs=(item("c1", "q"),),
        outputs=(item("c2", "r", "output"),),
    )
    for saved in (first, second, third):
        assert await store.save_response(saved, LIMIT)
    # What resp_p3 was given: the chain's inputs and outputs, then its own input (not its output).
    ids = ["a1", "a2", "b1", "b2", "b3", "c1"]
    for ascending in (True, False):
        for limit in (1, 2, 4, 20):
            for after in (None, "a1", "b2", "c1"):
                page = PageRequest(limit, ascending, after)
                got = await store.response_input_items_page(account.id, "resp_p3", NOW, 10, page)
                assert got is not None
                assert ([i.id for i in got.items], got.has_more) == _reference_page(ids, page), page
    # The chain is cut at max_depth: only the newest two responses.
    got = await store.response_input_items_page(account.id, "resp_p3", NOW, 2, PageRequest(20, True))
    assert got is not None and [i.id for i in got.items] == ["b1", "b2", "b3", "c1"]
    with pytest.raises(UnknownCursor):
        await store.response_input_items_page(account.id, "resp_p3", NOW, 10, PageRequest(5, True, "c2"))
    assert await store.response_input_items_page(other.id, "resp_p3", NOW, 10, PageRequest(5, True)) is None


async def test_a_batch_of_saves_keeps_each_answer_by_its_own_rules(store: Store) -> None:
    """``save_responses``: one batch, each answer's outcome as if saved alone and in order: a
    duplicate id fails only itself, the account's limit counts the answers before it."""
    account = await store.create_account("state-batch", 0, NOW)
    first = response("resp_b1", account.id, inputs=(item("b1_in", "a"),))
    size = object_bytes(first.body, first.input_items)
    batch = [
        first,
        response("resp_b1", account.id, inputs=(item("b1_again", "b"),)),  # the same id again
        response("resp_b2", account.id, inputs=(item("b2_in", "c"),)),
        response("resp_b3", account.id, inputs=(item("b3_in", "d" * 50),)),  # past the limit
    ]
    limit = 2 * size + 10
    outcomes = await store.save_responses(batch, limit)
    assert outcomes[0] is True and isinstance(outcomes[1], Exception)
    assert outcomes[2:] == [True, False]
    assert await store.state_bytes(account.id) == 2 * size
    stored = await store.get_response(account.id, "resp_b1", NOW)
    assert stored is not None and [i.id for i in stored.input_items] == ["b1_in"]
    assert await store.get_response(account.id, "resp_b3", NOW) is None
    assert await store.save_responses([], LIMIT) == []
