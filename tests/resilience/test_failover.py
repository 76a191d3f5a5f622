"""Two deployments of one model, one of them failing every request, through a real gateway.

Each request carries a unique marker in its prompt, so the fake upstreams' request logs show
exactly where every request went and how often: "nothing is retried once the client received a
byte" is checked on those logs, not inferred from the outcome.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai

from tests.fakes import FakeUpstream, Fault, Reply
from tests.fakes.upstream import Step
from tests.gateway_server import GatewayServer, running_gateway
from tests.loop_thread import LoopThread
from tests.resilience.harness import ENV, anthropic_provider, openai_provider

MARKER = re.compile(rb"req-(\d{5})")
ROUTING = {
    "backoff_base": 0.001,
    "backoff_max": 0.005,
    # Short, so the dead deployment keeps being probed throughout the run and failover is
    # exercised all along, not only for the first few requests.
    "cooldown": 0.2,
}


@dataclass
class Pair:
    gateway: GatewayServer
    good: FakeUpstream
    bad: FakeUpstream
    pro: str
    nova: str


@contextmanager
def pair(data: Path, bad_step: Step, good_step: Step) -> Iterator[Pair]:
    with LoopThread("fake-upstreams") as fakes:
        good = fakes.start(FakeUpstream(default=good_step))
        bad = fakes.start(FakeUpstream(default=bad_step))
        # Generous timeouts: under load (50 in flight, one process) a tight first-byte timeout
        # would fail healthy attempts too, and such a retry is legitimate (no byte was sent).
        # Here only the dead deployment may fail, so every re-send would be a bug.
        t: dict[str, Any] = {"timeouts": {"connect": 5.0, "first_byte": 15.0, "idle": 15.0, "total": 60.0}}
        providers = [
            anthropic_provider("ant-good", good.base_url, **t),
            anthropic_provider("ant-bad", bad.base_url, **t),
            openai_provider("oai-good", good.base_url, **t),
            openai_provider("oai-bad", bad.base_url, **t),
        ]
        deployments = {
            "aria-sonnet-4.6": [
                {"provider": "ant-good", "upstream_model": "claude-up"},
                {"provider": "ant-bad", "upstream_model": "claude-up"},
            ],
            "nova-5.5": [
                {"provider": "oai-good", "upstream_model": "gpt-up"},
                {"provider": "oai-bad", "upstream_model": "gpt-up"},
            ],
        }
        with running_gateway(
            data,
            env=ENV,
            providers=providers,
            deployments=deployments,
            default_provider="",
            unrouted="hide",
            routing=ROUTING,
        ) as gateway:
            account = gateway.account("load", credits=100_000)
            pro = gateway.key(account, "Pro", rpm=1_000_000).secret
            nova = gateway.key(account, "Nova", rpm=1_000_000).secret
            yield Pair(gateway, good, bad, pro, nova)


async def _one(p: Pair, i: int, sdk: tuple[Any, Any]) -> bool:
    """Request ``i`` (Messages or Chat, whole or streamed); True when the client got a full answer."""
    ant, oai = sdk
    prompt: Any = [{"role": "user", "content": f"req-{i:05d} hello"}]
    stream = i % 2 == 1
    try:
        if i % 4 < 2:
            if not stream:
                msg = await ant.messages.create(model="aria-sonnet-4.6", max_tokens=32, messages=prompt)
                return bool(msg.content) and msg.stop_reason == "end_turn"
            events = [
                e.type
                async for e in await ant.messages.create(
                    model="aria-sonnet-4.6", max_tokens=32, messages=prompt, stream=True
                )
            ]
            return bool(events[-1] == "message_stop")
        if not stream:
            done = await oai.chat.completions.create(model="nova-5.5", messages=prompt)
            return bool(done.choices[0].finish_reason == "stop")
        chunks = [
            c async for c in await oai.chat.completions.create(model="nova-5.5", messages=prompt, stream=True)
        ]
        return any(c.choices and c.choices[0].finish_reason == "stop" for c in chunks)
    except (anthropic.APIError, openai.APIError):
        return False


async def _run(p: Pair, n: int, concurrency: int) -> list[bool]:
    base = p.gateway.base_url
    ant = anthropic.AsyncAnthropic(base_url=base, api_key=p.pro, max_retries=0)
    oai = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=p.nova, max_retries=0)
    gate = asyncio.Semaphore(concurrency)

    async def limited(i: int) -> bool:
        async with gate:
            return await _one(p, i, (ant, oai))

    try:
        return await asyncio.gather(*(limited(i) for i in range(n)))
    finally:
        await ant.close()
        await oai.close()


def _markers(fake: FakeUpstream) -> Counter[int]:
    found: Counter[int] = Counter()
    for rec in fake.requests:
        match = MARKER.search(rec.body)
        assert match is not None
        found[int(match.group(1))] += 1
    return found


def test_one_dead_deployment_costs_at_most_0_1_percent_of_2000_requests(tmp_path: Path) -> None:
    with pair(tmp_path / "data", bad_step=Fault.status(500), good_step=Reply()) as p:
        results = asyncio.run(_run(p, 2000, concurrency=50))
        good, bad = _markers(p.good), _markers(p.bad)
        token = p.gateway.call(p.gateway.management.create_admin_token(None))
        health = httpx.get(
            f"{p.gateway.base_url}/health", headers={"authorization": f"Bearer {token}"}
        ).json()

    # /health names the failing deployments (and only them), without their addresses.
    unhealthy = health["checks"]["unhealthy_deployments"]
    assert {(d["model"], d["provider"]) for d in unhealthy} <= {
        ("aria-sonnet-4.6", "ant-bad"),
        ("nova-5.5", "oai-bad"),
    }
    assert unhealthy and all(d["consecutive_failures"] >= 1 for d in unhealthy)
    assert p.bad.base_url.removeprefix("http://") not in str(health)

    assert sum(results) >= 1998, f"{results.count(False)} of 2000 failed"
    # The healthy upstream saw every request exactly once and answered each to the end: no
    # request was sent again after it had produced a byte.
    assert set(good) == set(range(2000)) and max(good.values()) == 1
    assert all(rec.finished for rec in p.good.requests)
    # The dead one was really in the rotation, and each request tried it at most once.
    assert len(bad) >= 10 and max(bad.values()) == 1


def test_a_stream_that_began_is_never_sent_again(tmp_path: Path) -> None:
    """The bad deployment now fails mid-stream (after the 200 and two events): those clients get
    the in-band error, and the request is never re-sent to the healthy deployment."""
    bad_step = Fault.reset_after(2, then=Reply(event_delay=0.005))
    with pair(tmp_path / "data", bad_step=bad_step, good_step=Reply()) as p:
        results = asyncio.run(_run(p, 400, concurrency=50))
        good, bad = _markers(p.good), _markers(p.bad)

    streamed_to_bad = {i for i in bad if i % 2 == 1}
    assert streamed_to_bad, "the failing deployment served some streams"
    assert not streamed_to_bad & set(good), "a stream that began was re-sent"
    assert all(not results[i] for i in streamed_to_bad)  # in-band error, not a silent success
    assert set(good) | set(bad) == set(range(400)) and max((good + bad).values()) == 1
