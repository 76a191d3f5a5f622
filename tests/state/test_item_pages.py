"""Listing a big conversation reads one page, in SQL, off the event loop: the work a page of
``GET /v1/conversations/{id}/items`` and ``GET /v1/responses/{id}/input_items`` makes the database
do does not grow with the conversation (a store that read every item and paged in Python did
work in proportion to the whole conversation, on every request, however small the page).

Measured as SQLite virtual-machine steps on the reader thread's connection, the one that reads
stored state (``SqliteDatabase.read``): deterministic, and zero if a read ran on the loop's own
connection instead."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from tests.gateway.clients import SdkClients
from tests.gateway_server import GatewayServer, running_gateway
from tests.whole_store import whole_store

from modelgate.storage.responses import NewResponse, StoredItem
from modelgate.storage.sqlite_database import SqliteDatabase

#: Items of the big conversation; the small one has ``SMALL``.
BIG = 4_000
SMALL = 4
#: Progress-handler granularity: one count per this many SQLite VM instructions.
STEP = 1


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    with running_gateway(tmp_path_factory.mktemp("pages") / "data") as server:
        yield server


def _items(prefix: str, count: int, section: str = "input") -> list[StoredItem]:
    return [
        StoredItem(
            f"msg_{prefix}_{n}",
            b'{"id":"msg_%s_%d","type":"message","role":"user","content":[{"type":"input_text","text":"t"}]}'
            % (prefix.encode(), n),
            section,  # type: ignore[arg-type]
        )
        for n in range(count)
    ]


def _reader_steps(gateway: GatewayServer, work: Callable[[], object]) -> int:
    """VM steps (in units of ``STEP``) the store's reader connection ran during ``work``."""
    store = whole_store(gateway.services)
    assert isinstance(store.database, SqliteDatabase)
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0  # go on

    def install(db: object) -> None:
        db.set_progress_handler(count, STEP)  # type: ignore[attr-defined]

    def remove(db: object) -> None:
        db.set_progress_handler(None, 0)  # type: ignore[attr-defined]

    gateway.call(store.database.read(install))
    try:
        work()
    finally:
        gateway.call(store.database.read(remove))
    return steps[0]


def _conversation(gateway: GatewayServer, sdk: SdkClients, size: int) -> tuple[str, object]:
    account = gateway.account(f"pages-{time.monotonic_ns()}")
    client = sdk.openai(gateway.base_url, gateway.key(account, "Nova", rpm=10_000).secret)
    conversation = client.conversations.create().id
    now = time.time()
    added = gateway.call(
        gateway.services.responses.add_conversation_items(
            account.id, conversation, _items(conversation, size), now, now + 3600, 10**12
        )
    )
    assert added is True
    return conversation, client


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_a_page_of_conversation_items_reads_no_more_for_a_big_conversation(
    gateway: GatewayServer, sdk: SdkClients, order: str
) -> None:
    small, small_client = _conversation(gateway, sdk, SMALL)
    big, big_client = _conversation(gateway, sdk, BIG)

    def first_item(conversation: str, client: object) -> Callable[[], object]:
        def work() -> object:
            page = client.conversations.items.list(conversation, limit=1, order=order)  # type: ignore[attr-defined]
            assert len(page.data) == 1 and page.has_more
            return page

        return work

    small_steps = _reader_steps(gateway, first_item(small, small_client))
    big_steps = _reader_steps(gateway, first_item(big, big_client))
    assert small_steps > 0  # the page was read on the reader thread, not on the loop
    # BIG / SMALL = 1000 times the items; reading them all would be hundreds of times the work.
    assert big_steps <= 2 * small_steps, (small_steps, big_steps)
    # The page is the right one: the first or the last item of the big conversation.
    expected = f"msg_{big}_0" if order == "asc" else f"msg_{big}_{BIG - 1}"
    assert first_item(big, big_client)().data[0].id == expected  # type: ignore[attr-defined]


def test_a_page_of_a_responses_input_items_reads_no_more_for_a_long_input(
    gateway: GatewayServer, sdk: SdkClients
) -> None:
    account = gateway.account(f"pages-{time.monotonic_ns()}")
    client = sdk.openai(gateway.base_url, gateway.key(account, "Nova", rpm=10_000).secret)
    now = time.time()

    def stored(size: int) -> str:
        ident = f"resp_pages_{time.monotonic_ns()}"
        record = NewResponse(
            ident, account.id, "k", b"{}", _items(ident, size), _items(ident + "o", 1, "output"),
            None, None, "", now, now + 3600,
        )  # fmt: skip
        assert gateway.call(gateway.services.responses.save_response(record, 10**12))
        return ident

    small, big = stored(SMALL), stored(BIG)

    def first_item(response_id: str) -> Callable[[], object]:
        def work() -> object:
            page = client.responses.input_items.list(response_id, limit=1)
            assert len(page.data) == 1 and page.has_more
            return page

        return work

    small_steps = _reader_steps(gateway, first_item(small))
    big_steps = _reader_steps(gateway, first_item(big))
    assert small_steps > 0
    assert big_steps <= 2 * small_steps, (small_steps, big_steps)
