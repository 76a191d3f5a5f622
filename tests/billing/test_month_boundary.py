"""The monthly cap follows the UTC calendar month, whatever the process time zone, with the
gateway's clock injected: refused at 23:59:59.9 UTC on the last day, admitted at 00:00:00.1 UTC
on the 1st, for months of 28, 29, 30 and 31 days. A request that spans midnight counts in the
month it was reserved in."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from modelgate.clock import month_of
from modelgate.storage.base import Reservation, ReserveRequest, UsageRecord
from tests.billing.helpers import body_for, headers_for
from tests.gateway_server import GatewayServer, ManualClock, running_gateway
from tests.polling import wait_until
from tests.whole_store import whole_store

CAP = 50_000


@pytest.fixture
def far_from_utc() -> Iterator[None]:
    """Run with a process time zone 14 hours ahead of UTC (its 'month' flips 14 h early)."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Pacific/Kiritimati"
    time.tzset()
    assert time.localtime(datetime(2026, 1, 31, 12, tzinfo=UTC).timestamp()).tm_mon == 2
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()


def _fill_cap(gateway: GatewayServer, key_id: str, account_id: int, now: float, tag: str) -> None:
    """Spend what is left of the key's cap this month, as earlier requests would have."""
    store, month = whole_store(gateway.services), month_of(now)
    amount = CAP - gateway.call(store.month_spend(key_id, month))[0]
    rid = f"req_fill_{tag}"
    held = gateway.call(
        store.reserve(ReserveRequest(rid, key_id, account_id, month, amount, amount, now, now + 60))
    )
    assert isinstance(held, Reservation)
    record = UsageRecord(
        rid, key_id, account_id, "messages", "aria-haiku-4.5", month, "ok", now, now, charged_uc=amount
    )
    assert gateway.call(store.settle(record)).applied


def _ask(gateway: GatewayServer, secret: str) -> httpx.Response:
    return httpx.post(
        f"{gateway.base_url}/v1/messages",
        json=body_for("messages", "aria-haiku-4.5", "Hello there gateway", 5),
        headers=headers_for("messages", secret),
    )


# (year, month, days): a 31-day January, a 28-day February, a 30-day April, a 29-day February.
MONTHS = [(2026, 1, 31), (2026, 2, 28), (2026, 4, 30), (2028, 2, 29)]


def test_cap_resets_at_midnight_utc_of_the_first_for_every_month_length(
    tmp_path: Path, far_from_utc: None
) -> None:
    clock = ManualClock(datetime(2026, 1, 10, tzinfo=UTC).timestamp())
    with running_gateway(tmp_path / "data", clock=clock) as gateway:
        account = gateway.account("acme", credits=100)
        issued = gateway.key(account, "Basic", monthly_cap_uc=CAP, rpm=10_000)
        key_id, secret = issued.record.id, issued.secret
        for year, month, days in MONTHS:
            last_day = datetime(year, month, days, 23, 59, 59, tzinfo=UTC).timestamp()
            next_first = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC).timestamp()
            assert next_first - last_day == 1.0  # `days` really is the month's last day
            clock.set(last_day - 3600)
            _fill_cap(gateway, key_id, account.id, clock.time(), f"{year}{month}")
            assert gateway.call(
                gateway.services.ledger_store.month_spend(key_id, month_of(clock.time()))
            ) == (
                CAP,
                0,
            )

            clock.set(last_day + 0.9)  # 23:59:59.9 UTC on the last day
            refused = _ask(gateway, secret)
            assert refused.status_code == 402, (year, month, refused.text)
            assert refused.json()["error"]["details"] == {"error_code": "monthly_cap_reached"}

            clock.set(next_first + 0.1)  # 00:00:00.1 UTC on the 1st
            admitted = _ask(gateway, secret)
            assert admitted.status_code == 200, (year, month, admitted.text)
            charged = int(admitted.headers["x-modelgate-credits-charged"])
            assert int(admitted.headers["x-modelgate-cap-remaining"]) == CAP - charged
            new_month = month_of(next_first + 0.1)
            assert gateway.call(gateway.services.ledger_store.month_spend(key_id, new_month)) == (charged, 0)


def test_a_request_spanning_midnight_counts_in_the_month_it_started(
    tmp_path: Path, far_from_utc: None
) -> None:
    last_moment = datetime(2026, 4, 30, 23, 59, 59, 500_000, tzinfo=UTC).timestamp()
    clock = ManualClock(last_moment)
    with running_gateway(tmp_path / "data", clock=clock, simulator={"tokens_per_second": 200}) as gateway:
        account = gateway.account("acme", credits=100)
        issued = gateway.key(account, "Basic", monthly_cap_uc=CAP, rpm=10_000)
        body = body_for("messages", "aria-haiku-4.5", "Hello there gateway", 50, stream=True)
        with httpx.stream(
            "POST",
            f"{gateway.base_url}/v1/messages",
            json=body,
            headers=headers_for("messages", issued.secret),
        ) as response:
            lines = response.iter_lines()
            assert next(lines).startswith("event: message_start")  # reserved in April
            clock.set(datetime(2026, 5, 1, 0, 0, 1, tzinfo=UTC).timestamp())  # now it is May
            rest = list(lines)
        assert any("message_stop" in line for line in rest)
        store = whole_store(gateway.services)
        april = wait_until(
            lambda: gateway.call(store.usage_records("2026-04", key_id=issued.record.id)),
            "the stream's settlement",
        )
        assert [r.request_id for r in april] == [response.headers["request-id"]]
        assert gateway.call(store.usage_records("2026-05", key_id=issued.record.id)) == []
        spent, held = gateway.call(gateway.services.ledger_store.month_spend(issued.record.id, "2026-04"))
        assert spent == april[0].charged_uc > 0 and held == 0
        assert gateway.call(gateway.services.ledger_store.month_spend(issued.record.id, "2026-05")) == (0, 0)
