"""The acceptance scenario of issue #31's rate side, shared by every backend: 500 requests in
flight at once, mixed endpoints (Messages and Chat Completions, the two an aria key serves), half streaming, some
clients hanging up mid-stream, from two keys of one account. Key A has tpm and max_concurrency of
its own; the account has both too, binding A and B together. The fake upstream measures how many
requests it answers at once; the usage log says how many tokens were used."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from modelgate.storage.base import AccountLimits, UsageRecord
from tests.billing.helpers import PATHS, body_for, headers_for

MODEL = "aria-haiku-4.5"
REQUESTS = 500
ACCOUNT_TPM = 2500
ACCOUNT_CONCURRENCY = 8
ACCOUNT = AccountLimits(tpm=ACCOUNT_TPM, max_concurrency=ACCOUNT_CONCURRENCY)
KEY_A_TPM = 1500
KEY_A_CONCURRENCY = 5
#: Each of the ``REQUESTS`` clients tries this many times (a short pause after a 429), so slots
#: and tokens are taken again as they come back and both limits bind.
ATTEMPTS = 3
PAUSE_AFTER_REFUSAL = 0.1
FORMATS = ("messages", "chat")
#: One request in this many hangs up after the first bytes of its stream.
HANG_UP_EVERY = 10
#: The fake upstream's answers wait this long before their first byte, so requests overlap.
FIRST_BYTE_SECONDS = 0.2


@dataclass
class Outcome:
    statuses: list[int] = field(default_factory=list)
    limits: list[str] = field(default_factory=list)
    hung_up: int = 0


async def _client(
    client: httpx.AsyncClient, base_url: str, fmt: str, secret: str, n: int, out: Outcome
) -> None:
    for _ in range(ATTEMPTS):
        if await _one(client, base_url, fmt, secret, n, out):
            return
        await asyncio.sleep(PAUSE_AFTER_REFUSAL)


async def _one(client: httpx.AsyncClient, base_url: str, fmt: str, secret: str, n: int, out: Outcome) -> bool:
    """One request; whether it was served."""
    stream = n % 2 == 1
    body = body_for(fmt, MODEL, f"hello {n}", 20, stream=stream)
    url = base_url + PATHS[fmt]
    async with client.stream("POST", url, json=body, headers=headers_for(fmt, secret)) as response:
        out.statuses.append(response.status_code)
        if response.status_code != 200:
            await response.aread()
            out.limits.append(response.headers.get("x-modelgate-limit", ""))
            return False
        if stream and n % HANG_UP_EVERY == 1:
            async for _ in response.aiter_bytes():
                out.hung_up += 1
                return True  # leaving the block closes the connection mid-stream
        await response.aread()
        return True


async def burst(base_urls: Sequence[str], secrets: Sequence[str]) -> Outcome:
    """``REQUESTS`` clients at once, round robin over the instances, keys and formats."""
    out = Outcome()
    limits = httpx.Limits(max_connections=REQUESTS, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        urls, keys, fmts = itertools.cycle(base_urls), itertools.cycle(secrets), itertools.cycle(FORMATS)
        jobs = [_client(client, next(urls), next(fmts), next(keys), n, out) for n in range(REQUESTS)]
        await asyncio.gather(*jobs)
    return out


def tokens(record: UsageRecord) -> int:
    return int(
        record.input_tokens + record.output_tokens + record.cache_creation_tokens + record.cache_read_tokens
    )


def max_in_any_minute(records: Sequence[UsageRecord]) -> int:
    """The most tokens any rolling 60 s window of these records holds."""
    used = sorted((r.created_at, tokens(r)) for r in records)
    return max((sum(n for at, n in used if t - 60 < at <= t) for t, _ in used), default=0)


def check(out: Outcome, upstream_max_in_flight: int, records_a: list[Any], records_all: list[Any]) -> None:
    """What must hold whatever the backend."""
    assert len(out.statuses) >= REQUESTS
    assert set(out.statuses) <= {200, 429}, sorted(set(out.statuses))
    assert out.statuses.count(200) >= ACCOUNT_CONCURRENCY
    assert set(out.limits) == {"tpm", "concurrency"}, set(out.limits)
    assert out.hung_up >= 1
    # In flight at every instant, as the upstream saw it: never above the account's limit.
    assert 1 <= upstream_max_in_flight <= ACCOUNT_CONCURRENCY
    # Tokens in any 60 s window: never above the key's tpm, nor the account's for both keys.
    ok_a = [r for r in records_a if r.status == "ok"]
    ok_all = [r for r in records_all if r.status == "ok"]
    assert ok_all and max_in_any_minute(ok_a) <= KEY_A_TPM
    assert max_in_any_minute(ok_all) <= ACCOUNT_TPM
    # Refused requests were charged nothing.
    assert all(r.charged_uc == 0 for r in records_all if r.status.startswith("refused"))
