"""``billing.ledger``: a hold ends exactly once, whichever of settle and release comes first, even
when they race and when the request that started the settlement is cancelled meanwhile. Against
the real SQLite store."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from modelgate import ir
from modelgate.billing.ledger import Hold, Ledger, Purpose, Settlements, UsageStatus
from modelgate.billing.pricing import cost_uc
from modelgate.catalogue import build_catalogue
from modelgate.clock import month_of
from modelgate.storage.base import Account, NewKey, Refusal
from tests.gateway_server import ManualClock
from tests.whole_store import SqliteStore

NOW = 1_780_000_000.0  # 2026-05-28
MODEL = build_catalogue().models["aria-haiku-4.5"]
USAGE = ir.Usage(input_tokens=40, output_tokens=25)


@dataclass
class Books:
    store: SqliteStore
    ledger: Ledger
    settlements: Settlements
    account: Account
    key_id: str


@pytest.fixture
async def books(tmp_path: Path) -> AsyncIterator[Books]:
    store = SqliteStore(tmp_path / "ledger.db")
    await store.migrate()
    account = await store.create_account("acme", 5_000_000, NOW)
    key = NewKey(
        id="key_hold",
        account_id=account.id,
        name="k",
        group="Basic",
        rpm=60,
        allowed_models=None,
        monthly_cap_uc=None,
        digest=secrets.token_bytes(32),
        prefix="sk-cs4-abc",
        last4="wxyz",
    )
    await store.create_key(key, NOW)
    settlements = Settlements()
    ledger = Ledger(store, settlements, ManualClock(NOW), ttl_seconds=600)
    try:
        yield Books(store, ledger, settlements, account, key.id)
    finally:
        await settlements.drain()
        await store.close()


async def reserve(books: Books, request_id: str) -> Hold:
    purpose = Purpose(request_id, books.key_id, books.account.id, "messages", MODEL, NOW)
    hold = await books.ledger.reserve(purpose, input_bound=100, max_tokens=200)
    assert not isinstance(hold, Refusal)
    return hold


async def test_settle_and_release_racing_end_the_hold_once(books: Books) -> None:
    hold = await reserve(books, "req_race")
    outcomes = await asyncio.gather(
        hold.settle(USAGE, UsageStatus.OK),
        hold.release(UsageStatus.CANCELLED),
        hold.settle(USAGE, UsageStatus.UPSTREAM_INCOMPLETE),
        hold.release(UsageStatus.GATEWAY_ERROR),
    )
    # The first call decided; the others returned its outcome and touched nothing.
    assert all(outcome is outcomes[0] or outcome == outcomes[0] for outcome in outcomes)
    assert outcomes[0].applied and outcomes[0].charged_uc == cost_uc(USAGE, MODEL.price)
    (record,) = await books.store.usage_records(month_of(NOW), key_id=books.key_id)
    assert record.request_id == "req_race" and record.status == "ok"
    assert record.charged_uc == cost_uc(USAGE, MODEL.price)
    account = await books.store.get_account(books.account.id)
    assert account is not None and account.reserved_uc == 0
    assert account.balance_uc == 5_000_000 - cost_uc(USAGE, MODEL.price)


async def test_release_first_then_settle_charges_nothing(books: Books) -> None:
    hold = await reserve(books, "req_released")
    released = await hold.release(UsageStatus.REFUSED)
    settled = await hold.settle(USAGE, UsageStatus.OK)
    assert released.charged_uc == 0 and settled == released
    (record,) = await books.store.usage_records(month_of(NOW), key_id=books.key_id)
    assert (record.status, record.charged_uc, record.output_tokens) == ("refused", 0, 0)
    account = await books.store.get_account(books.account.id)
    assert account is not None and (account.balance_uc, account.reserved_uc) == (5_000_000, 0)


async def test_a_settlement_outlives_the_cancelled_request_that_started_it(books: Books) -> None:
    hold = await reserve(books, "req_cancelled")
    request = asyncio.ensure_future(hold.settle(USAGE, UsageStatus.OK))
    await asyncio.sleep(0)  # the settlement is under way on the runner
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
    # The request is gone, its settlement is not: a later release sees it and changes nothing.
    after = await hold.release(UsageStatus.CLIENT_DISCONNECTED)
    assert after.charged_uc == cost_uc(USAGE, MODEL.price)
    await books.settlements.drain()
    (record,) = await books.store.usage_records(month_of(NOW), key_id=books.key_id)
    assert record.status == "ok" and record.charged_uc == cost_uc(USAGE, MODEL.price)


def test_an_upstream_failure_is_recorded_by_its_error_kind() -> None:
    assert UsageStatus.upstream("timeout") is UsageStatus.UPSTREAM_TIMEOUT
    assert UsageStatus.upstream("invalid_request") is UsageStatus.UPSTREAM_INVALID_REQUEST
    assert UsageStatus.upstream("overloaded") is UsageStatus.UPSTREAM_OVERLOADED
    # A kind without its own status is still recorded, never an error on the way to settlement.
    assert UsageStatus.upstream("no_such_kind") is UsageStatus.UPSTREAM_UPSTREAM_ERROR
