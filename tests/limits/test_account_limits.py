"""An account's rate limits (requests and tokens per minute, requests in flight) apply to all its
keys together, through a real gateway: taken in the same ticket as the key's, refused with a 429
that names the limit and says it is the account's, with the IETF RateLimit fields of the tightest
limit; set by the CLI (``accounts update NAME --rpm/--tpm/--concurrency``) against the running
server's database, which applies the change within its view's interval."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from modelgate.storage.base import AccountLimits
from tests.admin.test_cli import as_json, modelgate
from tests.billing.helpers import Seen, send
from tests.fakes.upstream import FakeUpstream, Fault
from tests.gateway_server import GatewayServer, running_gateway
from tests.loop_thread import LoopThread
from tests.polling import wait_until

MODEL = "aria-haiku-4.5"
SECRET = "cli-admin-secret-" + "y" * 40


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    loop = LoopThread("account-limits-upstream")
    try:
        yield loop.start(FakeUpstream(default=Fault.slow_first_byte(0.3)))
    finally:
        loop.close()


@pytest.fixture(scope="module")
def gateway(upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    providers = [
        {"name": "simulator", "kind": "simulator"},
        {"name": "fake", "kind": "openai-compatible", "base_url": upstream.base_url + "/v1"},
    ]
    deployments = {MODEL: [{"provider": "fake", "upstream_model": "fake-haiku"}]}
    with running_gateway(
        tmp_path_factory.mktemp("account-limits") / "data",
        providers=providers,
        deployments=deployments,
        secret=SECRET,
    ) as server:
        yield server


def _limited(gateway: GatewayServer, name: str, limits: AccountLimits) -> tuple[int, list[str]]:
    account = gateway.account(name, credits=1000)
    changed = gateway.call(gateway.management.set_account_limits(account, limits))
    gateway.services.account_limits.changed(changed)
    keys = [gateway.key(account, "Pro", rpm=100) for _ in range(2)]
    return account.id, [k.secret for k in keys]


async def _in_turn(gateway: GatewayServer, secrets: list[str], n: int) -> list[Seen]:
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
        fmts = ("messages", "chat")
        return [await send(client, fmts[i % 2], secrets[i % 2], MODEL, max_tokens=5) for i in range(n)]


def test_requests_per_minute_of_the_account_bind_all_its_keys(gateway: GatewayServer) -> None:
    _, secrets = _limited(gateway, "rpm-shared", AccountLimits(rpm=3))
    seen = asyncio.run(_in_turn(gateway, secrets, 5))
    assert [s.status for s in seen] == [200, 200, 200, 429, 429]
    # The tightest limit is the account's: its RateLimit field, every policy listed.
    assert seen[0].headers["ratelimit"].startswith("account-rpm;r=2;t=")
    assert seen[0].headers["ratelimit-policy"] == "rpm;q=100;w=60, account-rpm;q=3;w=60"
    refused = seen[3]
    assert refused.headers["x-modelgate-limit"] == "rpm"
    assert refused.headers["ratelimit"] == f"account-rpm;r=0;t={refused.headers['retry-after']}"
    assert "requests per minute exceeded for this account" in refused.body["error"]["message"]


def test_requests_in_flight_of_the_account_bind_all_its_keys(
    gateway: GatewayServer, upstream: FakeUpstream
) -> None:
    account_id, secrets = _limited(gateway, "in-flight-shared", AccountLimits(max_concurrency=2))
    upstream.max_in_flight = 0

    async def burst() -> list[Seen]:
        async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
            jobs = [
                send(client, "chat", secrets[i % 2], MODEL, max_tokens=5, stream=i % 2 == 1) for i in range(8)
            ]
            return list(await asyncio.gather(*jobs))

    seen = asyncio.run(burst())
    assert sorted(s.status for s in seen).count(200) >= 2
    refusals = [s for s in seen if s.status != 200]
    assert refusals and all(s.headers["x-modelgate-limit"] == "concurrency" for s in refusals)
    assert all("for this account" in s.body["error"]["message"] for s in refusals)
    assert 1 <= upstream.max_in_flight <= 2
    assert gateway.services.tickets.buckets.in_flight(f"a:{account_id}") == 0  # type: ignore[attr-defined]


def test_the_cli_sets_and_clears_an_accounts_limits(gateway: GatewayServer) -> None:
    account = gateway.account("cli-limits", credits=1000)
    secret = gateway.key(account, "Pro", rpm=100).secret
    shown = as_json(
        modelgate(gateway, "accounts", "update", "cli-limits", "--rpm", "2", "--tpm", "90000", "--json")
    )
    assert (shown["rpm"], shown["tpm"], shown["concurrency"]) == (2, 90000, "none")
    wait_until(
        lambda: gateway.services.account_limits.get(account.id) is not None, "the view reading the change"
    )
    statuses = [s.status for s in asyncio.run(_in_turn(gateway, [secret, secret], 3))]
    assert statuses == [200, 200, 429]
    cleared = as_json(
        modelgate(gateway, "accounts", "update", "cli-limits", "--rpm", "none", "--tpm", "none", "--json")
    )
    assert (cleared["rpm"], cleared["tpm"]) == ("none", "none")
    wait_until(lambda: gateway.services.account_limits.get(account.id) is None, "the view reading the change")
    bad = modelgate(gateway, "accounts", "update", "cli-limits", "--concurrency", "0", ok=False)
    assert "--concurrency" in (bad.stderr + bad.stdout)
    created = as_json(modelgate(gateway, "accounts", "create", "cli-new", "--concurrency", "3", "--json"))
    assert created["concurrency"] == 3
