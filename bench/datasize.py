"""Data-size modes of ``make bench`` (docs/bench.md): ``--keys N`` and ``--usage-records N``.

One gateway on SQLite is measured twice, each figure as a ratio to the first time:

1. small data: the two bench keys and no usage history;
2. after ``--keys N`` keys and ``--usage-records N`` usage records were written straight into its
   database with SQL (fast: one transaction each; the records' rollups rebuilt from them in one
   pass), while it runs, so the key cache takes them up incrementally as it would keys created by
   another process.

Figures: small chat requests' p50/p99 at c=4, alone and while a dashboard polls the reports; each
report call's median latency (``/usage``, ``/usage/daily``, ``/usage/top-keys``,
``/usage/records``, a keys page); the gateway's RSS. The machine's other load skews every figure:
each ratio comes from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench import load as lg
from bench.procs import rss_kib, tree
from bench.targets import GATEWAY_CORE, Target, start_modelgate
from modelgate.storage import rollups

MODELS = ("aria-haiku-4.5", "aria-sonnet-4.5", "aria-opus-4.5")
ENDPOINTS = ("messages", "chat", "responses")
REPORTS = ("/usage", "/usage/daily", "/usage/top-keys", "/usage/records", "/keys?limit=100")
#: Keys the seeded usage records are spread over (at most the keys there are).
RECORD_KEYS = 2_000
DAY = 86_400.0


def seed_keys(db: Path, n: int) -> None:
    """``n`` active keys of the bench account, each with a random digest (no secret exists)."""
    rng = random.Random(34)
    now = time.time()
    with sqlite3.connect(db, timeout=60) as conn:
        (version,) = conn.execute("SELECT COALESCE(MAX(version), 0) FROM api_keys").fetchone()
        rows = (
            (
                f"key_seed{i:012d}",
                1,
                f"seeded {i}",
                "Pro",
                1000,
                rng.randbytes(32),
                "sk-cs4-seed",
                "0000",
                now,
                version + 1 + i,
            )
            for i in range(n)
        )
        conn.executemany(
            "INSERT INTO api_keys (id, account_id, name, grp, rpm, digest, prefix, last4, created_at, version) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
    checkpoint(db)


def seed_usage(db: Path, n: int, keys: int) -> None:
    """``n`` records over the last 30 days, three models and endpoints, ``keys`` keys."""
    rng = random.Random(35)
    now = time.time()
    key_ids = [f"key_seed{i:012d}" for i in range(max(1, min(keys, RECORD_KEYS)))]

    def rows() -> Any:
        step = 30 * DAY / max(n, 1)
        for i in range(n):
            # In time order, as records arrive: index inserts append instead of landing at random.
            at = now - 30 * DAY + (i + rng.random()) * step
            month = datetime.fromtimestamp(at, UTC).strftime("%Y-%m")
            tokens = rng.randrange(100, 5_000)
            yield (f"req_seed{i:012d}", rng.choice(key_ids), 1, rng.choice(ENDPOINTS), rng.choice(MODELS), month,
                   "ok", at, at + 1, tokens, tokens // 4, 0, tokens // 2, tokens * 3)  # fmt: skip

    with sqlite3.connect(db, timeout=60) as conn:
        # Records written by hand add nothing to the rollups (only the ledger's batches do): they
        # are rebuilt from the records in one pass (as `modelgate usage rebuild-rollups` does);
        # the gateway writes nothing meanwhile (no load runs), so its rollups stay exact.
        conn.executemany(
            "INSERT INTO usage_records (request_id, key_id, account_id, endpoint, model, month, status, "
            "created_at, finished_at, input_tokens, output_tokens, cache_creation_tokens, cache_read_tokens, "
            "charged_uc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows(),
        )
        for statement in rollups.rebuild_statements("strftime('%Y-%m-%d', created_at, 'unixepoch')"):
            conn.execute(statement)
    checkpoint(db)


def checkpoint(db: Path) -> None:
    """Copy the seeding's write-ahead log into the database now: left to the gateway, its worker
    would copy hundreds of megabytes on the gateway's core during the measurement."""
    with sqlite3.connect(db, timeout=60) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def operator_token(target: Target, workdir: Path) -> str:
    config, data_dir = workdir / f"{target.name}.toml", workdir / f"{target.name}-data"
    cmd = [sys.executable, "-m", "modelgate", "tokens", "create", "--name", "bench", "--json"]
    done = subprocess.run([*cmd, "--config", str(config), "--data-dir", str(data_dir)],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return str(json.loads(done.stdout)["token"])


async def report_latencies(client: httpx.AsyncClient, rounds: int = 5) -> dict[str, float]:
    """Median milliseconds of each report call (sequential, after one warm-up call)."""
    out: dict[str, float] = {}
    for path in REPORTS:
        await client.get("/admin/api" + path)
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            answer = await client.get("/admin/api" + path)
            times.append(time.perf_counter() - t0)
            answer.raise_for_status()
        out[path] = statistics.median(times) * 1000
    return out


async def poll_reports(client: httpx.AsyncClient, stop: asyncio.Event) -> None:
    """A dashboard left open: the overview's calls, one after another, every 0.5 s."""
    while not stop.is_set():
        for path in REPORTS[:4]:
            await client.get("/admin/api" + path)
        await asyncio.sleep(0.5)


async def small_requests(target: Target, seconds: float) -> lg.Stats:
    (ep,) = [e for e in target.endpoints if e.name == "chat"]
    request = lg.build_request("127.0.0.1", target.port, ep.path, ep.headers, ep.body(False))
    load = lg.Load("chat", "127.0.0.1", target.port, request, b"", None, GATEWAY_CORE)
    (stats,) = await lg.interleaved([load], 4, seconds)
    return stats


async def measure(target: Target, token: str, seconds: float) -> dict[str, float]:
    headers = {"authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{target.port}", headers=headers, timeout=120
    ) as client:
        quiet = await small_requests(target, seconds)
        stop = asyncio.Event()
        poller = asyncio.create_task(poll_reports(client, stop))
        busy = await small_requests(target, seconds)
        stop.set()
        await poller
        reports = await report_latencies(client)
    figures = {
        "p50_ms": lg.pct(quiet.latencies, 0.5) * 1000,
        "p99_ms": lg.pct(quiet.latencies, 0.99) * 1000,
        "p99_polled_ms": lg.pct(busy.latencies, 0.99) * 1000,
        "rss_mib": rss_kib(tree(target.proc.pid)) / 1024,
    }
    figures.update({f"report {path} ms": ms for path, ms in reports.items()})
    return figures


async def wait_for_keys(target: Target, token: str, expected: int, timeout: float = 600) -> float:
    """Seconds until the gateway's key cache holds ``expected`` keys (its metrics say so)."""
    t0 = time.perf_counter()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{target.port}", timeout=30) as client:
        while time.perf_counter() - t0 < timeout:
            text = (await client.get("/metrics", headers={"authorization": f"Bearer {token}"})).text
            for line in text.splitlines():
                if line.startswith("modelgate_key_cache_keys ") and float(line.split()[1]) >= expected:
                    return time.perf_counter() - t0
            await asyncio.sleep(0.2)
    raise SystemExit(f"bench: the key cache did not reach {expected} keys in {timeout:.0f} s")


async def main_async(args: argparse.Namespace) -> None:
    from bench.run import Upstream  # the fake upstream of the main bench

    with tempfile.TemporaryDirectory(prefix="modelgate-bench-data-") as tmp:
        workdir = Path(tmp)
        upstream = Upstream(workdir)
        target = start_modelgate(upstream.port, workdir, name="modelgate-datasize")
        try:
            token = operator_token(target, workdir)
            print(f"[datasize] small data: 2 keys, no usage records ({args.seconds:.0f} s per figure)")
            small = await measure(target, token, args.seconds)
            db = workdir / f"{target.name}-data" / "modelgate.db"
            if args.keys:
                t0 = time.perf_counter()
                seed_keys(db, args.keys)
                print(f"[datasize] wrote {args.keys:,} keys in {time.perf_counter() - t0:.1f} s")
                loaded = await wait_for_keys(target, token, args.keys + 2)
                print(f"[datasize] the running gateway's key cache took them up in {loaded:.1f} s")
            if args.usage_records:
                t0 = time.perf_counter()
                seed_usage(db, args.usage_records, args.keys)
                print(
                    f"[datasize] wrote {args.usage_records:,} usage records in {time.perf_counter() - t0:.1f} s"
                )
            label = f"{args.keys:,} keys, {args.usage_records:,} usage records"
            print(f"[datasize] {label}")
            large = await measure(target, token, args.seconds)
        finally:
            target.stop()
            upstream.stop()
    print(f"\n== data size: {label} vs small data (one run; other load on the machine skews both)")
    print(f"  {'figure':34} {'small':>10} {'large':>10} {'ratio':>7}")
    for name, value in small.items():
        other = large[name]
        ratio = other / value if value else float("nan")
        print(f"  {name:34} {value:10.2f} {other:10.2f} {ratio:7.2f}")


def run(args: argparse.Namespace) -> None:
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("bench: needs at least 2 cores")
    asyncio.run(main_async(args))
