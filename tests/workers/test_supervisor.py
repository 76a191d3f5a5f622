"""The supervising parent of ``modelgate serve --workers N``: SIGTERM drains every worker, a second
signal cuts them, the in-flight cap is the instance's, workers follow a parent that dies, and
``server.workers`` is validated."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from modelgate.config import ConfigError, load_settings
from tests.gateway_server import free_port
from tests.hardening.process import assert_ledger_invariant, run
from tests.hardening.test_shutdown import ask, headers, stream_ending
from tests.workers.harness import WorkersGateway, pinned_clients

GRACE = 3
SLOW = {"tokens_per_second": 20.0, "reply_words": 400}


async def stream_on(
    client: httpx.AsyncClient, fmt: str, keys: dict[str, str], started: asyncio.Queue[str]
) -> str:
    path, body = ask(fmt, stream=True, max_tokens=400)
    received = b""
    async with client.stream("POST", path, json=body, headers=headers(fmt, keys)) as response:
        assert response.status_code == 200
        async for chunk in response.aiter_bytes():
            if not received:
                started.put_nowait(fmt)
            received += chunk
    return stream_ending(fmt, received)


def test_sigterm_drains_every_worker(tmp_path: Path) -> None:
    sections: dict[str, Any] = {"server": {"shutdown_grace_seconds": GRACE, "keep_alive_seconds": 60}}
    with WorkersGateway(tmp_path, simulator=SLOW, **sections) as gateway:
        seeded = gateway.seed()
        gateway.start()

        async def scenario() -> tuple[list[tuple[int, str]], list[tuple[int, int, str]], int]:
            formats = ("messages", "chat", "responses")
            streamers = await pinned_clients(gateway, 10)
            wholes = await pinned_clients(gateway, 10)
            started: asyncio.Queue[str] = asyncio.Queue()
            try:
                streams = [
                    asyncio.create_task(stream_on(c, formats[i % 3], seeded.keys, started))
                    for i, (_, c) in enumerate(streamers)
                ]
                for _ in streams:  # every stream is under way on both workers before the signal
                    await asyncio.wait_for(started.get(), timeout=60)

                async def whole(i: int, client: httpx.AsyncClient) -> tuple[int, str]:
                    # Half cannot finish within the grace (400 tokens at 20/s), half can.
                    path, body = ask(formats[i % 3], stream=False, max_tokens=400 if i % 2 else 20)
                    response = await client.post(
                        path, json=body, headers=headers(formats[i % 3], seeded.keys)
                    )
                    return response.status_code, response.text

                calls = [asyncio.create_task(whole(i, c)) for i, (_, c) in enumerate(wholes)]
                await asyncio.sleep(0.3)
                gateway.signal(signal.SIGTERM)
                endings = await asyncio.gather(*streams)
                answers = await asyncio.gather(*calls)
                code = await asyncio.to_thread(gateway.wait, GRACE + 20)
            finally:
                for _, client in [*streamers, *wholes]:
                    await client.aclose()
            return (
                [(w, e) for (w, _), e in zip(streamers, endings, strict=True)],
                [(w, s, t) for (w, _), (s, t) in zip(wholes, answers, strict=True)],
                code,
            )

        streams, wholes, code = run(scenario())
        assert code == 0
        assert {e for _, e in streams} == {"in_band_error"} and {w for w, _ in streams} == {0, 1}
        assert sorted(s for _, s, _ in wholes) == [200] * 10 + [503] * 10
        assert all("shutting down" in t for _, s, t in wholes if s == 503)
        ledger = gateway.ledger(seeded.account_id)
        assert ledger["pending"] == 0 and ledger["records"] == 40
        assert_ledger_invariant(ledger)
        assert gateway.statuses() == {"shutdown": 30, "ok": 10}


def test_a_second_signal_cuts_every_worker_at_once(tmp_path: Path) -> None:
    sections: dict[str, Any] = {"server": {"shutdown_grace_seconds": 60, "keep_alive_seconds": 60}}
    with WorkersGateway(tmp_path, simulator=SLOW, **sections) as gateway:
        seeded = gateway.seed()
        gateway.start()

        async def scenario() -> list[str]:
            clients = await pinned_clients(gateway, 5)
            started: asyncio.Queue[str] = asyncio.Queue()
            try:
                streams = [
                    asyncio.create_task(stream_on(c, "chat", seeded.keys, started)) for _, c in clients
                ]
                for _ in streams:
                    await asyncio.wait_for(started.get(), timeout=60)
                gateway.signal(signal.SIGTERM)
                await asyncio.sleep(0.5)
                gateway.signal(signal.SIGINT)  # Ctrl-C counts as the second signal, once
                endings = await asyncio.gather(*streams)
                assert await asyncio.to_thread(gateway.wait, 20) == 0  # far less than the 60 s grace
            finally:
                for _, client in clients:
                    await client.aclose()
            return list(endings)

        assert set(run(scenario())) == {"in_band_error"}
        ledger = gateway.ledger(seeded.account_id)
        assert ledger["pending"] == 0 and ledger["records"] == 10
        assert_ledger_invariant(ledger)


def test_the_in_flight_cap_is_shared_by_the_workers(tmp_path: Path) -> None:
    sections: dict[str, Any] = {"server": {"max_in_flight": 3, "keep_alive_seconds": 60}}
    with WorkersGateway(tmp_path, simulator={"latency_ms": 1500}, **sections) as gateway:
        seeded = gateway.seed()
        gateway.start()

        async def scenario() -> tuple[list[int], list[tuple[int, int]]]:
            clients = await pinned_clients(gateway, 3)
            path, body = ask("messages", stream=False, max_tokens=5)
            hdrs = headers("messages", seeded.keys)
            try:
                # Two slow requests on worker 0 and one on worker 1 fill the instance's cap of 3.
                slow_clients = [c for w, c in clients if w == 0][:2] + [c for w, c in clients if w == 1][:1]
                slow = [asyncio.create_task(c.post(path, json=body, headers=hdrs)) for c in slow_clients]
                await asyncio.sleep(0.5)
                spare = [(w, c) for w, c in clients if c not in slow_clients]
                refused = await asyncio.gather(*(c.post(path, json=body, headers=hdrs) for _, c in spare))
                done = await asyncio.gather(*slow)
            finally:
                for _, client in clients:
                    await client.aclose()
            return [r.status_code for r in done], [
                (w, r.status_code) for (w, _), r in zip(spare, refused, strict=True)
            ]

        done, refused = run(scenario())
        assert done == [200, 200, 200]
        # Worker 1 held only one request, yet refuses: the cap counts both workers' requests.
        assert sorted(refused) == [(0, 429), (1, 429), (1, 429)]


def test_workers_stop_when_their_parent_is_killed(tmp_path: Path) -> None:
    with WorkersGateway(tmp_path, server={"shutdown_grace_seconds": 1}) as gateway:
        gateway.seed()
        gateway.start()
        pids = gateway.wait_for_workers()
        assert gateway.proc is not None
        os.kill(gateway.proc.pid, signal.SIGKILL)  # the parent alone, not its process group
        gateway.proc.wait(10)
        deadline = time.monotonic() + 15
        while any(_alive(pid) for pid in pids.values()):
            assert time.monotonic() < deadline, "a worker outlived its parent"
            time.sleep(0.05)
        # Each noticed (the kernel's SIGTERM drains it; its rate-limit link to the parent broke).
        assert gateway.log.read_text().count("shared rate-limit buckets are unreachable") == 2


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False


def test_workers_setting() -> None:
    assert load_settings(None, environ={}).server.worker_count == 1
    auto = load_settings(None, environ={"MODELGATE_SERVER__WORKERS": "auto"}).server
    assert auto.worker_count == len(os.sched_getaffinity(0))
    assert load_settings(None, environ={"MODELGATE_SERVER__WORKERS": "3"}).server.worker_count == 3
    for bad in ("0", "-2", "100000", "many"):
        with pytest.raises(ConfigError, match=r"server\.workers"):
            load_settings(None, environ={"MODELGATE_SERVER__WORKERS": bad})


def _requests_total(port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("modelgate_requests_total{")
    )


def test_each_worker_serves_its_own_metrics_port(tmp_path: Path) -> None:
    port = free_port(span=2)  # metrics.port + i for worker i, handed out to nothing else
    sections: dict[str, Any] = {"metrics": {"port": port}, "server": {"keep_alive_seconds": 60}}
    with WorkersGateway(tmp_path, **sections) as gateway:
        seeded = gateway.seed()
        gateway.start()

        async def scenario() -> None:
            clients = await pinned_clients(gateway, 1)
            path, body = ask("messages", stream=False, max_tokens=5)
            try:
                worker0 = next(c for w, c in clients if w == 0)
                for _ in range(3):
                    response = await worker0.post(path, json=body, headers=headers("messages", seeded.keys))
                    assert response.status_code == 200
            finally:
                for _, client in clients:
                    await client.aclose()

        run(scenario())
        # Worker i counts what it served, on metrics.port + i.
        assert _requests_total(port) == 3 and _requests_total(port + 1) == 0
        # And its request records say which worker wrote them (written within 0.25 s).
        deadline = time.monotonic() + 10
        while True:
            lines = gateway.log.read_text().splitlines()
            records = [orjson.loads(line) for line in lines if '"msg":"request"' in line]
            served = [r["worker"] for r in records if r["endpoint"] == "messages"]
            if len(served) == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert served == [0, 0, 0]
