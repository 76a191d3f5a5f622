"""Prices changed through the admin API never reprice the past: a usage record keeps what it was
charged; a change applies to requests admitted after it; a scheduled one from its time on; a
request admitted before a change is settled at the price of its admission (its hold and its
charge use the same model entry). Real gateway, a fake upstream reporting fixed usage."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.billing.helpers import records_of, send, wait_for_record
from tests.fakes.upstream import FakeUpstream, Fault, Reply
from tests.gateway_server import GatewayServer, ManualClock, running_gateway
from tests.loop_thread import LoopThread
from tests.polling import wait_until

NOW = 1_780_000_000.0  # mid-month: an hour later is the same month
USAGE = Reply(text="priced", input_tokens=1000, output_tokens=100)


def cost(input_credits: int, output_credits: int) -> int:
    """µc of one request: 1,000 input and 100 output tokens at credits per million tokens."""
    return 1000 * input_credits + 100 * output_credits


@pytest.fixture
def priced(
    tmp_path: Path,
) -> Iterator[tuple[GatewayServer, ManualClock, asyncio.Event, LoopThread, FakeUpstream]]:
    gate = asyncio.Event()
    clock = ManualClock(NOW)
    with LoopThread("price-upstream") as loop:
        # The fifth request waits at the upstream until the test lets it go.
        calls = iter(range(1_000_000))
        fake = loop.start(
            FakeUpstream(script=lambda req: Fault.held(gate, USAGE) if next(calls) == 4 else USAGE)
        )
        providers = [
            {"name": "simulator", "kind": "simulator"},
            {"name": "fake", "kind": "anthropic", "base_url": fake.base_url, "api_key_env": "FAKE_KEY"},
        ]
        deployments = {"aria-haiku-4.5": [{"provider": "fake", "upstream_model": "claude-x"}]}
        with running_gateway(
            tmp_path / "data",
            clock=clock,
            env={"FAKE_KEY": "sk-upstream-price-test"},
            providers=providers,
            deployments=deployments,
        ) as server:
            yield server, clock, gate, loop, fake


def test_prices_apply_from_their_time_and_records_keep_their_charge(
    priced: tuple[GatewayServer, ManualClock, asyncio.Event, LoopThread, FakeUpstream],
) -> None:
    gateway, clock, gate, loop, fake = priced
    token = gateway.call(gateway.management.create_admin_token(None))
    api = httpx.Client(
        base_url=gateway.base_url + "/admin/api", headers={"authorization": f"Bearer {token}"}, timeout=30
    )
    issued = gateway.key(gateway.account("priced", 1000), "Basic", rpm=1000)

    def ask() -> str:
        async def run() -> str:
            async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
                seen = await send(client, "messages", issued.secret, "aria-haiku-4.5", max_tokens=200)
            assert seen.status == 200
            return seen.request_id

        return asyncio.run(run())

    def charged(request_id: str) -> int:
        (record,) = wait_for_record(gateway, request_id, issued.record.id)
        return record.charged_uc

    def put_price(body: dict[str, Any]) -> dict[str, Any]:
        response = api.put("/models/aria-haiku-4.5/price", json=body)
        assert response.status_code == 200, response.text
        return dict(response.json())

    with api:
        shown = api.get("/models/aria-haiku-4.5/price").json()
        catalogue = (int(shown["current"]["input"]), int(shown["current"]["output"]))
        assert shown["current"]["source"] == "catalogue" and shown["scheduled"] == []
        first = ask()
        assert charged(first) == cost(*catalogue)
        # A change now: the next request pays it.
        changed = put_price({"input": 2, "output": "10"})
        assert changed["current"]["input"] == "2" and changed["current"]["source"] == "api"
        second = ask()
        assert charged(second) == cost(2, 10)
        # A change scheduled an hour ahead: shown as scheduled, not charged yet.
        later = put_price({"input": 4, "output": 20, "effective_from": NOW + 3600})
        assert later["current"]["input"] == "2"
        assert [(s["input"], s["output"], s["effective_from"]) for s in later["scheduled"]] == [
            ("4", "20", datetime.fromtimestamp(NOW + 3600, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        ]
        third = ask()
        assert charged(third) == cost(2, 10)
        clock.advance(3600)
        wait_until(
            lambda: api.get("/models/aria-haiku-4.5/price").json()["current"]["input"] == "4",
            "the scheduled price coming into force",
        )
        fourth = ask()
        assert charged(fourth) == cost(4, 20)
        # A request admitted at 4/20 and held at its upstream while the price changes to 8/40:
        # settled at the price it was admitted at.
        result: list[str] = []
        thread = threading.Thread(target=lambda: result.append(ask()))
        thread.start()
        wait_until(lambda: fake.count >= 5, "the held request reaching its upstream")
        put_price({"input": 8, "output": 40})
        loop.loop.call_soon_threadsafe(gate.set)
        thread.join(timeout=60)
        assert charged(result[0]) == cost(4, 20)
        # Nothing before was repriced.
        by_request = {r.request_id: r.charged_uc for r in records_of(gateway, issued.record.id)}
        assert [by_request[r] for r in (first, second, third, fourth)] == [
            cost(*catalogue),
            cost(2, 10),
            cost(2, 10),
            cost(4, 20),
        ]
        assert charged(ask()) == cost(8, 40)
