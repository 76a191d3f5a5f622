"""``/health`` without credentials tells only what is up (issue #35 item 8): the overall status and
each component (database, Redis when configured, upstreams) as ok, degraded or down, with no
provider names, upstream model ids, cooldowns or addresses; an operator admin token gets the
details. ``/healthz`` is unchanged."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from modelgate import __version__
from tests.fakes.upstream import FakeUpstream, Fault, Reply, refused_base_url
from tests.gateway_server import GatewayServer, running_gateway
from tests.loop_thread import LoopThread
from tests.storage.engines import redis_url

#: What the public view must never show (names, ids, addresses and cooldown figures).
SECRETS_OF_THE_SETUP = ("ant-bad", "ant-good", "claude-bad-model", "claude-good-model", "127.0.0.1", "cool")


def operator(gateway: GatewayServer) -> dict[str, str]:
    token = gateway.call(gateway.management.create_admin_token(None))
    return {"authorization": f"Bearer {token}"}


def test_the_public_view_is_levels_only_and_an_operator_sees_details(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "data") as gateway:
        public = httpx.get(f"{gateway.base_url}/health")
        assert public.status_code == 200
        assert public.json() == {
            "status": "ok",
            "components": {"database": "ok", "ledger": "ok", "upstreams": "ok"},
        }
        assert "simulator" not in public.text
        details = httpx.get(f"{gateway.base_url}/health", headers=operator(gateway))
        assert details.status_code == 200
        body = details.json()
        assert body["status"] == "ok" and body["components"] == {
            "database": "ok",
            "ledger": "ok",
            "upstreams": "ok",
        }
        assert body["version"] == __version__
        assert body["checks"]["database"] == {"status": "ok", "engine": "sqlite"}
        assert [u["name"] for u in body["checks"]["upstreams"]] == ["simulator"]
        # An account's token is not an operator's; a bad token is refused, not read as no token.
        account = gateway.account("acme")
        owner = gateway.call(gateway.management.create_admin_token(account))
        refused = httpx.get(f"{gateway.base_url}/health", headers={"authorization": f"Bearer {owner}"})
        assert refused.status_code == 403 and refused.json()["error"]["type"] == "permission_error"
        bad = httpx.get(f"{gateway.base_url}/health", headers={"authorization": "Bearer mg-op-nonsense"})
        assert bad.status_code == 401 and "checks" not in bad.text
        # /healthz is as it was.
        healthz = httpx.get(f"{gateway.base_url}/healthz")
        assert healthz.json() == {"status": "ok", "service": "modelgate", "version": __version__}


@pytest.fixture
def upstreams() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    loop = LoopThread("health-upstreams")
    try:
        yield loop.start(FakeUpstream(default=Fault.status(500))), loop.start(FakeUpstream(default=Reply()))
    finally:
        loop.close()


def _gateway_with(tmp_path: Path, deployments: dict[str, Any], bad: FakeUpstream, good: FakeUpstream) -> Any:
    providers = [
        {"name": "simulator", "kind": "simulator"},
        {"name": "ant-bad", "kind": "anthropic", "base_url": bad.base_url, "api_key_env": "K"},
        {"name": "ant-good", "kind": "anthropic", "base_url": good.base_url, "api_key_env": "K"},
    ]
    return running_gateway(
        tmp_path / "data",
        env={"K": "sk-x"},
        providers=providers,
        deployments=deployments,
        default_provider="",
        unrouted="hide",
        routing={"failures_to_cooldown": 1, "cooldown": 600, "max_attempts": 2},
    )


def _ask(gateway: GatewayServer, model: str) -> int:
    key = gateway.key(gateway.account(f"a-{model}-{secrets.token_hex(4)}"), "Pro", rpm=1000).secret
    response = httpx.post(
        f"{gateway.base_url}/v1/messages",
        json={"model": model, "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]},
        headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
        timeout=30,
    )
    return response.status_code


def test_a_failing_deployment_is_degraded_and_all_failing_is_down_without_names(
    tmp_path: Path, upstreams: tuple[FakeUpstream, FakeUpstream]
) -> None:
    bad, good = upstreams
    deployments = {
        "aria-sonnet-4.6": [
            {"provider": "ant-bad", "upstream_model": "claude-bad-model"},
            {"provider": "ant-good", "upstream_model": "claude-good-model"},
        ]
    }
    with _gateway_with(tmp_path, deployments, bad, good) as gateway:
        while not bad.requests:  # until the failing deployment was tried (and cooled down)
            assert _ask(gateway, "aria-sonnet-4.6") == 200
        public = httpx.get(f"{gateway.base_url}/health")
        assert public.status_code == 200
        assert public.json() == {
            "status": "degraded",
            "components": {"database": "ok", "ledger": "ok", "upstreams": "degraded"},
        }
        assert not any(s in public.text for s in SECRETS_OF_THE_SETUP)
        details = httpx.get(f"{gateway.base_url}/health", headers=operator(gateway)).json()
        assert [(d["provider"], d["upstream_model"]) for d in details["checks"]["unhealthy_deployments"]] == [
            ("ant-bad", "claude-bad-model")
        ]


def test_every_deployment_cooling_down_is_down(
    tmp_path: Path, upstreams: tuple[FakeUpstream, FakeUpstream]
) -> None:
    bad, good = upstreams
    deployments = {"aria-sonnet-4.6": [{"provider": "ant-bad", "upstream_model": "claude-bad-model"}]}
    with _gateway_with(tmp_path, deployments, bad, good) as gateway:
        assert _ask(gateway, "aria-sonnet-4.6") >= 500
        public = httpx.get(f"{gateway.base_url}/health")
        # The gateway still answers what it can (credits, keys, errors): degraded, not down.
        assert public.status_code == 200
        assert public.json() == {
            "status": "degraded",
            "components": {"database": "ok", "ledger": "ok", "upstreams": "down"},
        }
        assert not any(s in public.text for s in SECRETS_OF_THE_SETUP)


def test_redis_unreachable_is_down_and_the_gateway_degraded(tmp_path: Path) -> None:
    unreachable = refused_base_url().replace("http://", "redis://")
    with running_gateway(tmp_path / "data", redis_url=unreachable) as gateway:
        public = httpx.get(f"{gateway.base_url}/health")
        assert public.status_code == 200
        assert public.json() == {
            "status": "degraded",
            "components": {"database": "ok", "ledger": "ok", "redis": "down", "upstreams": "ok"},
        }
        assert unreachable.split("//")[1] not in public.text


def test_redis_answering_is_ok(tmp_path: Path) -> None:
    url = redis_url()
    with running_gateway(tmp_path / "data", redis_url=url) as gateway:
        public = httpx.get(f"{gateway.base_url}/health")
        assert public.json() == {
            "status": "ok",
            "components": {"database": "ok", "ledger": "ok", "redis": "ok", "upstreams": "ok"},
        }
        assert url not in public.text


def test_the_database_down_is_down_with_503(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from modelgate.storage.sqlite_database import SqliteDatabase
    from tests.whole_store import whole_store

    with running_gateway(tmp_path / "data") as gateway:
        headers = operator(gateway)
        store = whole_store(gateway.services)
        assert isinstance(store.database, SqliteDatabase)
        store.database.path = Path("/proc/no-such-dir/db.sqlite")
        gateway.call(store.close())
        store.database._executor = ThreadPoolExecutor(1)
        public = httpx.get(f"{gateway.base_url}/health")
        assert public.status_code == 503
        assert public.json() == {
            "status": "down",
            "components": {"database": "down", "ledger": "ok", "upstreams": "ok"},
        }
        # No token can be checked without the database: the operator gets the public view.
        assert httpx.get(f"{gateway.base_url}/health", headers=headers).json()["status"] == "down"
