"""A provider and deployments added through one instance's admin API serve the next requests on
every instance sharing the PostgreSQL database (each polls the change generation; Redis is
there as in production but not needed for it); prices changed and scheduled there charge every
instance alike; sealed credentials open on every instance (they share the secret)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream, Reply
from tests.loop_thread import LoopThread
from tests.multi.conftest import Cluster
from tests.polling import wait_until
from tests.secret_scan import SCANNER

SECRET = "sk-ant-cluster-credential-" + "c" * 24
SCANNER.register(SECRET)
HELLO = [{"role": "user", "content": "who answers?"}]


@pytest.fixture
def fake() -> Iterator[FakeUpstream]:
    with LoopThread("cluster-upstream") as loop:
        yield loop.start(
            FakeUpstream(default=Reply(text="from the api provider", input_tokens=1000, output_tokens=100))
        )


def ask(cluster: Cluster, index: int, secret: str) -> dict[str, Any]:
    response = httpx.post(
        f"{cluster[index].base_url}/v1/chat/completions",
        json={"model": "aria-haiku-4.5", "max_tokens": 100, "messages": HELLO},
        headers={"authorization": f"Bearer {secret}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_a_change_on_one_instance_serves_the_next_requests_of_the_other(
    make_cluster: Any, fake: FakeUpstream
) -> None:
    with make_cluster(instances=2) as cluster:
        account = cluster.account("acme", 100_000_000)
        _, secret = cluster.key(account, "Basic")
        token = cluster.admin_token(0)
        api = httpx.Client(
            base_url=cluster[0].base_url + "/admin/api", headers={"authorization": f"Bearer {token}"}
        )
        with api:
            made = api.post(
                "/providers",
                json={"name": "api-ant", "kind": "anthropic", "base_url": fake.base_url, "api_key": SECRET},
            )
            assert made.status_code == 201, made.text
            routed = api.put(
                "/models/aria-haiku-4.5/deployments",
                json={"deployments": [{"provider": "api-ant", "upstream_model": "claude-new", "weight": 3}]},
            )
            assert routed.status_code == 200, routed.text
            # The instance that made the change applied it before answering.
            assert ask(cluster, 0, secret)["choices"][0]["message"]["content"] == "from the api provider"
            wait_until(
                lambda: (
                    ask(cluster, 1, secret)["choices"][0]["message"]["content"] == "from the api provider"
                ),
                "the second instance routing to the provider added on the first",
            )
            assert all(r.headers["x-api-key"] == SECRET for r in fake.requests)
            # A price changed on instance 0 is charged by instance 1 from then on.
            priced = api.put("/models/aria-haiku-4.5/price", json={"input": "2", "output": "10"})
            assert priced.status_code == 200, priced.text
            assert priced.json()["current"]["input"] == "2"

            def balance() -> tuple[int, int]:
                found = cluster[1].call(cluster[1].services.accounts.get_account(account.id))
                assert found is not None
                return found.balance_uc, found.reserved_uc

            def charged_by_second() -> int:
                before = balance()[0]
                ask(cluster, 1, secret)
                wait_until(lambda: balance()[1] == 0, "the request settled")
                return before - balance()[0]

            # 1,000 input tokens at 2 credits/M plus 100 output tokens at 10 credits/M.
            wait_until(
                lambda: charged_by_second() == 2 * 1000 + 10 * 100, "instance 1 charging the new price"
            )
            for text in (made.text, routed.text, priced.text, api.get("/providers").text):
                assert SECRET not in text
