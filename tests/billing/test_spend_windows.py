"""Spend caps per window through a real gateway: the refusal of each window in every wire format
(Gemini included) with its code and ``x-modelgate-limit``, the ``max_tokens`` clamp by the
tightest window, ``GET /v1/key``'s windows, and many concurrent requests (half streaming) against
small key and account caps: no window's spend ever exceeds its cap and the ledger balances."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from modelgate.billing.pricing import bound_uc, input_tokens_bound
from modelgate.management import IssuedKey
from modelgate.storage.base import AccountCaps
from modelgate.storage.spend_windows import Window, account_subject, key_subject
from tests.billing.helpers import body_for, error_shape_ok, headers_for, records_of, send
from tests.gateway_server import GatewayServer, running_gateway
from tests.whole_store import whole_store

IN_FLIGHT = 100
CODES = {"cap_5h": "cap_5h_reached", "cap_day": "cap_day_reached", "cap_week": "cap_week_reached"}
LIMITS = {"cap_5h_reached": "cap-5h", "cap_day_reached": "cap-day", "cap_week_reached": "cap-week"}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    # Dear output makes each request cost a few thousand µc, so small caps run out mid-race.
    dear = {"price": {"output": 100}}
    with running_gateway(
        tmp_path_factory.mktemp("windows") / "data",
        simulator={"reply_words": 30},
        catalogue={"models": {"aria-opus-4.8": dear}},
    ) as server:
        yield server


def _gemini(gateway: GatewayServer, secret: str, max_tokens: int = 64) -> httpx.Response:
    body: dict[str, Any] = {"contents": [{"role": "user", "parts": [{"text": "Hello there gateway"}]}]}
    body["generationConfig"] = {"maxOutputTokens": max_tokens}
    return httpx.post(
        f"{gateway.base_url}/v1beta/models/aria-opus-4.8:generateContent",
        json=body,
        headers={"x-goog-api-key": secret},
        timeout=30,
    )


def _post(gateway: GatewayServer, fmt: str, secret: str, max_tokens: int = 64) -> httpx.Response:
    if fmt == "gemini":
        return _gemini(gateway, secret, max_tokens)
    path = "/v1/messages" if fmt == "messages" else "/v1/chat/completions"
    return httpx.post(
        f"{gateway.base_url}{path}",
        json=body_for(fmt, "aria-opus-4.8", "Hello there gateway", max_tokens),
        headers=headers_for(fmt, secret),
        timeout=30,
    )


def _refusal_code(fmt: str, response: httpx.Response) -> str:
    error = response.json()["error"]
    if fmt == "messages":
        assert error["type"] == "billing_error"
        return str(error["details"]["error_code"])
    if fmt == "gemini":
        assert (error["code"], error["status"]) == (402, "FAILED_PRECONDITION")
        [info] = [d for d in error["details"] if d["@type"].endswith("ErrorInfo")]
        return str(info["metadata"]["error_code"])
    assert error["type"] == "insufficient_quota"
    return str(error["code"])


@pytest.mark.parametrize("fmt", ["messages", "chat", "gemini"])
@pytest.mark.parametrize("window", ["cap_5h", "cap_day", "cap_week"])
def test_each_window_refuses_with_its_code_and_header_in_every_format(
    gateway: GatewayServer, fmt: str, window: str
) -> None:
    account = gateway.account(f"refused-{window}-{fmt}")
    if window == "cap_week":  # an account's cap binds its keys
        gateway.call(gateway.services.accounts.set_account_caps(account.id, AccountCaps(cap_week_uc=300)))
        issued = gateway.key(account, "Pro")
    else:
        issued = gateway.key(account, "Pro", caps={window.removeprefix("cap_"): 300})
    refused = _post(gateway, fmt, issued.secret)
    assert refused.status_code == 402, refused.text
    assert refused.headers["x-modelgate-limit"] == LIMITS[CODES[window]]
    assert refused.headers["x-should-retry"] == "false"
    assert _refusal_code(fmt, refused) == CODES[window]
    assert "300 µc" in refused.json()["error"]["message"]
    gateway.call(gateway.services.settlements.drain())
    [record] = records_of(gateway, issued.record.id)
    assert (record.status, record.charged_uc) == ("refused_402", 0)


def test_max_tokens_is_clamped_by_the_tightest_window(gateway: GatewayServer) -> None:
    price = gateway.services.catalogue.models["aria-opus-4.8"].price
    raw = orjson.dumps(body_for("messages", "aria-opus-4.8", "Hello there gateway", 4000))
    bound = input_tokens_bound(len(raw), 0, 128, 1600)
    day_cap = bound_uc(bound, 25, price)  # room for the input and 25 output tokens today
    account = gateway.account("clamped")
    issued = gateway.key(
        account, "Pro", monthly_cap_uc=10 * day_cap, caps={"day": day_cap, "week": 5 * day_cap}
    )
    response = httpx.post(
        f"{gateway.base_url}/v1/messages",
        content=raw,
        headers={**headers_for("messages", issued.secret), "content-type": "application/json"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    assert response.headers["x-modelgate-max-tokens-clamped"] == "4000->25; reason=credits"
    assert response.json()["usage"]["output_tokens"] <= 25


def test_get_v1_key_shows_every_window(gateway: GatewayServer) -> None:
    account = gateway.account("shown")
    gateway.call(gateway.services.accounts.set_account_caps(account.id, AccountCaps(cap_day_uc=50_000_000)))
    issued = gateway.key(
        account, "Pro", monthly_cap_uc=90_000_000, caps={"5h": 20_000_000, "week": 70_000_000}
    )
    assert _post(gateway, "chat", issued.secret).status_code == 200
    gateway.call(gateway.services.settlements.drain())
    [record] = records_of(gateway, issued.record.id)
    shown = httpx.get(
        f"{gateway.base_url}/v1/key", headers={"authorization": f"Bearer {issued.secret}"}
    ).json()
    caps = shown["caps"]
    assert list(caps) == ["5h", "day", "week", "month"]
    assert (caps["5h"]["limit_uc"], caps["5h"]["spent_uc"], caps["5h"]["held_uc"]) == (
        20_000_000,
        record.charged_uc,
        0,
    )
    assert caps["5h"]["remaining_uc"] == 20_000_000 - record.charged_uc and caps["5h"]["resets_at"]
    assert caps["day"]["limit_uc"] is None and caps["day"]["spent_uc"] is None  # no key cap: not counted
    assert caps["week"]["spent_uc"] == record.charged_uc and caps["week"]["resets_at"].endswith("T00:00:00Z")
    assert caps["month"]["limit_uc"] == 90_000_000 and caps["month"]["spent_uc"] == record.charged_uc
    assert list(shown["account_caps"]) == ["day"]
    assert shown["account_caps"]["day"]["spent_uc"] == record.charged_uc


async def _race(gateway: GatewayServer, plan: list[tuple[str, str, bool]]) -> list[tuple[str, bool, Any]]:
    gate = asyncio.Semaphore(IN_FLIGHT)
    limits = httpx.Limits(
        max_connections=IN_FLIGHT, max_keepalive_connections=IN_FLIGHT, keepalive_expiry=1.0
    )
    async with httpx.AsyncClient(base_url=gateway.base_url, limits=limits, timeout=120) as client:

        async def one(fmt: str, secret: str, stream: bool) -> tuple[str, bool, Any]:
            async with gate:
                return (
                    fmt,
                    stream,
                    await send(client, fmt, secret, "aria-opus-4.8", max_tokens=200, stream=stream),
                )

        return await asyncio.gather(*(one(*p) for p in plan))


def test_concurrent_requests_never_exceed_any_window(gateway: GatewayServer) -> None:
    account = gateway.account("race", credits=1000)
    store = whole_store(gateway.services)
    gateway.call(store.set_account_caps(account.id, AccountCaps(cap_week_uc=400_000)))
    five_hours = gateway.key(account, "Pro", rpm=100_000, caps={"5h": 150_000})
    daily = gateway.key(account, "Pro", rpm=100_000, caps={"day": 200_000})
    shapes = itertools.product(("messages", "chat"), (False, True), (five_hours, daily))
    plan = [(fmt, key.secret, stream) for fmt, stream, key in itertools.islice(itertools.cycle(shapes), 400)]
    seen = asyncio.run(_race(gateway, plan))

    statuses = [s.status for _, _, s in seen]
    assert set(statuses) <= {200, 402} and statuses.count(200) > 0 and statuses.count(402) > 0
    for fmt, stream, s in seen:
        if s.status == 402:
            code = s.body["error"]["details"]["error_code"] if fmt == "messages" else s.body["error"]["code"]
            assert code in LIMITS and error_shape_ok(fmt, s.body, code)
            assert s.headers["x-modelgate-limit"] == LIMITS[code]
        elif stream:
            assert s.events, fmt
    gateway.call(gateway.services.settlements.drain())
    now = gateway.services.clock.time()
    charged = {}
    windows: tuple[tuple[IssuedKey, Window, int], ...] = (
        (five_hours, "5h", 150_000),
        (daily, "day", 200_000),
    )
    for key, window, cap in windows:
        records = [r for r in records_of(gateway, key.record.id) if r.status == "ok"]
        charged[key.record.id] = sum(r.charged_uc for r in records)
        use = gateway.call(store.window_use(key_subject(key.record.id), window, now))
        assert use.held_uc == 0 and use.spent_uc == charged[key.record.id] <= cap
    week = gateway.call(store.window_use(account_subject(account.id), "week", now))
    assert week.held_uc == 0 and week.spent_uc == sum(charged.values()) <= 400_000
    assert gateway.call(store.pending_reservations()) == 0
    after = gateway.call(store.get_account(account.id))
    assert after is not None and after.reserved_uc == 0
    assert after.balance_uc == 1000 * 1_000_000 - sum(charged.values())
