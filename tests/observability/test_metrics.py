"""``GET /metrics`` of a real gateway (issue 12): what each series counts, equal to what the test
sent and to the usage records; the names and labels dashboards rely on; the token, the loopback
port and the per-key switch."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from modelgate.clock import month_of
from modelgate.keys import is_well_formed_key
from modelgate.storage.base import UsageRecord
from tests.fakes import FakeUpstream, Fault, Reply
from tests.gateway.clients import SdkClients
from tests.gateway_server import GatewayServer, free_port, running_gateway
from tests.loop_thread import LoopThread
from tests.observability.scrape import Scrape, scrape
from tests.resilience.harness import ENV, anthropic_provider

HELLO = [{"role": "user", "content": "Hello there metrics"}]
TOKEN = "metrics-token-" + "z" * 24

#: Every family the gateway exports (beyond the process and GC collectors): type and labels.
#: Dashboards and alert rules (deploy/) are built on these; change them only with those.
PINNED: dict[str, tuple[str, frozenset[str]]] = {
    "modelgate_requests": ("counter", frozenset({"endpoint", "model", "group", "status_class", "outcome"})),
    "modelgate_request_duration_seconds": ("histogram", frozenset({"endpoint", "model", "stream"})),
    "modelgate_time_to_first_token_seconds": ("histogram", frozenset({"endpoint", "model"})),
    "modelgate_gateway_added_seconds": ("histogram", frozenset({"endpoint", "stream"})),
    "modelgate_tokens": ("counter", frozenset({"model", "group", "kind"})),
    "modelgate_charged_microcredits": ("counter", frozenset({"model", "group"})),
    "modelgate_billing_refusals": ("counter", frozenset({"reason"})),
    "modelgate_refusal_records_dropped": ("counter", frozenset()),
    "modelgate_limit_refusals": ("counter", frozenset({"limit"})),
    "modelgate_key_access_refusals": ("counter", frozenset({"reason"})),
    "modelgate_max_tokens_clamps": ("counter", frozenset({"reason"})),
    "modelgate_upstream_attempts": ("counter", frozenset({"provider", "deployment"})),
    "modelgate_upstream_retries": ("counter", frozenset({"provider", "deployment"})),
    "modelgate_upstream_failovers": ("counter", frozenset({"provider", "deployment"})),
    "modelgate_upstream_errors": ("counter", frozenset({"provider", "deployment", "class"})),
    "modelgate_upstream_latency_seconds": ("histogram", frozenset({"provider", "deployment"})),
    "modelgate_upstream_tokens": ("counter", frozenset({"provider", "deployment", "kind"})),
    "modelgate_affinity": ("counter", frozenset({"result"})),
    "modelgate_affinity_sessions": ("gauge", frozenset()),
    "modelgate_affinity_dropped": ("counter", frozenset({"reason"})),
    "modelgate_ledger_write_seconds": ("histogram", frozenset()),
    "modelgate_ledger_batch_size": ("histogram", frozenset()),
    "modelgate_ledger_batch_wait_seconds": ("histogram", frozenset()),
    "modelgate_build_info": ("gauge", frozenset({"version"})),
    "modelgate_in_flight_requests": ("gauge", frozenset()),
    "modelgate_in_flight_limit": ("gauge", frozenset()),
    "modelgate_connection_cap": ("gauge", frozenset()),
    "modelgate_open_streams": ("gauge", frozenset()),
    "modelgate_large_bodies_in_flight": ("gauge", frozenset()),
    "modelgate_protective_refusals": ("counter", frozenset({"reason"})),
    "modelgate_offload_jobs": ("counter", frozenset()),
    "modelgate_offload_pending": ("gauge", frozenset()),
    "modelgate_offload_workers_lost": ("counter", frozenset()),
    "modelgate_offload_arena_bytes": ("gauge", frozenset()),
    "modelgate_draining": ("gauge", frozenset()),
    "modelgate_sweeper_releases": ("counter", frozenset()),
    "modelgate_settles_waiting": ("gauge", frozenset()),
    "modelgate_settles_kept": ("counter", frozenset()),
    "modelgate_settles_landed": ("counter", frozenset()),
    "modelgate_settles_timed_out": ("counter", frozenset()),
    "modelgate_settle_timeout_seconds": ("gauge", frozenset()),
    "modelgate_key_cache_age_seconds": ("gauge", frozenset()),
    "modelgate_key_cache_keys": ("gauge", frozenset()),
    "modelgate_rate_window_keys": ("gauge", frozenset()),
    "modelgate_usage_records_deleted": ("counter", frozenset()),
    "modelgate_stored_room_accounts": ("gauge", frozenset()),
    "modelgate_responses_saves_in_flight": ("gauge", frozenset()),
    "modelgate_responses_saves_after_answer": ("counter", frozenset({"outcome"})),
    "modelgate_deployment_cooling": ("gauge", frozenset({"provider", "deployment"})),
    "modelgate_deployment_cooldown_seconds": ("gauge", frozenset({"provider", "deployment"})),
    "modelgate_deployment_consecutive_failures": ("gauge", frozenset({"provider", "deployment"})),
    "modelgate_admin_reports_not_modified": ("counter", frozenset({"how"})),
    "modelgate_admin_report_tags_remembered": ("gauge", frozenset()),
    "modelgate_upstream_connections": ("gauge", frozenset({"provider", "state"})),
    "modelgate_upstream_connection_waiting": ("gauge", frozenset({"provider"})),
    "modelgate_database_up": ("gauge", frozenset()),
    "modelgate_reservations_pending": ("gauge", frozenset()),
    "modelgate_reservation_oldest_age_seconds": ("gauge", frozenset()),
    "modelgate_account_available_microcredits": ("gauge", frozenset({"account_id"})),
    "modelgate_websocket_connections_open": ("gauge", frozenset()),
    "modelgate_websocket_connections_accepted": ("counter", frozenset()),
    "modelgate_websocket_upgrades_refused": ("counter", frozenset({"status"})),
    "modelgate_websocket_connections_closed": ("counter", frozenset({"reason"})),
    "modelgate_websocket_messages_received": ("counter", frozenset()),
    "modelgate_websocket_idle_timeout_seconds": ("gauge", frozenset()),
    "modelgate_websocket_max_connection_seconds": ("gauge", frozenset()),
}
#: Only with Redis (``redis_url``): tests/observability/test_prometheus.py runs with it.
REDIS_ONLY: dict[str, tuple[str, frozenset[str]]] = {
    "modelgate_rate_limiter_fallbacks": ("counter", frozenset()),
    "modelgate_rate_limiter_degraded": ("gauge", frozenset()),
}
#: Only with PostgreSQL (``database_url``): tests/observability/test_prometheus.py runs with it.
POSTGRESQL_ONLY: dict[str, tuple[str, frozenset[str]]] = {
    "modelgate_database_connections": ("gauge", frozenset({"state"})),
    "modelgate_database_connections_limit": ("gauge", frozenset()),
}


def families_of(found: Scrape) -> dict[str, tuple[str, frozenset[str]]]:
    out = {}
    for name, family in found.families.items():
        if not name.startswith("modelgate_"):
            continue
        labels = {k for s in family.samples for k in s.labels if k not in ("le", "quantile")}
        out[name] = (family.type, frozenset(labels))
    return out


def usage_records(gateway: GatewayServer) -> list[UsageRecord]:
    month = month_of(gateway.services.clock.time())
    return gateway.call(gateway.services.usage.usage_records(month, limit=10_000))


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayServer]:
    with running_gateway(tmp_path / "data", metrics={"token": TOKEN}) as server:
        yield server


def send_traffic(gateway: GatewayServer, sdk: SdkClients) -> Counter[tuple[str, str]]:
    """A scripted mix over every endpoint; returns the (endpoint, outcome) of each request."""
    url = gateway.base_url
    account = gateway.account("metrics", credits=1_000)
    pro, nova = gateway.key(account, "Pro").secret, gateway.key(account, "Nova").secret
    ant, oai = sdk.anthropic(url, pro), sdk.openai(url, nova)
    sent: Counter[tuple[str, str]] = Counter()
    for _ in range(3):
        ant.messages.create(model="aria-haiku-4.5", max_tokens=64, messages=HELLO)  # type: ignore[arg-type]
        sent["messages", "ok"] += 1
    for _ in range(2):
        with ant.messages.stream(model="aria-haiku-4.5", max_tokens=64, messages=HELLO) as stream:  # type: ignore[arg-type]
            stream.get_final_message()
        sent["messages", "ok"] += 1
        oai.chat.completions.create(model="nova-5.5", messages=HELLO)  # type: ignore[arg-type]
        list(oai.chat.completions.create(model="nova-5.5", messages=HELLO, stream=True))  # type: ignore[arg-type]
        sent["chat", "ok"] += 2
    oai.responses.create(model="nova-5.5", input="Hello there metrics")
    list(oai.responses.create(model="nova-5.5", input="Hello there metrics", stream=True))
    sent["responses", "ok"] += 2
    ant.messages.count_tokens(model="aria-haiku-4.5", messages=HELLO)  # type: ignore[arg-type]
    sent["count_tokens", "ok"] += 1
    # A max_tokens above the model's output limit is lowered (a clamp), and served.
    ant.messages.create(model="aria-haiku-4.5", max_tokens=20_000, messages=HELLO)  # type: ignore[arg-type]
    sent["messages", "ok"] += 1
    # Refusals, each in its endpoint's format.
    with pytest.raises(openai.AuthenticationError):
        sdk.openai(url, "sk-cs4-not-a-key").chat.completions.create(model="nova-5.5", messages=HELLO)  # type: ignore[arg-type]
    sent["chat", "refused_auth"] += 1
    with pytest.raises(anthropic.NotFoundError):
        ant.messages.create(model="aria-nonexistent", max_tokens=8, messages=HELLO)  # type: ignore[arg-type]
    sent["messages", "refused_not_found"] += 1
    bad = httpx.post(
        f"{url}/v1/chat/completions", headers={"authorization": f"Bearer {nova}"}, json={"model": "nova-5.5"}
    )
    assert bad.status_code == 400
    sent["chat", "refused_invalid"] += 1
    limited = gateway.key(account, "Nova", rpm=1).secret
    sdk.openai(url, limited).chat.completions.create(model="nova-5.5", messages=HELLO)  # type: ignore[arg-type]
    with pytest.raises(openai.RateLimitError):
        sdk.openai(url, limited).chat.completions.create(model="nova-5.5", messages=HELLO)  # type: ignore[arg-type]
    sent["chat", "ok"] += 1
    sent["chat", "refused_rate_limit"] += 1
    broke = gateway.key(gateway.account("broke", credits=0), "Nova").secret
    with pytest.raises(openai.APIStatusError) as refused:
        sdk.openai(url, broke).chat.completions.create(model="nova-5.5", messages=HELLO)  # type: ignore[arg-type]
    assert refused.value.status_code == 402
    sent["chat", "refused_billing"] += 1
    return sent


def test_counters_equal_what_was_sent_and_what_the_usage_records_say(
    gateway: GatewayServer, sdk: SdkClients
) -> None:
    sent = send_traffic(gateway, sdk)
    found = scrape(gateway.base_url, TOKEN)

    counted = Counter(
        {
            (s.labels["endpoint"], s.labels["outcome"]): int(s.value)
            for s in found.samples("modelgate_requests_total")
        }
    )
    assert +counted == +sent
    assert found.by("modelgate_requests_total", "status_class") == {
        "2xx": sum(n for (_, outcome), n in sent.items() if outcome == "ok"),
        "4xx": sum(n for (_, outcome), n in sent.items() if outcome != "ok"),
    }
    # Every request is timed once; every stream has a time to its first event.
    assert found.value("modelgate_request_duration_seconds_count") == sum(sent.values())
    assert found.value("modelgate_request_duration_seconds_count", stream="true") == 5
    assert found.value("modelgate_time_to_first_token_seconds_count") == 5
    assert found.by("modelgate_time_to_first_token_seconds_count", "endpoint") == {
        "messages": 2,
        "chat": 2,
        "responses": 1,
    }
    # Requests that reached an upstream have a gateway-added time, no more than their duration.
    served = sum(n for (endpoint, outcome), n in sent.items() if outcome == "ok")
    assert found.value("modelgate_gateway_added_seconds_count") == served
    assert found.value("modelgate_gateway_added_seconds_sum") <= found.value(
        "modelgate_request_duration_seconds_sum"
    )

    # Tokens and spend: exactly what the usage records hold.
    records = [r for r in usage_records(gateway) if r.status == "ok"]
    assert len(records) == served - 1  # count_tokens is never billed
    assert found.value("modelgate_tokens_total", kind="input") == sum(r.input_tokens for r in records)
    assert found.value("modelgate_tokens_total", kind="output") == sum(r.output_tokens for r in records)
    assert found.value("modelgate_charged_microcredits_total") == sum(r.charged_uc for r in records) > 0
    assert found.by("modelgate_charged_microcredits_total", "group") == {
        group: sum(r.charged_uc for r in records if r.model.startswith(prefix))
        for group, prefix in (("Pro", "aria"), ("Nova", "nova"))
    }
    assert found.by("modelgate_billing_refusals_total", "reason") == {"insufficient_balance": 1}
    assert found.by("modelgate_max_tokens_clamps_total", "reason") == {"model_limit": 1}
    # One attempt per served request (the simulator counts tokens too, as a Messages upstream).
    assert found.value("modelgate_upstream_attempts_total") == served
    assert found.value("modelgate_upstream_latency_seconds_count") == served
    assert found.value("modelgate_upstream_errors_total") == 0
    # Ledger writes: each reserve and settle went through a group commit.
    assert found.value("modelgate_ledger_batch_size_sum") >= 2 * len(records)
    # SQLite's batches never wait for company (only PostgreSQL's do, under load).
    batches = found.value("modelgate_ledger_batch_size_count")
    assert found.value("modelgate_ledger_batch_wait_seconds_count") == batches > 0
    assert found.value("modelgate_ledger_batch_wait_seconds_sum") == 0
    # Nothing in flight any more; the database answered.
    assert found.value("modelgate_in_flight_requests") == 0
    assert found.value("modelgate_open_streams") == 0
    assert found.value("modelgate_reservations_pending") == 0
    assert found.value("modelgate_database_up") == 1


def test_metric_names_and_labels_are_pinned(gateway: GatewayServer, sdk: SdkClients) -> None:
    send_traffic(gateway, sdk)
    expired = gateway.key(gateway.account("pinned-expired", 1), "Basic", expires_at=1.0)
    refused = httpx.get(
        f"{gateway.base_url}/v1/models", headers={"authorization": f"Bearer {expired.secret}"}
    )
    assert refused.status_code == 401  # a key_access refusal, so that family has a sample
    exported = families_of(scrape(gateway.base_url, TOKEN))
    assert {name: kind for name, (kind, _) in exported.items()} == {
        name: kind for name, (kind, _) in PINNED.items()
    }
    # Labels as pinned, for every family with samples (a labelled counter nothing has touched
    # yet, such as retries here, shows no sample and so no labels).
    with_samples = {name: labels for name, (_, labels) in exported.items() if labels or not PINNED[name][1]}
    assert with_samples == {name: PINNED[name][1] for name in with_samples}
    # (The upstream connection gauges need an HTTP provider: the failover test reads them.)
    assert len(with_samples) >= len(PINNED) - 5
    # Every family is documented for operators.
    docs = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    missing = [name for name in {**PINNED, **REDIS_ONLY, **POSTGRESQL_ONLY} if name not in docs]
    assert missing == []
    # No label value is a key secret, whatever a request sent.
    assert not any(
        is_well_formed_key(word.strip('"{},=')) for word in scrape(gateway.base_url, TOKEN).text.split()
    )


def test_the_main_port_needs_the_token_when_one_is_set(gateway: GatewayServer) -> None:
    url = f"{gateway.base_url}/metrics"
    for headers in ({}, {"authorization": "Bearer wrong-token"}, {"authorization": f"Basic {TOKEN}"}):
        refused = httpx.get(url, headers=headers)
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
        assert refused.json()["error"]["type"] == "invalid_request_error"
    assert httpx.get(url, headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_metrics_can_be_turned_off_or_served_on_a_loopback_port_of_their_own(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "off", metrics={"enabled": False}) as off:
        assert httpx.get(f"{off.base_url}/metrics").status_code == 404
    port = free_port()
    with running_gateway(tmp_path / "port", metrics={"token": TOKEN, "port": port}) as gateway:
        # The separate port needs no token; the main port still does.
        separate = scrape(f"http://127.0.0.1:{port}")
        assert separate.value("modelgate_in_flight_limit") == gateway.settings.server.max_in_flight
        assert httpx.get(f"{gateway.base_url}/metrics").status_code == 401


def test_key_ids_are_labels_only_when_per_key_is_on(tmp_path: Path, sdk: SdkClients) -> None:
    with running_gateway(tmp_path / "data", metrics={"per_key": True}) as gateway:
        issued = gateway.key(gateway.account("acme"), "Nova")
        sdk.openai(gateway.base_url, issued.secret).chat.completions.create(model="nova-5.5", messages=HELLO)  # type: ignore[arg-type]
        found = scrape(gateway.base_url)
        assert found.by("modelgate_requests_total", "key_id") == {issued.record.id: 1}
        assert set(found.by("modelgate_charged_microcredits_total", "key_id")) == {issued.record.id}


def test_failover_counts_two_attempts_an_error_and_the_cooling_deployment(
    tmp_path: Path, sdk: SdkClients
) -> None:
    with LoopThread("fakes") as fakes:
        bad = fakes.start(FakeUpstream(default=Fault.status(503)))
        good = fakes.start(FakeUpstream(default=Reply(text="served by the good one")))
        providers = [
            anthropic_provider("ant-bad", bad.base_url),
            anthropic_provider("ant-good", good.base_url),
        ]
        deployments = {
            "aria-sonnet-4.6": [
                {"provider": "ant-bad", "upstream_model": "claude-up", "weight": 1_000_000},
                {"provider": "ant-good", "upstream_model": "claude-up", "weight": 1},
            ]
        }
        routing = {
            "max_attempts": 2,
            "backoff_base": 0.001,
            "backoff_max": 0.002,
            "cooldown": 600.0,
            "failures_to_cooldown": 1,
        }
        with running_gateway(
            tmp_path / "data",
            env=ENV,
            providers=providers,
            deployments=deployments,
            default_provider="",
            unrouted="hide",
            routing=routing,
        ) as gateway:
            key = gateway.key(gateway.account("acme"), "Pro").secret
            message = sdk.anthropic(gateway.base_url, key).messages.create(
                model="aria-sonnet-4.6",
                max_tokens=32,
                messages=HELLO,  # type: ignore[arg-type]
            )
            assert message.content[0].text == "served by the good one"  # type: ignore[union-attr]
            found = scrape(gateway.base_url)
    assert found.by("modelgate_upstream_attempts_total", "provider") == {"ant-bad": 1, "ant-good": 1}
    assert found.by("modelgate_upstream_failovers_total", "provider") == {"ant-good": 1}
    assert found.value("modelgate_upstream_retries_total") == 0
    assert found.by("modelgate_upstream_errors_total", "class") == {"server_error": 1}
    assert found.by("modelgate_upstream_errors_total", "provider") == {"ant-bad": 1}
    # The failed deployment cools down (503 without retry-after: the configured cooldown).
    assert found.by("modelgate_deployment_cooling", "provider") == {"ant-bad": 1}
    assert found.value("modelgate_deployment_cooldown_seconds", provider="ant-bad") > 0
    # Both answers were whole and kept alive: one idle connection per provider, none busy.
    assert found.by("modelgate_upstream_connections", "provider", state="idle") == {
        "ant-bad": 1,
        "ant-good": 1,
    }
    busy = [
        s.labels["provider"]
        for s in found.samples("modelgate_upstream_connections")
        if s.labels["state"] == "busy"
    ]
    assert sorted(busy) == ["ant-bad", "ant-good"]
    assert found.value("modelgate_upstream_connections", state="busy") == 0
    assert (
        sorted(s.labels["provider"] for s in found.samples("modelgate_upstream_connection_waiting")) == busy
    )
    assert found.value("modelgate_upstream_connection_waiting") == 0
    assert found.by("modelgate_requests_total", "outcome") == {"ok": 1}
