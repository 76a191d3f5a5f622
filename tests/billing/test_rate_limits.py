"""Per-key requests per minute over an exact rolling 60 s window, its headers, and the protective
in-flight limiter, through a real gateway (time injected where the window is measured)."""

from __future__ import annotations

import asyncio
import random
import threading
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from modelgate.limits.rpm import RollingWindowLimiter
from tests.billing.helpers import Seen, body_for, headers_for, records_of, send
from tests.gateway_server import ManualClock, running_gateway
from tests.polling import wait_until

START = datetime(2026, 3, 10, 12, tzinfo=UTC).timestamp()


def _rate_headers_ok(headers: httpx.Headers, limit: int) -> bool:
    policy = headers.get("ratelimit-policy")
    state = headers.get("ratelimit")
    return policy == f"rpm;q={limit};w=60" and state is not None and state.startswith("rpm;r=")


def test_sixty_per_minute_under_tenfold_load_for_three_simulated_minutes(tmp_path: Path) -> None:
    clock = ManualClock(START)
    with running_gateway(tmp_path / "data", clock=clock) as gateway:
        account = gateway.account("acme", credits=100)
        issued = gateway.key(account, "Basic", rpm=60)
        before = gateway.call(gateway.services.accounts.get_account(account.id))
        admitted: list[float] = []
        refused: list[tuple[float, Seen]] = []

        async def offer_load() -> None:
            async with httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as client:
                for tick in range(360):  # 5 requests every 0.5 s = 600 per minute, 10x the limit
                    now = START + tick * 0.5
                    clock.set(now)
                    fmts = ("messages", "chat", "messages", "chat", "chat")
                    batch = await asyncio.gather(
                        *(send(client, f, issued.secret, "aria-haiku-4.5", max_tokens=5) for f in fmts)
                    )
                    for seen in batch:
                        assert _rate_headers_ok(seen.headers, 60), seen.headers
                        if seen.status == 200:
                            admitted.append(now)
                        else:
                            assert seen.status == 429, seen.body
                            refused.append((now, seen))

        asyncio.run(offer_load())

        # No rolling 60 s window ever admitted more than 60; and the limit was used in full.
        for t in admitted:
            assert sum(1 for a in admitted if t - 60 < a <= t) <= 60
        assert len(admitted) == 180
        # Every retry-after is a whole number of seconds after which the window has room.
        for t, seen in refused:
            retry_after = seen.headers["retry-after"]
            assert retry_after.isdigit() and int(retry_after) >= 1
            later = t + int(retry_after)
            assert sum(1 for a in admitted if later - 60 < a <= t) < 60
        messages_refusal = next(s for _, s in refused if "type" in s.body)
        assert messages_refusal.body["error"]["type"] == "rate_limit_error"
        chat_refusal = next(s for _, s in refused if "type" not in s.body)
        assert chat_refusal.body["error"]["code"] == "rate_limit_exceeded"
        # Refused requests consumed no credits: admitted ones left usage records and charges,
        # refused ones a record of 0 µc saying so (refused_429).
        gateway.call(gateway.services.settlements.drain())  # refusals are recorded after their answer
        every = records_of(gateway, issued.record.id)
        records = [r for r in every if r.status == "ok"]
        assert len(records) == 180
        refusals = [r for r in every if r.status != "ok"]
        assert {r.status for r in refusals} == {"refused_429"} and len(refusals) == len(refused)
        assert sum(r.charged_uc for r in refusals) == 0
        after = gateway.call(gateway.services.accounts.get_account(account.id))
        assert before is not None and after is not None
        assert before.balance_uc - after.balance_uc == sum(r.charged_uc for r in records)


def test_a_client_sleeping_exactly_retry_after_is_admitted(tmp_path: Path) -> None:
    clock = ManualClock(START)
    rng = random.Random(7)
    with running_gateway(tmp_path / "data", clock=clock) as gateway:
        issued = gateway.key(gateway.account("acme"), "Basic", rpm=10)
        url, body = f"{gateway.base_url}/v1/messages", body_for("messages", "haiku", "hi", 5)
        headers = headers_for("messages", issued.secret)
        now = START
        for _ in range(6):  # a few rounds at irregular times
            while True:
                now += rng.uniform(0.05, 9.0)
                clock.set(now)
                response = httpx.post(url, json=body, headers=headers)
                if response.status_code == 429:
                    break
                assert response.status_code == 200
            wait = int(response.headers["retry-after"])
            if wait > 1:  # one second less is not enough (and costs no unit: refused again)
                clock.set(now + wait - 1)
                assert httpx.post(url, json=body, headers=headers).status_code == 429
            now += wait
            clock.set(now)
            assert httpx.post(url, json=body, headers=headers).status_code == 200


@given(st.lists(st.floats(0, 300), min_size=1, max_size=200), st.integers(1, 20))
def test_rolling_window_limiter_is_exact(times: list[float], limit: int) -> None:
    limiter = RollingWindowLimiter()
    admitted: list[float] = []
    for now in sorted(times):
        decision = limiter.admit_now("k", limit, now)
        window = [a for a in admitted if now - 60 < a <= now]
        assert decision.admitted == (len(window) < limit)
        if decision.admitted:
            admitted.append(now)
            assert decision.remaining == limit - len(window) - 1
        else:
            later = now + decision.retry_after
            assert sum(1 for a in admitted if later - 60 < a) < limit


def test_rate_limit_headers_are_on_success_and_on_402_and_429(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "data") as gateway:
        account = gateway.account("acme", credits=100)
        issued = gateway.key(account, "Pro", rpm=4)
        capped = gateway.key(account, "Pro", rpm=4, monthly_cap_uc=1)

        async def run() -> list[Seen]:
            async with httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as client:
                return [
                    await send(client, "messages", issued.secret, "haiku"),
                    await send(client, "chat", issued.secret, "haiku", stream=True),
                    await send(client, "messages", capped.secret, "haiku"),  # 402: cap of 1 µc
                    await send(client, "chat", capped.secret, "haiku"),  # 402 again
                    await send(client, "messages", issued.secret, "haiku"),
                    await send(client, "messages", issued.secret, "haiku"),
                    await send(client, "chat", issued.secret, "haiku"),  # the 5th in a minute: 429
                ]

        seen = asyncio.run(run())
        assert [s.status for s in seen] == [200, 200, 402, 402, 200, 200, 429]
        for s in seen:
            assert _rate_headers_ok(s.headers, 4), (s.status, s.headers)
        assert seen[0].headers["ratelimit"].startswith("rpm;r=3;")
        # Refused for money, the capped key's two requests gave their units back.
        assert seen[2].headers["ratelimit"].startswith("rpm;r=4;")
        assert seen[3].headers["ratelimit"].startswith("rpm;r=4;")
        assert seen[6].headers["ratelimit"].startswith("rpm;r=0;")
        assert seen[2].headers["x-should-retry"] == "false"
        assert int(seen[6].headers["retry-after"]) in range(1, 61)


def test_protective_limiter_answers_429_at_once_without_queueing(tmp_path: Path) -> None:
    with running_gateway(
        tmp_path / "data", server={"max_in_flight": 3}, simulator={"latency_ms": 3000}
    ) as gateway:
        issued = gateway.key(gateway.account("acme"), "Basic", rpm=1000)
        url, body = f"{gateway.base_url}/v1/messages", body_for("messages", "haiku", "hi", 5)
        headers = headers_for("messages", issued.secret)
        slow: list[int] = []
        threads = [
            threading.Thread(
                target=lambda: slow.append(
                    httpx.post(url, json=body, headers=headers, timeout=10).status_code
                )
            )
            for _ in range(3)
        ]
        for thread in threads:
            thread.start()
        wait_until(lambda: gateway.services.inflight.in_flight == 3, "three slow requests in flight")
        refused = httpx.post(url, json=body, headers=headers)
        # Answered while the three slow requests were still in flight, so not queued behind them.
        assert slow == [] and gateway.services.inflight.in_flight == 3
        assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["type"] == "rate_limit_error"
        for thread in threads:
            thread.join()
        assert slow == [200, 200, 200]
        # The refusal cost nothing: three usage records, and the key's RPM window holds three.
        assert len(records_of(gateway, issued.record.id)) == 3
        assert httpx.post(url, json=body, headers=headers).headers["ratelimit"].startswith("rpm;r=996;")


@pytest.mark.parametrize("grace", [0.0, 30.0])
def test_rate_limit_state_carries_over_a_rotation(tmp_path: Path, grace: float) -> None:
    with running_gateway(tmp_path / "data") as gateway:
        issued = gateway.key(gateway.account("acme"), "Basic", rpm=3)
        url, body = f"{gateway.base_url}/v1/messages", body_for("messages", "haiku", "hi", 5)
        for _ in range(3):
            assert (
                httpx.post(url, json=body, headers=headers_for("messages", issued.secret)).status_code == 200
            )
        rotated = gateway.call(gateway.management.rotate_key(issued.record, grace))
        gateway.refresh_keys()
        assert rotated.record.id == issued.record.id
        again = httpx.post(url, json=body, headers=headers_for("messages", rotated.secret))
        assert again.status_code == 429  # a new secret is not a new window
