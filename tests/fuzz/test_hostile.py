"""Hostile requests against a real ``modelgate serve`` (issue #11): never a 5xx, every error body
in the wire format of its path, nothing charged for a refused request, the ledger exact after,
and memory back near where it started.

``make test`` sends 2,000 requests; ``make fuzz`` sends 20,000 (``MODELGATE_TEST_FUZZ_COUNT``) with
another seed each run unless ``MODELGATE_TEST_FUZZ_SEED`` is set. A failure prints the request.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.fuzz.hostile import METRICS_TOKEN, Hostile, hostile_requests
from tests.hardening.process import GatewayProcess, assert_ledger_invariant, run
from tests.loop_thread import LoopThread

COUNT = int(os.environ.get("MODELGATE_TEST_FUZZ_COUNT", "2000"))
SEED = int(os.environ.get("MODELGATE_TEST_FUZZ_SEED", "0") or random.randrange(1 << 30))
CONCURRENCY = 8


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def check_shape(item: Hostile, response: httpx.Response) -> None:
    """An error body parses and has the shape of the path's wire format."""
    if item.shape == "none" or item.method == "HEAD":
        return
    body = orjson.loads(response.content)
    if item.shape == "google":
        error = body["error"]
        assert set(body) == {"error"} and error["code"] == response.status_code, body
        assert isinstance(error["message"], str) and isinstance(error["status"], str), body
    elif item.shape == "messages":
        assert body["type"] == "error" and isinstance(body["error"]["message"], str), body
        assert isinstance(body["error"]["type"], str)
    elif item.shape == "openai":
        error = body["error"]
        assert isinstance(error["message"], str) and isinstance(error["type"], str), body
        assert "param" in error and "code" in error, body
    else:
        assert isinstance(body["error"]["type"], str) and isinstance(body["error"]["message"], str), body


def check_success(response: httpx.Response) -> None:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for block in response.content.split(b"\n\n"):
            for line in block.split(b"\n"):
                if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
                    orjson.loads(line[5:])
    elif response.headers.get("content-type", "").startswith("application/json"):
        orjson.loads(response.content)


async def send_all(gateway: GatewayProcess, items: list[Hostile]) -> list[tuple[Hostile, int, str]]:
    queue: asyncio.Queue[Hostile] = asyncio.Queue()
    for item in items:
        queue.put_nowait(item)
    results: list[tuple[Hostile, int, str]] = []

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            item = queue.get_nowait()
            try:
                response = await client.request(
                    item.method, item.path, headers=item.headers, content=item.body or None
                )
            except httpx.HTTPError as exc:
                raise AssertionError(f"transport error {exc!r} for {item}") from exc
            status = response.status_code
            assert status < 500, f"{status} {response.text[:500]} for {item}"
            try:
                if status >= 400:
                    check_shape(item, response)
                else:
                    check_success(response)
            except (orjson.JSONDecodeError, KeyError, TypeError, AssertionError) as exc:
                raise AssertionError(
                    f"{status} body not in its format ({exc!r}): {response.content[:300]!r} for {item}"
                ) from exc
            results.append((item, status, response.headers.get("request-id", "")))

    limits = httpx.Limits(max_connections=CONCURRENCY)
    async with httpx.AsyncClient(base_url=gateway.base_url, limits=limits, timeout=60) as client:
        await asyncio.gather(*(worker(client) for _ in range(CONCURRENCY)))
    return results


def upstreams_toml(chat: str, messages: str) -> str:
    """Two translated routes besides the simulator's passthrough: aria-sonnet-4.6 on a Chat-only
    upstream (Messages clients translated to Chat) and nova-5.6-sol on two deployments of a
    Messages upstream (Chat and Responses clients translated to Messages; two, so session
    affinity keys its requests)."""
    return f"""
[[providers]]
name = "simulator"
kind = "simulator"

[[providers]]
name = "compat"
kind = "openai-compatible"
base_url = "{chat}"

[[providers]]
name = "anthropic"
kind = "anthropic"
base_url = "{messages}"
api_key_env = "FUZZ_ANTHROPIC_KEY"

[[deployments."aria-sonnet-4.6"]]
provider = "compat"
upstream_model = "llama-fuzz"

[[providers]]
name = "anthropic-b"
kind = "anthropic"
base_url = "{messages}"
api_key_env = "FUZZ_ANTHROPIC_KEY"

[[deployments."nova-5.6-sol"]]
provider = "anthropic"
upstream_model = "claude-fuzz"

[[deployments."nova-5.6-sol"]]
provider = "anthropic-b"
upstream_model = "claude-fuzz"
"""


def test_hostile_requests_are_answered_in_format_and_never_charged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    print(f"fuzz: {COUNT} requests, seed {SEED} (MODELGATE_TEST_FUZZ_SEED={SEED} reproduces them)")
    loop = LoopThread("fake-upstreams")
    chat = loop.start(FakeUpstream(dialect="chat"))
    messages = loop.start(FakeUpstream(dialect="messages"))
    # The loopback peer is a trusted proxy, so the restricted key's X-Forwarded-For chains are read.
    server = {"offload_body_bytes": 65536, "max_in_flight": 10_000, "trusted_proxies": "127.0.0.1/32"}
    gateway = GatewayProcess(
        tmp_path,
        upstreams_toml(chat.base_url, messages.base_url),
        server=server,
        metrics={"token": METRICS_TOKEN},
    )
    monkeypatch.setenv("FUZZ_ANTHROPIC_KEY", "sk-ant-fuzz-0123456789abcdefghij")
    with loop, gateway:
        seeded = gateway.seed(credits=10_000, groups=("Basic", "Nova"))

        async def issue_admin(m: Any) -> str:
            account = await m.account(seeded.account_id)
            restricted = await m.create_key(account, "Basic", rpm=1_000_000, allowed_ips=["203.0.113.0/24"])
            expired = await m.create_key(account, "Basic", expires_at=1_000_000_000.0)
            seeded.keys |= {"Restricted": restricted.secret, "Expired": expired.secret}
            return str(await m.create_admin_token(None))

        from modelgate.cli.context import Options, with_management

        admin = with_management(Options(gateway.config, gateway.data_dir), issue_admin)
        gateway.start()
        assert gateway.proc is not None
        stream = hostile_requests(seeded.keys, admin, SEED)
        warm = [next(stream) for _ in range(min(300, COUNT))]
        results = run(send_all(gateway, warm))
        start_rss = rss_kib(gateway.proc.pid)
        results += run(send_all(gateway, [next(stream) for _ in range(COUNT - len(warm))]))
        end_rss = rss_kib(gateway.proc.pid)
        statuses = Counter(status for _, status, _ in results)
        print(f"fuzz: statuses {dict(sorted(statuses.items()))}; RSS {start_rss} -> {end_rss} KiB")
        # A stream is settled after its last byte (and a kept Responses answer takes a write just
        # before it): let the last ones settle before the hard stop, which would strand them.
        deadline = time.monotonic() + 15
        while gateway.ledger(seeded.account_id)["pending"] and time.monotonic() < deadline:
            time.sleep(0.05)
        gateway.kill()
        loop.close()  # stops both fakes; their request logs stay readable
        translated = len(chat.requests) + len(messages.requests)
        print(f"fuzz: {translated} requests reached the translated routes' upstreams")

        assert translated > 0 and len(results) == COUNT and all(status < 500 for status in statuses)
        refused = {request_id for item, status, request_id in results if status >= 400 and request_id}
        with gateway.db() as db:
            charged_ids = {
                row[0] for row in db.execute("SELECT request_id FROM usage_records WHERE charged_uc > 0")
            }
        assert not refused & charged_ids, refused & charged_ids
        with gateway.db() as db:  # every hostile upstream change was refused: nothing stored
            stored = db.execute(
                "SELECT (SELECT COUNT(*) FROM upstream_entries) + (SELECT COUNT(*) FROM model_prices)"
            )
            assert stored.fetchone()[0] == 0
        ledger = gateway.ledger(seeded.account_id)
        assert ledger["pending"] == 0
        assert_ledger_invariant(ledger)
        assert end_rss <= start_rss * 1.2 + 8 * 1024, (start_rss, end_rss)
