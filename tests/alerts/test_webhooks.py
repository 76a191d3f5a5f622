"""Alert webhooks against the real server and a real HTTP receiver on loopback: one delivery per
crossing under 500 concurrent requests (across two instances sharing a database), signed
bodies, retries after 500s, and revocations."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from modelgate.storage.base import Account
from tests.fakes.webhook_receiver import Receiver, webhook_receiver
from tests.gateway_server import GatewayServer, make_settings
from tests.polling import wait_until
from tests.secret_scan import SCANNER
from tests.whole_store import whole_store

SECRET = "whsec-" + "k" * 32
SCANNER.register(SECRET)  # never in a log line or on the metrics page
BODY = {
    "model": "aria-haiku-4.5",
    "messages": [{"role": "user", "content": "Hello alerts"}],
    # Replies fill max_tokens (the pair's simulator says 400 words), so a request's worst-case hold
    # is close to what it costs: a cap of 40 requests admits about 40 in one burst.
    "max_tokens": 256,
}


LONG_REPLIES = {"reply_words": 400}
CONCURRENT = 500


def _alerts(receiver: Receiver, **extra: Any) -> dict[str, Any]:
    return {
        "webhooks": [{"url": receiver.url, "secret": SECRET}],
        "recheck_seconds": 0.05,
        "backoff_seconds": 0.05,
        "scan_interval_seconds": 0.1,
        **extra,
    }


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with webhook_receiver() as hooks:
        yield hooks


@pytest.fixture
def pair(tmp_path: Path, receiver: Receiver) -> Iterator[tuple[GatewayServer, GatewayServer]]:
    """Two instances on one database file: each sees crossings, the database sends each once."""
    data = tmp_path / "data"
    first = GatewayServer(make_settings(data, alerts=_alerts(receiver), simulator=LONG_REPLIES)).start()
    try:
        second = GatewayServer(make_settings(data, alerts=_alerts(receiver), simulator=LONG_REPLIES)).start()
        try:
            yield first, second
        finally:
            second.stop()
    finally:
        first.stop()


def _burst(gateways: tuple[GatewayServer, ...], secret: str, count: int) -> list[int]:
    """``count`` requests at once, one connection each, spread over ``gateways``; their statuses.
    aiohttp as the load generator: on this loop it sends a burst of 500 about ten times faster
    than httpx's pool, so the gateways, not the test's client, are what the time is spent on."""

    async def run() -> list[int]:
        timeout = aiohttp.ClientTimeout(total=120)
        sessions = [
            aiohttp.ClientSession(g.base_url, connector=aiohttp.TCPConnector(limit=count), timeout=timeout)
            for g in gateways
        ]

        async def one(session: aiohttp.ClientSession) -> int:
            headers = {"authorization": f"Bearer {secret}"}
            async with session.post("/v1/chat/completions", headers=headers, json=BODY) as answer:
                await answer.read()
                return answer.status

        try:
            return list(await asyncio.gather(*(one(sessions[i % len(sessions)]) for i in range(count))))
        finally:
            for session in sessions:
                await session.close()

    return asyncio.run(run())


def _settled(gateways: tuple[GatewayServer, ...]) -> bool:
    """Every instance's checks ran and every delivery ended (nothing more can arrive)."""
    for g in gateways:
        monitor = g.services.alerts
        assert monitor is not None
        if not monitor.checks.idle or monitor.deliverer.pending:
            return False
    return True


def _cost_of_one(gateway: GatewayServer, account: Account) -> int:
    probe = gateway.key(account, "Basic", name="probe", rpm=100_000)
    assert _burst((gateway,), probe.secret, 1) == [200]
    spent, _ = gateway.call(gateway.services.ledger_store.month_spend(probe.record.id, _month(gateway)))
    assert spent > 0
    return spent


def _month(gateway: GatewayServer) -> str:
    from modelgate.clock import month_of

    return month_of(gateway.services.clock.time())


def _verify(receiver: Receiver) -> None:
    for hit in receiver.received:
        expected = "sha256=" + hmac.new(SECRET.encode(), hit.body, hashlib.sha256).hexdigest()
        assert hit.headers["x-modelgate-signature"] == expected
        assert hit.headers["content-type"] == "application/json"


def test_cap_levels_alert_exactly_once_under_500_concurrent_requests_on_two_instances(
    pair: tuple[GatewayServer, GatewayServer], receiver: Receiver
) -> None:
    first, second = pair
    account = first.account("capped", 10_000)
    cost = _cost_of_one(first, account)
    key = first.key(account, "Basic", name="capped", rpm=100_000, monthly_cap_uc=cost * 40)
    second.refresh_keys()
    cap = cost * 40
    # 500 requests at once across both instances: the cap admits about 40 of them, so the 80 %
    # and 100 % levels are both crossed within the burst, by settles and refusals racing on two
    # instances. (Holds are worst cases: should a burst stop short of 80 % settled, another
    # follows; the alerts must still come once each.)
    for _ in range(5):
        statuses = _burst(pair, key.secret, CONCURRENT)
        assert 402 in statuses and set(statuses) <= {200, 402}
        spent, _held = first.call(first.services.ledger_store.month_spend(key.record.id, _month(first)))
        if spent * 100 >= cap * 80:
            break
    assert spent * 100 >= cap * 80 and spent <= cap, (spent, cap)
    wait_until(lambda: len(receiver.events("cap.threshold")) >= 2, "both cap levels delivered")
    wait_until(lambda: _settled(pair), "alert checks and deliveries ended")
    alerts = receiver.events("cap.threshold")
    assert sorted(a["level"] for a in alerts) == [80, 100]
    for alert in alerts:
        assert alert["subject"] == f"key:{key.record.id}"
        assert alert["window"] == "month" and alert["period"] == _month(first)
        assert alert["limit_uc"] == cost * 40
    (eighty,) = [a for a in alerts if a["level"] == 80]
    assert eighty["spent_uc"] * 100 >= eighty["limit_uc"] * 80 and eighty["refused"] is False
    _verify(receiver)
    # More traffic in the same month and level: nothing new.
    _burst(pair, key.secret, 20)
    wait_until(lambda: _settled(pair), "alert checks and deliveries ended")
    assert len(receiver.events("cap.threshold")) == 2


def _spend_below(
    pair: tuple[GatewayServer, GatewayServer], secret: str, account_id: int, threshold: int
) -> None:
    """Bursts of 300 concurrent requests until the settled balance is below ``threshold``."""
    store = whole_store(pair[0].services)
    for _ in range(20):
        statuses = _burst(pair, secret, 300)
        assert 200 in statuses and set(statuses) <= {200, 402}
        account = pair[0].call(store.get_account(account_id))
        assert account is not None
        if account.balance_uc < threshold:
            return
    raise AssertionError("the balance never went below the threshold")


def test_balance_low_once_per_crossing_and_again_after_a_top_up(
    pair: tuple[GatewayServer, GatewayServer], receiver: Receiver
) -> None:
    first, second = pair
    probe_account = first.account("probe", 100)
    cost = _cost_of_one(first, probe_account)
    account = first.account("thin", (cost * 60) / 1_000_000)
    first.call(first.management.set_low_balance(account, cost * 30))
    for gateway in pair:
        gateway.call(gateway.services.alerts.scan())  # type: ignore[union-attr]
    key = first.key(account, "Basic", name="spender", rpm=100_000)
    second.refresh_keys()
    _spend_below(pair, key.secret, account.id, cost * 30)
    wait_until(lambda: receiver.events("balance.low"), "balance.low delivered")
    wait_until(lambda: _settled(pair), "alert checks and deliveries ended")
    (low,) = receiver.events("balance.low")
    assert low["subject"] == f"account:{account.id}" and low["threshold_uc"] == cost * 30
    assert low["balance_uc"] < cost * 30
    # A top-up re-arms it: the next crossing is a new alert, still one.
    first.call(first.management.add_credits(account, cost * 40, "refill"))
    _spend_below(pair, key.secret, account.id, cost * 30)
    wait_until(lambda: len(receiver.events("balance.low")) >= 2, "the second balance.low delivered")
    wait_until(lambda: _settled(pair), "alert checks and deliveries ended")
    assert len(receiver.events("balance.low")) == 2
    _verify(receiver)


def test_key_revoked_is_retried_after_500s_until_delivered(tmp_path: Path, receiver: Receiver) -> None:
    gateway = GatewayServer(make_settings(tmp_path / "data", alerts=_alerts(receiver))).start()
    try:
        account = gateway.account("revoking", 1)
        key = gateway.key(account, "Basic", name="leaked")
        receiver.fail_next = 2
        token = gateway.call(gateway.management.create_admin_token(None))
        response = httpx.post(
            f"{gateway.base_url}/admin/api/keys/{key.record.id}/revoke",
            headers={"authorization": f"Bearer {token}"},
        )
        assert response.status_code == 200
        wait_until(lambda: receiver.events("key.revoked"), "key.revoked delivered")
        wait_until(lambda: _settled((gateway,)), "deliveries ended")
        attempts = [r for r in receiver.received if b"key.revoked" in r.body]
        assert [a.status for a in attempts] == [500, 500, 200]
        assert len({a.body for a in attempts}) == 1
        (alert,) = receiver.events("key.revoked")
        assert alert["subject"] == f"key:{key.record.id}" and alert["account_id"] == account.id
        _verify(receiver)
        metrics = httpx.get(f"{gateway.base_url}/metrics").text
        assert 'modelgate_alert_failures_total{event="key.revoked"} 2.0' in metrics
        assert 'modelgate_alert_deliveries_total{event="key.revoked"} 1.0' in metrics
    finally:
        gateway.stop()


def test_slack_format_carries_text_and_is_signed(tmp_path: Path, receiver: Receiver) -> None:
    alerts = _alerts(receiver)
    alerts["webhooks"] = [
        {"url": receiver.url, "secret": SECRET, "format": "slack", "events": ["key.revoked"]}
    ]
    gateway = GatewayServer(make_settings(tmp_path / "data", alerts=alerts)).start()
    try:
        account = gateway.account("slack", 1)
        key = gateway.key(account, "Basic", name="x")
        gateway.call(gateway.management.revoke_key(key.record))
        wait_until(lambda: receiver.answered(), "the slack message delivered")
        (hit,) = receiver.answered()
        assert hit.json["text"].startswith("modelgate key.revoked: key:")
        assert hit.json["modelgate"]["event"] == "key.revoked"
        _verify(receiver)
    finally:
        gateway.stop()


def test_a_deployment_whose_credentials_are_refused_is_upstream_down_once(
    tmp_path: Path, receiver: Receiver
) -> None:
    from tests.fakes import FakeUpstream, Fault
    from tests.loop_thread import LoopThread
    from tests.resilience.harness import ENV, anthropic_provider

    with LoopThread("fake-upstreams") as fakes:
        dead = fakes.start(FakeUpstream(default=Fault.status(401, error_type="authentication_error")))
        gateway = GatewayServer(
            make_settings(
                tmp_path / "data",
                alerts=_alerts(receiver),
                providers=[anthropic_provider("ant-dead", dead.base_url)],
                deployments={"aria-sonnet-4.6": [{"provider": "ant-dead", "upstream_model": "claude-up"}]},
                default_provider="",
                unrouted="hide",
                routing={"cooldown": 600.0, "max_attempts": 1},
            ),
            env=ENV,
        ).start()
        try:
            account = gateway.account("down", 100)
            key = gateway.key(account, "Basic", name="k", rpm=100_000)
            body = {
                "model": "aria-sonnet-4.6",
                "max_tokens": 16,
                "messages": [{"role": "user", "content": "hi"}],
            }

            async def burst() -> list[int]:
                async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
                    calls = [
                        client.post(
                            "/v1/messages",
                            headers={"x-api-key": key.secret, "anthropic-version": "2023-06-01"},
                            json=body,
                        )
                        for _ in range(50)
                    ]
                    return [r.status_code for r in await asyncio.gather(*calls)]

            statuses = asyncio.run(burst())
            assert 200 not in statuses
            wait_until(lambda: receiver.events("upstream.down"), "upstream.down delivered")
            monitor = gateway.services.alerts
            assert monitor is not None
            for _ in range(3):  # more scans while it stays down in the same window: nothing new
                gateway.call(monitor.scan())
            wait_until(lambda: _settled((gateway,)), "deliveries ended")
            (down,) = receiver.events("upstream.down")
            assert down["subject"] == "deployment:ant-dead/claude-up"
            assert down["cooling_for_seconds"] > 0
            _verify(receiver)
        finally:
            gateway.stop()


def test_a_key_about_to_expire_is_key_expiring_once_across_instances(
    pair: tuple[GatewayServer, GatewayServer], receiver: Receiver
) -> None:
    """``alerts.key_expiring_days`` (7 by default) ahead of a key's ``expires_at``: one alert, sent
    by one of the two instances; a key expiring later, or without expiry, is not announced."""
    first = pair[0]
    account = first.account("expiring", 1)
    now = first.services.clock.time()
    soon = first.key(account, "Basic", name="soon", expires_at=now + 2 * 86400)
    first.key(account, "Basic", name="later", expires_at=now + 30 * 86400)
    first.key(account, "Basic", name="never")
    wait_until(lambda: receiver.events("key.expiring"), "key.expiring delivered")
    for gateway in pair:  # both have scanned the keys since, and every delivery has ended
        monitor = gateway.services.alerts
        assert monitor is not None
        gateway.call(monitor.scan())
    wait_until(lambda: _settled(pair), "deliveries ended")
    (alert,) = receiver.events("key.expiring")
    assert alert["subject"] == f"key:{soon.record.id}" and alert["account_id"] == account.id
    assert 0 < alert["expires_in_seconds"] <= 2 * 86400
    _verify(receiver)
