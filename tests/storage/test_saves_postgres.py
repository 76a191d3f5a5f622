"""Stored Responses answers that a PostgreSQL instance keeps together share one statement
(storage.postgres_saves), and sharing never changes an outcome: each answer is kept or refused
exactly as if saved alone, under the account limit, in submission order."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from modelgate.storage.base import Conflict, StorageError
from modelgate.storage.postgres_saves import _CALL, _Save, arguments
from modelgate.storage.responses import StoredConversation, appended_bytes, object_bytes
from tests.ports import unused_port
from tests.storage.engines import fresh_database
from tests.storage.test_contract import NOW
from tests.storage.test_contract_responses import DAY, LIMIT, item, response
from tests.storage.test_group_commit import BatchSizes
from tests.storage.test_group_commit_postgres import _hold, _next_xid, _waiting_backend
from tests.whole_store import PostgresStore


@pytest.fixture
async def url() -> AsyncIterator[str]:
    async with fresh_database("mgsaves") as database:
        yield database


async def _store(url: str) -> PostgresStore:
    store = PostgresStore(url)
    await store.migrate()
    return store


async def test_answers_kept_together_commit_once_with_their_items_in_order(url: str) -> None:
    store = await _store(url)
    account = await store.create_account("saves", 0, NOW)
    answers = [
        response(
            f"resp_{n}",
            account.id,
            inputs=(item(f"in_{n}_a", "q"), item(f"in_{n}_b", "q2")),
            outputs=(item(f"out_{n}", "a", "output"),),
        )
        for n in range(12)
    ]
    batches = BatchSizes()
    store.observe_ledger(batches)
    before = await _next_xid(url)
    assert await asyncio.gather(*(store.save_response(a, LIMIT) for a in answers)) == [True] * 12
    assert await _next_xid(url) - before == 1  # twelve answers, one transaction
    assert batches.sizes == [12]  # and one batch in the ledger write metrics
    for n, answer in enumerate(answers):
        got = await store.get_response(account.id, f"resp_{n}", NOW)
        assert got is not None and got.body == answer.body
        assert [i.id for i in got.input_items] == [f"in_{n}_a", f"in_{n}_b"]
        assert [i.id for i in got.output_items] == [f"out_{n}"]
    expected = sum(object_bytes(a.body, [*a.input_items, *a.output_items]) for a in answers)
    assert await store.state_bytes(account.id) == expected
    await store.close()


async def test_in_one_batch_an_answer_over_the_limit_is_refused_alone_and_later_ones_may_fit(
    url: str,
) -> None:
    store = await _store(url)
    account = await store.create_account("saves-limit", 0, NOW)
    smalls = [response(f"resp_{n}", account.id, inputs=(item(f"i{n}", "x" * 10),)) for n in range(1, 5)]
    big = response("resp_big", account.id, inputs=(item("b", "x" * 1000),))
    sizes = [object_bytes(r.body, r.input_items) for r in smalls]
    limit = sum(sizes[:3])  # the first three small ones fit, the big one never
    answers = [smalls[0], big, smalls[1], smalls[2], smalls[3]]
    kept = await asyncio.gather(*(store.save_response(a, limit) for a in answers))
    assert kept == [True, False, True, True, False]
    assert await store.get_response(account.id, "resp_big", NOW) is None
    assert await store.state_bytes(account.id) == limit
    await store.close()


async def test_a_duplicate_id_in_a_batch_fails_alone(url: str) -> None:
    store = await _store(url)
    account = await store.create_account("saves-dup", 0, NOW)
    assert await store.save_response(response("resp_taken", account.id), LIMIT)
    outcomes = await asyncio.gather(
        store.save_response(response("resp_a", account.id, inputs=(item("a", "a"),)), LIMIT),
        store.save_response(response("resp_taken", account.id), LIMIT),
        store.save_response(response("resp_b", account.id, inputs=(item("b", "b"),)), LIMIT),
        return_exceptions=True,
    )
    assert outcomes[0] is True and outcomes[2] is True
    assert isinstance(outcomes[1], Conflict)
    assert await store.get_response(account.id, "resp_a", NOW) is not None
    assert await store.get_response(account.id, "resp_b", NOW) is not None
    kept = [response("resp_taken", account.id), response("resp_a", account.id, inputs=(item("a", "a"),))]
    kept.append(response("resp_b", account.id, inputs=(item("b", "b"),)))
    sizes = [object_bytes(r.body, r.input_items) for r in kept]
    assert await store.state_bytes(account.id) == sum(sizes)
    await store.close()


async def test_answers_of_one_batch_append_to_a_conversation_one_after_another(url: str) -> None:
    store = await _store(url)
    account = await store.create_account("saves-conv", 0, NOW)
    conversation = StoredConversation("conv_b", account.id, b"{}", NOW)
    assert await store.create_conversation(conversation, [item("c0", "first", "item")], NOW + DAY, LIMIT)
    answers = [
        response(
            f"resp_c{n}",
            account.id,
            conversation="conv_b",
            inputs=(item(f"q{n}", "q"),),
            outputs=(item(f"a{n}", "a", "output"),),
        )
        for n in range(4)
    ]
    gone = response("resp_gone", account.id, conversation="conv_missing", inputs=(item("g", "g"),))
    kept = await asyncio.gather(*(store.save_response(a, LIMIT) for a in [*answers, gone]))
    assert kept == [True, True, True, True, False]
    items = await store.conversation_items(account.id, "conv_b", NOW)
    assert items is not None
    assert [i.id for i in items] == ["c0", "q0", "a0", "q1", "a1", "q2", "a2", "q3", "a3"]
    await store.close()


async def test_a_batch_finds_its_rows_by_key_on_a_connection_that_has_run_many(url: str) -> None:
    """The save function never scans stored_objects or state_usage, also after PL/pgSQL has run it
    often enough on one connection to keep a generic plan (migration 0010). Migration 0009 found
    a batch's conversations and accounts' rows with `= ANY(...)` queries whose generic plans (kept
    from a connection's sixth call on, made while the tables were young) are sequential scans:
    every batch then read all of stored_objects and, with several accounts in it, all of
    state_usage. Each batch runs in a transaction that reads its own scan counts."""
    store = await _store(url)
    conversations = (0, 2, 4, 6)  # answers 0, 2, 4, 6 of a batch append to conv_0 ... conv_6
    accounts = [await store.create_account(f"saves-plan-{n}", 0, NOW) for n in range(8)]
    for c in conversations:  # conv_c belongs to account c
        conversation = StoredConversation(f"conv_{c}", accounts[c].id, b"{}", NOW)
        assert await store.create_conversation(
            conversation, [item(f"c{c}", "first", "item")], NOW + DAY, LIMIT
        )
    expected = [await store.state_bytes(a.id) for a in accounts]
    connection = await asyncpg.connect(url)
    try:
        for batch_number in range(16):
            with_conversations = batch_number >= 8
            answers = [
                response(
                    f"resp_{batch_number}_{n}",
                    accounts[n % 8].id,
                    conversation=f"conv_{n}" if with_conversations and n in conversations else None,
                    inputs=(item(f"q{batch_number}_{n}", "q"),),
                    outputs=(item(f"a{batch_number}_{n}", "a", "output"),),
                )
                for n in range(16)
            ]
            async with connection.transaction():
                saved = await connection.fetchval(_CALL, *arguments([_Save(a, LIMIT) for a in answers]))
                assert saved == [True] * 16
                scans = await connection.fetch(
                    "SELECT relname, seq_scan FROM pg_stat_xact_user_tables "
                    "WHERE relname IN ('stored_objects', 'state_usage')"
                )
            assert {r["relname"]: r["seq_scan"] for r in scans} == {"stored_objects": 0, "state_usage": 0}, (
                f"batch {batch_number} scanned a table"
            )
            for n, answer in enumerate(answers):
                expected[n % 8] += object_bytes(answer.body, [*answer.input_items, *answer.output_items])
                expected[n % 8] += appended_bytes(answer)
    finally:
        await connection.close()
    assert [await store.state_bytes(a.id) for a in accounts] == expected
    items = await store.conversation_items(accounts[2].id, "conv_2", NOW)
    assert items is not None
    assert [i.id for i in items] == ["c2", *(f"{x}{b}_2" for b in range(8, 16) for x in ("q", "a"))]
    await store.close()


async def test_a_batch_whose_connection_the_server_ends_fails_and_the_next_gets_a_new_one(url: str) -> None:
    """The saver keeps one connection for its batches (storage.postgres_batches): when the server
    ends it under a batch, that batch's callers get StorageError and none of its answers is kept;
    the next batch goes out on a fresh connection."""
    store = await _store(url)
    account = await store.create_account("saves-ended", 0, NOW)
    first = response("resp_first", account.id, inputs=(item("f", "f"),))
    assert await store.save_response(first, LIMIT)
    blocker = await asyncpg.connect(url)
    try:
        async with blocker.transaction():
            await blocker.execute("SELECT 1 FROM state_usage WHERE account_id = $1 FOR UPDATE", account.id)
            lost = [response(f"resp_lost_{n}", account.id, inputs=(item(f"l{n}", "l"),)) for n in range(2)]
            stuck = asyncio.gather(*(store.save_response(a, LIMIT) for a in lost), return_exceptions=True)
            assert await blocker.fetchval("SELECT pg_terminate_backend($1)", await _waiting_backend(blocker))
            assert [type(o) for o in await stuck] == [StorageError, StorageError]
    finally:
        await blocker.close()
    last = response("resp_last", account.id, inputs=(item("z", "z"),))
    assert await store.save_response(last, LIMIT)
    for answer in lost:
        assert await store.get_response(account.id, answer.id, NOW) is None
    kept = [object_bytes(a.body, a.input_items) for a in (first, last)]
    assert await store.state_bytes(account.id) == sum(kept)
    await store.close()


async def test_batches_the_database_cannot_take_answer_every_caller_with_a_storage_error() -> None:
    """Both batchers (ledger operations, stored answers) turn a connection failure into
    ``StorageError`` for every caller of the batch, none left waiting."""
    store = PostgresStore(f"postgresql://nobody@127.0.0.1:{unused_port()}/none")  # nothing listens
    holds = [_hold(1, f"r{n}") for n in range(3)]
    answers = [response(f"resp_{n}", 1) for n in range(3)]
    outcomes = await asyncio.gather(
        *(store.reserve(h) for h in holds),
        *(store.save_response(a, LIMIT) for a in answers),
        return_exceptions=True,
    )
    assert all(isinstance(o, StorageError) for o in outcomes), outcomes
    await store.close()
