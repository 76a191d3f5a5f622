"""A real Prometheus (Debian's package, installed by scripts/services.sh) scrapes a gateway on
PostgreSQL and Redis, with the main port's bearer token, while a scripted run goes through it.
Its HTTP API then says what the dashboards and alerts would see: request and token counters equal
to what the test sent and what the usage records say, histograms with observations."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.gateway.clients import SdkClients
from tests.gateway_server import free_port, running_gateway
from tests.observability.test_metrics import (
    PINNED,
    POSTGRESQL_ONLY,
    REDIS_ONLY,
    TOKEN,
    send_traffic,
    usage_records,
)
from tests.polling import wait_until
from tests.storage.engines import create_database, drop_database, redis_url, required_service

PROMETHEUS_ENV = "MODELGATE_TEST_PROMETHEUS"


@contextmanager
def prometheus(root: Path, target: str) -> Iterator[str]:
    """A Prometheus scraping ``target`` (host:port) every second with the metrics token; yields
    its base URL. Runs in a process group of its own, ended as a whole."""
    binary = required_service(PROMETHEUS_ENV, "Prometheus (Debian: apt-get install prometheus)")
    root.mkdir(parents=True, exist_ok=True)
    config = root / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: modelgate\n"
        f"    authorization:\n      credentials: {TOKEN}\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
    )
    port = free_port()
    log = (root / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={root / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            assert process.poll() is None, (root / "prometheus.log").read_text()[-2000:]
            try:
                return httpx.get(f"{url}/-/ready", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(ready, "Prometheus to be ready")
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
        log.close()


def query(url: str, promql: str) -> dict[str, float]:
    """An instant query; each series' value keyed by its labels (``k=v,...``, "" for none)."""
    answer = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=10).json()
    assert answer["status"] == "success", answer
    out = {}
    for series in answer["data"]["result"]:
        labels = ",".join(f"{k}={v}" for k, v in sorted(series["metric"].items()) if k != "__name__")
        out[labels] = float(series["value"][1])
    return out


def scalar(url: str, promql: str) -> float | None:
    found = query(url, promql)
    return found.get("") if found else None


DEPLOY = Path(__file__).parents[2] / "deploy"


def operator_expressions() -> list[str]:
    """The PromQL of every Grafana panel and alert rule in deploy/ (``$__rate_interval`` as 1m)."""
    dashboard = json.loads((DEPLOY / "grafana" / "modelgate.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    rules = yaml_rules(DEPLOY / "prometheus" / "alerts.yml")
    return [e.replace("$__rate_interval", "1m") for e in exprs + rules]


def yaml_rules(path: Path) -> list[str]:
    """The ``expr`` of each alert rule."""
    groups = yaml.safe_load(path.read_text())["groups"]
    return [str(rule["expr"]) for group in groups for rule in group["rules"]]


def test_the_deploy_assets_use_only_pinned_series_and_are_valid() -> None:
    exprs = operator_expressions()
    assert len(exprs) >= 30
    families = set(PINNED) | set(REDIS_ONLY) | set(POSTGRESQL_ONLY)
    used = {
        re.sub(r"_(total|bucket|count|sum)$", "", name)
        for expr in exprs
        for name in re.findall(r"modelgate_[a-z_]+", expr)
    }
    assert used <= families, used - families
    # promtool (next to prometheus in Debian's package) accepts the config and the rules it loads.
    promtool = Path(required_service(PROMETHEUS_ENV, "Prometheus")).with_name("promtool")
    done = subprocess.run(
        [promtool, "check", "config", str(DEPLOY / "prometheus" / "prometheus.yml")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and "9 rules found" in done.stdout, done.stdout + done.stderr


def test_prometheus_sees_what_was_sent_and_billed(tmp_path: Path, sdk: SdkClients) -> None:
    redis = redis_url()
    database = asyncio.run(create_database("mgprom"))
    try:
        overrides: dict[str, Any] = {
            "database_url": database,
            "redis_url": redis,
            "database_pool_size": 7,
            "metrics": {"token": TOKEN},
        }
        with (
            running_gateway(tmp_path / "data", **overrides) as gateway,
            prometheus(tmp_path / "prometheus", f"127.0.0.1:{gateway.port}") as prom,
        ):
            # The target is up: the bearer token was accepted.
            wait_until(lambda: scalar(prom, 'sum(up{job="modelgate"})') == 1, "the first scrape")
            sent = send_traffic(gateway, sdk)
            total = sum(sent.values())
            wait_until(
                lambda: scalar(prom, "sum(modelgate_requests_total)") == total,
                f"Prometheus to have scraped all {total} requests",
                timeout=60,
            )
            outcomes = query(prom, "sum by (endpoint, outcome) (modelgate_requests_total)")
            records = [r for r in usage_records(gateway) if r.status == "ok"]
            input_tokens = scalar(prom, 'sum(modelgate_tokens_total{kind="input"})')
            output_tokens = scalar(prom, 'sum(modelgate_tokens_total{kind="output"})')
            charged = scalar(prom, "sum(modelgate_charged_microcredits_total)")
            durations = scalar(prom, "sum(modelgate_request_duration_seconds_count)")
            ttfts = scalar(prom, "sum(modelgate_time_to_first_token_seconds_count)")
            p99 = scalar(
                prom, "histogram_quantile(0.99, sum by (le) (modelgate_request_duration_seconds_bucket))"
            )
            fallbacks = scalar(prom, "sum(modelgate_rate_limiter_fallbacks_total)")
            pending = scalar(prom, "sum(modelgate_reservations_pending)")
            pool_limit = scalar(prom, "sum(modelgate_database_connections_limit)")
            in_use = scalar(prom, 'sum(modelgate_database_connections{state="in_use"})')
            pool_open = scalar(prom, "sum(modelgate_database_connections)")
            batches = scalar(prom, "sum(modelgate_ledger_batch_size_count)")
            waits = scalar(prom, "sum(modelgate_ledger_batch_wait_seconds_count)")
            # Every dashboard panel and alert rule evaluates on what this gateway exports.
            for expr in operator_expressions():
                query(prom, expr)
    finally:
        asyncio.run(drop_database(database))

    assert outcomes == {f"endpoint={e},outcome={o}": n for (e, o), n in sent.items()}
    assert input_tokens == sum(r.input_tokens for r in records)
    assert output_tokens == sum(r.output_tokens for r in records)
    assert charged == sum(r.charged_uc for r in records) > 0
    assert durations == total and ttfts == 5
    assert p99 is not None and p99 > 0
    assert fallbacks == 0  # Redis answered every rate-limit decision
    assert pending == 0
    # database_pool_size reached the store; the ledger keeps one of its connections.
    assert pool_limit == 7 and in_use is not None and in_use >= 1
    assert pool_open is not None and pool_open <= 7
    # Each ledger batch reports how long it waited for company (database_batch_wait_seconds).
    assert batches is not None and waits == batches > 0
