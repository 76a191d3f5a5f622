"""Money under real concurrency: hundreds of requests in flight against one key's monthly cap and
one account's shared balance, through a real gateway, in every wire format, whole and streamed.
With a true upper bound reserved atomically, overshoot must be exactly zero (integer µc)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator

import httpx
import pytest

from modelgate.clock import month_of
from modelgate.storage.base import Reservation, ReserveRequest, UsageRecord
from tests.billing.helpers import Seen, error_shape_ok, records_of, send
from tests.gateway_server import GatewayServer, running_gateway
from tests.whole_store import whole_store

IN_FLIGHT = 200
#: A stream's normal end (a Responses stream clamped to few tokens ends ``incomplete``).
_TERMINAL = {
    "messages": {"message_stop"},
    "chat": {"[DONE]"},
    "responses": {"response.completed", "response.incomplete"},
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    # Dear output (100 credits per million tokens, configured like any operator price) makes each
    # request cost a few thousand µc, so 1.00 credit runs out a few hundred requests into the race.
    dear = {"price": {"output": 100}}
    with running_gateway(
        tmp_path_factory.mktemp("race") / "data",
        simulator={"reply_words": 30},
        catalogue={"models": {"aria-opus-4.8": dear, "nova-6-astra": dear}},
    ) as server:
        yield server


async def _race(
    gateway: GatewayServer, plan: list[tuple[str, str, str, bool]]
) -> list[tuple[str, bool, Seen]]:
    """Send every (format, secret, model, stream) of the plan with IN_FLIGHT requests at a time."""
    gate = asyncio.Semaphore(IN_FLIGHT)
    # Idle pooled connections are dropped well before the server's 5 s keep-alive timeout, so a
    # request never races the server closing its connection (a client-side ReadError).
    limits = httpx.Limits(
        max_connections=IN_FLIGHT, max_keepalive_connections=IN_FLIGHT, keepalive_expiry=1.0
    )
    async with httpx.AsyncClient(base_url=gateway.base_url, limits=limits, timeout=120) as client:

        async def one(fmt: str, secret: str, model: str, stream: bool) -> tuple[str, bool, Seen]:
            async with gate:
                return fmt, stream, await send(client, fmt, secret, model, max_tokens=200, stream=stream)

        return await asyncio.gather(*(one(*p) for p in plan))


def _prespend(gateway: GatewayServer, key_id: str, account_id: int, amount: int) -> None:
    """Spend part of the cap before the race, as earlier requests this month would have."""
    store, now = whole_store(gateway.services), gateway.services.clock.time()
    month = month_of(now)
    held = gateway.call(
        store.reserve(
            ReserveRequest(f"req_earlier_{key_id}", key_id, account_id, month, amount, amount, now, now + 60)
        )
    )
    assert isinstance(held, Reservation) and held.granted_uc == amount
    gateway.call(
        store.settle(
            UsageRecord(
                f"req_earlier_{key_id}",
                key_id,
                account_id,
                "messages",
                "aria-opus-4.8",
                month,
                "ok",
                now,
                now,
                charged_uc=amount,
            )
        )
    )


def _check_outcomes(
    gateway: GatewayServer, key_id: str, seen: list[tuple[str, bool, Seen]], refusal_code: str
) -> list[UsageRecord]:
    statuses = [s.status for _, _, s in seen]
    assert set(statuses) <= {200, 402}, sorted(set(statuses))
    assert statuses.count(200) > 0 and statuses.count(402) > 0
    for fmt, stream, s in seen:
        if s.status == 402:
            assert error_shape_ok(fmt, s.body, refusal_code), (fmt, s.body)
            assert s.headers["x-should-retry"] == "false"
        elif stream:  # a stream that was admitted runs to its format's normal end
            assert s.events and s.events[-1][0] in _TERMINAL[fmt], (fmt, s.events[-3:])
    # A refusal's record is written after its answer: wait for the ledger's background writes.
    gateway.call(gateway.services.settlements.drain())
    records = {r.request_id: r for r in records_of(gateway, key_id)}
    admitted = [s for _, _, s in seen if s.status == 200]
    assert {s.request_id for s in admitted} <= set(records)
    for _, stream, s in seen:
        if s.status == 200 and not stream:  # the header is what the ledger charged
            assert int(s.headers["x-modelgate-credits-charged"]) == records[s.request_id].charged_uc
        if s.status == 402:  # a refusal leaves a usage record of 0 µc saying so
            assert (records[s.request_id].status, records[s.request_id].charged_uc) == ("refused_402", 0)
    assert all(r.status in ("ok", "refused_402") for r in records.values())
    return [r for r in records.values() if r.status == "ok"]


@pytest.mark.parametrize(
    ("group", "model", "formats"),
    [("Pro", "aria-opus-4.8", ("messages", "chat")), ("Nova", "nova-6-astra", ("chat", "responses"))],
)
def test_monthly_cap_is_never_overshot_by_a_thousand_concurrent_requests(
    gateway: GatewayServer, group: str, model: str, formats: tuple[str, ...]
) -> None:
    account = gateway.account(f"cap-{group}", credits=1000)
    cap = 1_500_000
    issued = gateway.key(account, group, rpm=100_000, monthly_cap_uc=cap)
    _prespend(gateway, issued.record.id, account.id, 500_000)  # 1.00 credit left in the cap
    plan = [
        (fmt, issued.secret, model, stream)
        for fmt, stream in itertools.islice(itertools.cycle(itertools.product(formats, (False, True))), 1000)
    ]

    seen = asyncio.run(_race(gateway, plan))

    records = _check_outcomes(gateway, issued.record.id, seen, "monthly_cap_reached")
    store = whole_store(gateway.services)
    spent, held = gateway.call(store.month_spend(issued.record.id, month_of(gateway.services.clock.time())))
    assert held == 0 and gateway.call(store.pending_reservations()) == 0
    assert spent <= cap
    assert spent == sum(r.charged_uc for r in records)
    # The account paid exactly what the key spent; nothing else moved.
    after = gateway.call(store.get_account(account.id))
    assert after is not None and after.reserved_uc == 0
    assert after.balance_uc == gateway.call(store.topups_total(account.id)) - spent
    print(f"\n{group}: spent {spent} of cap {cap} µc; {sum(s.status == 402 for *_, s in seen)} refusals")


def test_keys_of_one_account_share_its_balance_without_overdraft(gateway: GatewayServer) -> None:
    account = gateway.account("shared", credits=2)
    secrets = [gateway.key(account, "Pro", rpm=100_000).secret for _ in range(5)]
    plan = [
        (fmt, secret, "aria-opus-4.8", stream)
        for (fmt, stream), secret in zip(
            itertools.islice(itertools.cycle(itertools.product(("messages", "chat"), (False, True))), 700),
            itertools.cycle(secrets),
            strict=False,
        )
    ]

    seen = asyncio.run(_race(gateway, plan))

    statuses = [s.status for *_, s in seen]
    assert set(statuses) == {200, 402}
    for fmt, _, s in seen:
        if s.status == 402:
            assert error_shape_ok(fmt, s.body, "insufficient_balance"), s.body
    store = whole_store(gateway.services)
    gateway.call(gateway.services.settlements.drain())  # the refusals' records, written after them
    after = gateway.call(store.get_account(account.id))
    assert after is not None and after.reserved_uc == 0
    summary = gateway.call(
        store.usage_summary(month_of(gateway.services.clock.time()), account_id=account.id)
    )
    assert summary.requests == len(statuses)  # refusals included, at 0 µc
    assert after.balance_uc >= 0
    assert after.balance_uc == gateway.call(store.topups_total(account.id)) - summary.charged_uc
    print(f"\nshared balance: charged {summary.charged_uc} of 2000000 µc; left {after.balance_uc}")
