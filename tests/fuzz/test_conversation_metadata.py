"""Hostile metadata updates of real conversations near the account's stored-state limit
(``POST /v1/conversations/{id}``): every answer is a 200 or a 4xx in the OpenAI error shape, never
a 5xx; the account's stored bytes never pass ``responses.max_account_bytes``; nothing is charged.

The seeded generator mixes valid metadata of every size up to the 16 x 512 maximum (multi-byte
characters included, which make 512 characters up to 2 KiB), and invalid ones (too many keys,
keys too long, values too long or not strings, not an object)."""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.gateway_server import GatewayServer, running_gateway

LIMIT = 20_000
UPDATES = 300
SEED = int(os.environ.get("MODELGATE_TEST_FUZZ_SEED", "0") or random.randrange(1 << 30))
CHARACTERS = ["v", "é", "€", "𝄞", '"', "\\", "\u0000", " "]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    responses = {"max_account_bytes": LIMIT, "max_object_bytes": 4096}
    with running_gateway(tmp_path_factory.mktemp("metadata") / "data", responses=responses) as server:
        yield server


def _metadata(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.7:  # valid: up to 16 keys of up to 64 characters, values up to 512
        return {
            f"k{n}" + "x" * rng.randrange(60): rng.choice(CHARACTERS) * rng.randrange(513)
            for n in range(rng.randrange(17))
        }
    return rng.choice(
        [
            {str(n): "v" for n in range(17)},
            {"k" * 65: "v"},
            {"k": "v" * 513},
            {"k": "𝄞" * 513},
            {"k": 5},
            {"k": None},
            {"k": {"nested": "v"}},
            ["k", "v"],
            "metadata",
            5,
        ]
    )


def test_hostile_metadata_updates_are_a_200_or_a_4xx_within_the_limit(gateway: GatewayServer) -> None:
    rng = random.Random(SEED)
    account = gateway.account(f"metadata-{time.monotonic_ns()}")
    secret = gateway.key(account, "Nova", rpm=100_000).secret
    headers = {"authorization": f"Bearer {secret}"}
    statuses: Counter[int | str] = Counter()
    with httpx.Client(base_url=gateway.base_url, headers=headers, timeout=30) as client:
        conversations: list[str] = []
        for _ in range(UPDATES):
            if not conversations or rng.random() < 0.2:
                created = client.post("/v1/conversations", json={})
                assert created.status_code in (200, 400), (SEED, created.text)
                if created.status_code == 200:
                    conversations.append(created.json()["id"])
                    continue
            body = {"metadata": _metadata(rng)}
            answer = client.post(f"/v1/conversations/{rng.choice(conversations)}", json=body)
            statuses[answer.status_code] += 1
            assert answer.status_code == 200 or 400 <= answer.status_code < 500, (SEED, body, answer.text)
            if answer.status_code != 200:
                error = orjson.loads(answer.content)["error"]
                assert isinstance(error["message"], str) and isinstance(error["type"], str), answer.text
                assert "param" in error and "code" in error, answer.text
                statuses[error["code"]] += 1
            used = gateway.call(gateway.services.responses.state_bytes(account.id))
            assert used <= LIMIT, (SEED, used)
    # Both outcomes happened: updates were stored, and some were refused at the limit.
    assert statuses[200] > 0 and statuses["stored_state_limit_reached"] > 0, statuses
    after = gateway.call(gateway.services.accounts.get_account(account.id))
    assert after is not None and after.balance_uc == account.balance_uc  # nothing charged
