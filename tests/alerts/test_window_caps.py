"""``cap.threshold`` for the spend windows beside a key's month, against two real instances on one
database and a real receiver: a key's day cap and an account's week cap each alert at 80 % and
100 % exactly once per window period, under concurrent requests; the account's alert names the
account, the refused one says so."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import httpx

from modelgate.storage.base import AccountCaps
from modelgate.storage.spend_windows import account_subject, key_subject
from tests.alerts.test_webhooks import (
    BODY,
    LONG_REPLIES,
    _alerts,
    _burst,
    _cost_of_one,
    _settled,
    pair,
    receiver,
)
from tests.fakes.webhook_receiver import Receiver
from tests.gateway_server import GatewayServer, running_gateway
from tests.polling import wait_until

__all__ = ["pair", "receiver"]  # the fixtures, shared


def test_key_and_account_windows_alert_once_per_level_and_period(
    pair: tuple[GatewayServer, GatewayServer], receiver: Receiver
) -> None:
    first, second = pair
    account = first.account("windows", 10_000)
    cost = _cost_of_one(first, account)
    key = first.key(account, "Basic", name="daily", rpm=100_000, caps={"day": cost * 30})
    first.call(first.services.accounts.set_account_caps(account.id, AccountCaps(cap_week_uc=cost * 60)))
    second.refresh_keys()
    wait_until(
        lambda: all(account.id in g.services.alerts.account_caps for g in pair),  # type: ignore[union-attr]
        "both instances' scans saw the account's cap",
    )
    now = first.services.clock.time()
    for _ in range(20):
        statuses = _burst(pair, key.secret, 200)
        assert set(statuses) <= {200, 402}
        use = first.call(first.services.ledger_store.window_use(key_subject(key.record.id), "day", now))
        if 402 in statuses and use.spent_uc * 100 >= cost * 30 * 80:
            break
    wait_until(lambda: len(receiver.events("cap.threshold")) >= 2, "the key's day levels delivered")
    wait_until(lambda: _settled(pair), "alert checks and deliveries ended")
    alerts = receiver.events("cap.threshold")
    daily = [a for a in alerts if a["subject"] == f"key:{key.record.id}"]
    assert sorted(a["level"] for a in daily) == [80, 100]
    assert all(a["window"] == "day" and a["scope"] == "key" and a["limit_uc"] == cost * 30 for a in daily)
    # The account's week: a second key spends on until the week's cap refuses it.
    other = first.key(account, "Basic", name="weekly", rpm=100_000)
    second.refresh_keys()
    for _ in range(20):
        statuses = _burst(pair, other.secret, 200)
        week = first.call(first.services.ledger_store.window_use(account_subject(account.id), "week", now))
        if 402 in statuses and week.spent_uc * 100 >= cost * 60 * 80:
            break
    wait_until(
        lambda: (
            len([a for a in receiver.events("cap.threshold") if a["subject"] == f"account:{account.id}"]) >= 2
        ),
        "the account's week levels delivered",
    )
    wait_until(lambda: _settled(pair), "alert checks and deliveries ended")
    weekly = [a for a in receiver.events("cap.threshold") if a["subject"] == f"account:{account.id}"]
    assert sorted(a["level"] for a in weekly) == [80, 100]
    assert all(a["window"] == "week" and a["scope"] == "account" for a in weekly)
    year, week_number, _ = datetime.fromtimestamp(now, UTC).isocalendar()
    assert {a["period"] for a in weekly} == {f"{year}-W{week_number:02d}"}
    # More traffic in the same periods: nothing new.
    count = len(receiver.events("cap.threshold"))
    _burst(pair, key.secret, 20)
    wait_until(lambda: _settled(pair), "alert checks and deliveries ended")
    assert len(receiver.events("cap.threshold")) == count


def test_a_refusal_while_a_settles_check_waits_still_alerts_its_100_level(
    tmp_path: Path, receiver: Receiver
) -> None:
    """Checks of a subject are spaced (``recheck_seconds``): settles' checks after the first wait
    for the next slot, and one asked while one waits is dropped. A hold refused by the day's cap
    in that time must still alert 100 % (``refused``: true) though the spend is at 80 %."""
    alerts = _alerts(receiver, recheck_seconds=3)
    with running_gateway(tmp_path / "data", alerts=alerts, simulator=LONG_REPLIES) as gateway:
        account = gateway.account("spaced", 10_000)
        cost = _cost_of_one(gateway, account)
        key = gateway.key(account, "Basic", name="spaced", rpm=100_000, caps={"day": cost * 10})
        headers = {"authorization": f"Bearer {key.secret}"}
        with httpx.Client(base_url=gateway.base_url, headers=headers, timeout=30) as client:
            for _ in range(8):  # the first settle's check runs at once, the next one waits
                assert client.post("/v1/chat/completions", json=BODY).status_code == 200
            # With 2 requests' worth left, an input whose bound alone does not fit: no smaller
            # max_tokens helps, so the day's cap refuses the hold.
            large = [{"role": "user", "content": "word " * 40_000}]
            refused = client.post("/v1/chat/completions", json={**BODY, "messages": large})
            assert refused.status_code == 402, refused.text
        wait_until(lambda: len(receiver.events("cap.threshold")) >= 2, "both day levels delivered")
        wait_until(lambda: _settled((gateway,)), "alert checks and deliveries ended")
        levels = {a["level"]: a for a in receiver.events("cap.threshold")}
        assert sorted(levels) == [80, 100]
        assert levels[80]["refused"] is False and levels[100]["refused"] is True
        assert levels[100]["window"] == "day" and levels[100]["spent_uc"] == cost * 8
