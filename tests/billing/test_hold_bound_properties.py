"""The hold is a true upper bound for every kind the provider bills (issue #27): through the real
``Ledger`` on a real SQLite store, an account holding exactly the hold pays the exact cost of any
usage within the request's bounds (any split of its input over uncached, 5-minute and 1-hour
cache writes and cache reads, any output up to ``max_tokens``, any number of web searches up to
the search bound) with nothing left unpaid; one search beyond the bound is the shortfall."""

from __future__ import annotations

import asyncio
import itertools
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from modelgate.billing.ledger import Hold, Ledger, Purpose, Settlements, UsageStatus
from modelgate.billing.pricing import bound_uc, cost_uc
from modelgate.catalogue import Model, build_catalogue
from modelgate.ir import Usage
from modelgate.storage.base import NewKey, Store
from tests.whole_store import SqliteStore

NOW = 1_780_000_000.0
MODELS = list(build_catalogue().models.values())
_ids = itertools.count(1)


class _Clock:
    def time(self) -> float:
        return NOW

    def steady(self) -> float:
        return NOW


class _World:
    def __init__(self, path: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.store: Store = SqliteStore(path)
        self.loop.run_until_complete(self.store.migrate())
        self.ledger = Ledger(self.store, Settlements(), _Clock(), 600.0)

    def hold(self, model: Model, balance: int, input_bound: int, max_tokens: int, searches: int) -> Hold:
        async def run() -> Hold:
            n = next(_ids)
            account = await self.store.create_account(f"a{n}", balance, NOW)
            key = await self.store.create_key(
                NewKey(
                    f"key_{n}", account.id, f"k{n}", "Pro", 60, None, None, os.urandom(32), "sk-x", "abcd"
                ),
                NOW,
            )
            purpose = Purpose(f"req_{n}", key.id, account.id, "messages", model, NOW)
            outcome = await self.ledger.reserve(
                purpose, input_bound=input_bound, max_tokens=max_tokens, web_searches=searches
            )
            assert isinstance(outcome, Hold)
            return outcome

        return self.loop.run_until_complete(run())


@pytest.fixture(scope="module")
def world() -> Iterator[_World]:
    folder = Path(tempfile.mkdtemp(prefix="hold-bound-"))
    world = _World(folder / "ledger.db")
    try:
        yield world
    finally:
        world.loop.run_until_complete(world.store.close())
        world.loop.close()


@settings(max_examples=60, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    input_bound=st.integers(0, 200_000),
    max_tokens=st.integers(1, 32_000),
    searches=st.integers(0, 20),
    data=st.data(),
)
def test_an_account_holding_exactly_the_hold_pays_any_usage_within_it(
    world: _World, model: Model, input_bound: int, max_tokens: int, searches: int, data: st.DataObject
) -> None:
    price = model.price
    held = bound_uc(input_bound, max_tokens, price, searches)
    hold = world.hold(model, held, input_bound, max_tokens, searches)
    assert (hold.granted_uc, hold.max_tokens, hold.balance_after_uc) == (held, max_tokens, 0)
    writes = data.draw(st.integers(0, input_bound))
    one_hour = data.draw(st.integers(0, writes))
    reads = data.draw(st.integers(0, input_bound - writes))
    usage = Usage(
        input_tokens=data.draw(st.integers(0, input_bound - writes - reads)),
        output_tokens=data.draw(st.integers(0, max_tokens)),
        cache_creation_input_tokens=writes,
        cache_read_input_tokens=reads,
        cache_write_1h_input_tokens=one_hour,
        web_search_requests=data.draw(st.integers(0, searches)),
    )
    settled = world.loop.run_until_complete(hold.settle(usage, UsageStatus.OK))
    assert settled.applied and settled.charged_uc == cost_uc(usage, price) <= held


def test_a_search_beyond_the_bound_is_the_shortfall(world: _World) -> None:
    """The bound is the setting (or max_uses): a provider that searches more is charged only from
    what is free, and here nothing else is."""
    model = build_catalogue().models["aria-sonnet-4.6"]
    held = bound_uc(100, 10, model.price, 2)
    hold = world.hold(model, held, 100, 10, 2)
    usage = Usage(input_tokens=100, output_tokens=10, web_search_requests=3)
    settled = world.loop.run_until_complete(hold.settle(usage, UsageStatus.OK))
    assert settled.charged_uc == held < cost_uc(usage, model.price)
    [record] = world.loop.run_until_complete(world.store.usage_records("2026-05", key_id=hold.purpose.key_id))
    assert record.shortfall_uc == cost_uc(usage, model.price) - held
    assert (record.web_search_requests, record.charged_uc) == (3, held)
