"""Issue #31's acceptance, in one process on SQLite, across ``--workers 2`` and on PostgreSQL +
Redis (two instances):
500 requests in flight, mixed endpoints, half streaming, some clients hanging up, against a key
and its account that both have tokens per minute and requests in flight set (``scenario``). The
upstream never sees more requests at once than the account allows, no rolling minute holds more
tokens than either limit, and every slot is back at the end (disconnects included). The clock is
held still during the burst (every admission in one minute), then moved past the window so the
slots' return is shown by a full round of requests served at once."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from modelgate.cli.context import Options, Repositories, with_management, with_repositories
from modelgate.clock import month_of
from modelgate.management import Management
from tests.billing.helpers import send
from tests.fakes.upstream import FakeUpstream, Fault
from tests.gateway_server import GatewayServer, ManualClock, running_gateway
from tests.limits import scenario
from tests.loop_thread import LoopThread
from tests.multi.conftest import NOW, cluster_of
from tests.polling import wait_until
from tests.storage.engines import redis_url
from tests.workers.harness import WorkersGateway


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    loop = LoopThread("in-flight-500-upstream")
    try:
        yield loop.start(FakeUpstream(default=Fault.slow_first_byte(scenario.FIRST_BYTE_SECONDS)))
    finally:
        loop.close()


def _routing(upstream: FakeUpstream) -> dict[str, Any]:
    return {
        "providers": [
            {"name": "simulator", "kind": "simulator"},
            {"name": "fake", "kind": "openai-compatible", "base_url": upstream.base_url + "/v1"},
        ],
        "deployments": {scenario.MODEL: [{"provider": "fake", "upstream_model": "fake-haiku"}]},
    }


def _seed(gateway: GatewayServer) -> tuple[int, str, list[str]]:
    """The account (with its limits) and its two keys: (account id, key A's id, secrets)."""
    account = gateway.account("in-flight-500", credits=1000)
    account = gateway.call(gateway.management.set_account_limits(account, scenario.ACCOUNT))
    gateway.services.account_limits.changed(account)
    key_a = gateway.key(
        account, "Pro", rpm=100_000, tpm=scenario.KEY_A_TPM, max_concurrency=scenario.KEY_A_CONCURRENCY
    )
    key_b = gateway.key(account, "Pro", rpm=100_000)
    return account.id, key_a.record.id, [key_a.secret, key_b.secret]


def _records(
    gateway: GatewayServer, *, key_id: str | None = None, account_id: int | None = None
) -> list[Any]:
    month = month_of(gateway.services.clock.time())
    store = gateway.services.usage
    return list(gateway.call(store.usage_records(month, key_id=key_id, account_id=account_id, limit=100_000)))


def _a_full_round_is_served(base_url: str, secret: str) -> bool:
    async def round_() -> list[int]:
        async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
            jobs = [
                send(client, "chat", secret, scenario.MODEL, max_tokens=5)
                for _ in range(scenario.ACCOUNT_CONCURRENCY)
            ]
            return [s.status for s in await asyncio.gather(*jobs)]

    return asyncio.run(round_()) == [200] * scenario.ACCOUNT_CONCURRENCY


def test_500_in_flight_in_one_process_on_sqlite(tmp_path: Path, upstream: FakeUpstream) -> None:
    clock = ManualClock(NOW)
    with running_gateway(tmp_path / "data", clock=clock, **_routing(upstream)) as gateway:
        account_id, key_a, secrets = _seed(gateway)
        out = asyncio.run(scenario.burst([gateway.base_url], secrets))
        gateway.call(gateway.services.settlements.drain())
        buckets = gateway.services.tickets.buckets  # type: ignore[attr-defined]
        wait_until(
            lambda: buckets.in_flight(f"a:{account_id}") == 0 and buckets.in_flight(f"k:{key_a}") == 0,
            "every slot back, the hung-up streams' included",
        )
        scenario.check(
            out,
            upstream.max_in_flight,
            _records(gateway, key_id=key_a),
            _records(gateway, account_id=account_id),
        )
        clock.advance(61)
        assert _a_full_round_is_served(gateway.base_url, secrets[1])
        assert upstream.max_in_flight <= scenario.ACCOUNT_CONCURRENCY


def test_500_in_flight_on_postgresql_and_redis(tmp_path: Path, upstream: FakeUpstream) -> None:
    with cluster_of(tmp_path, redis_url(), instances=2, **_routing(upstream)) as cluster:
        first = cluster[0]
        account_id, key_a, secrets = _seed(first)
        for server in cluster.servers:
            server.call(server.services.account_limits.refresh())
        cluster.refresh_keys()
        out = asyncio.run(scenario.burst([s.base_url for s in cluster.servers], secrets))
        for server in cluster.servers:
            server.call(server.services.settlements.drain())
            server.call(server.services.tickets.ended())  # type: ignore[attr-defined]

        async def slots_held() -> int:
            client = aioredis.Redis.from_url(cluster.redis_url)
            try:
                keys = [f"modelgate:concurrency:a:{account_id}", f"modelgate:concurrency:k:{key_a}"]
                return sum([await client.zcard(k) for k in keys])
            finally:
                await client.aclose()

        wait_until(lambda: asyncio.run(slots_held()) == 0, "every slot back in Redis")
        scenario.check(
            out, upstream.max_in_flight, _records(first, key_id=key_a), _records(first, account_id=account_id)
        )
        assert all(not s.services.tickets.degraded for s in cluster.servers)  # type: ignore[attr-defined]
        cluster.clock.advance(61)
        assert _a_full_round_is_served(cluster[1].base_url, secrets[1])


def test_500_in_flight_across_two_workers(tmp_path: Path, upstream: FakeUpstream) -> None:
    extra = (
        '[[providers]]\nname = "simulator"\nkind = "simulator"\n\n'
        f'[[providers]]\nname = "fake"\nkind = "openai-compatible"\nbase_url = "{upstream.base_url}/v1"\n\n'
        f'[[deployments."{scenario.MODEL}"]]\nprovider = "fake"\nupstream_model = "fake-haiku"\n'
    )
    with WorkersGateway(tmp_path, extra, clocked=True, server={"keep_alive_seconds": 120}) as gateway:
        assert gateway.clock is not None
        gateway.clock.set(NOW)
        options = Options(gateway.config, gateway.data_dir)

        async def seed(m: Management) -> tuple[int, str, list[str]]:
            account = await m.set_account_limits(await m.create_account("load", 10**9), scenario.ACCOUNT)
            key_a = await m.create_key(
                account,
                "Pro",
                rpm=100_000,
                tpm=scenario.KEY_A_TPM,
                max_concurrency=scenario.KEY_A_CONCURRENCY,
            )
            key_b = await m.create_key(account, "Pro", rpm=100_000)
            return account.id, key_a.record.id, [key_a.secret, key_b.secret]

        account_id, key_a, secrets = with_management(options, seed)
        gateway.start()
        out = asyncio.run(scenario.burst([gateway.base_url], secrets))

        async def records(_: Management, repositories: Repositories) -> tuple[list[Any], list[Any]]:
            month = month_of(NOW)
            return (
                await repositories.usage.usage_records(month, key_id=key_a, limit=100_000),
                await repositories.usage.usage_records(month, account_id=account_id, limit=100_000),
            )

        def settled() -> bool:  # every served request's record is written (streams end after)
            _, every = with_repositories(options, records)
            return sum(1 for r in every if r.status != "refused_429") == out.statuses.count(200)

        wait_until(settled, "every served request settled")
        of_a, of_all = with_repositories(options, records)
        scenario.check(out, upstream.max_in_flight, of_a, of_all)
        # Every slot came back (the hung-up streams' too): past the window, a full round at once.
        gateway.clock.set(NOW + 61)
        assert _a_full_round_is_served(gateway.base_url, secrets[1])
        assert upstream.max_in_flight <= scenario.ACCOUNT_CONCURRENCY
