"""Deployment modes (``make bench ARGS="--workers 2 --store postgresql"``): what one request and one
streamed chunk cost in CPU, summed over every process involved, so each mode is one number.

- ``sqlite``: the default single process (the main bench's target, measured again this way);
- ``workers N``: ``modelgate serve --workers N`` on SQLite, pinned to cores 0..N-1 (on a 2-core
  machine core 1 is shared with the load generator: per busy core is the figure to compare);
- ``postgresql + redis``: one gateway process on core 0 with the ledger in PostgreSQL and the
  rate-limit windows in Redis, both started by ``scripts/services.sh`` (``bench/run.sh`` does it)
  and pinned to core 1.

For each mode and endpoint: whole requests at c = 16 (requests per busy core, and CPU µs per
request of each part: gateway processes, PostgreSQL's server processes, Redis) and paced streams of
50 and 2 chunks (CPU µs per chunk, each part). The CPU of a part is its process tree (every
thread's run time) plus the children it reaped; each part's share of the measured total is taken
over the same calls.
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from bench import load as lg
from bench.procs import cpu_ns, tree, tree_cpu_ns
from bench.targets import Target, start_modelgate

MARKER = b"w0000"
SERVICE_CORE = 1
DATABASE_ENV = "MODELGATE_TEST_DATABASE_URL"
REDIS_ENV = "MODELGATE_TEST_REDIS_URL"


class Configurable(Protocol):
    def configure(self, chunks: int = 50, delay_ms: float = 0.0, hold_ms: float = 0.0) -> None: ...


@dataclass
class Part:
    name: str
    cpu: Callable[[], int]


def parts_of(target: Target, services: dict[str, int] | None = None, *, workers: bool = False) -> list[Part]:
    """The gateway's process tree (with ``workers``: the supervising parent and its workers
    apart), then each service's."""
    pid = target.proc.pid
    if workers:
        parts = [
            Part("supervisor", lambda: cpu_ns([pid])),
            Part("workers", lambda: tree_cpu_ns(pid) - cpu_ns([pid])),
        ]
    else:
        parts = [Part("gateway", lambda: tree_cpu_ns(pid))]
    for name, service_pid in (services or {}).items():
        parts.append(Part(name, functools.partial(tree_cpu_ns, service_pid)))
    return parts


async def _measured(
    parts: list[Part], make: Callable[[Callable[[], int]], lg.Load], concurrency: int, seconds: float
) -> tuple[lg.Stats, dict[str, float]]:
    """The load ``make(total_cpu)`` run at ``concurrency``, and each part's share of the CPU
    spent meanwhile."""
    before = {p.name: p.cpu() for p in parts}
    (result,) = await lg.interleaved([make(lambda: sum(p.cpu() for p in parts))], concurrency, seconds)
    spent = {p.name: p.cpu() - before[p.name] for p in parts}
    total = sum(spent.values()) or 1
    return result, {name: value / total for name, value in spent.items()}


async def bench_mode(
    name: str, target: Target, parts: list[Part], upstream: Configurable, seconds: float, endpoints: list[str]
) -> dict[str, Any]:
    out: dict[str, Any] = {"mode": name, "whole": {}, "stream": {}}
    eps = [ep for ep in target.endpoints if ep.name in endpoints]

    def load(ep: Any, stream: bool, cpu: Callable[[], int]) -> lg.Load:
        req = lg.build_request("127.0.0.1", target.port, ep.path, ep.headers, ep.body(stream))
        return lg.Load(f"{name} {ep.name}", "127.0.0.1", target.port, req, MARKER if stream else b"", cpu)

    upstream.configure()
    for ep in eps:
        print(f"[mode {name}] {ep.name} whole c=16")
        st, shares = await _measured(parts, functools.partial(load, ep, False), 16, seconds)
        per_request = st.cpu_ns / 1000 / max(st.completed, 1)
        out["whole"][ep.name] = {
            "rps": st.rps,
            "rps_per_core": st.rps_per_core,
            "errors": st.errors,
            "cpu_us_per_request": per_request,
            "parts_us": {part: share * per_request for part, share in shares.items()},
        }
    for ep in eps:
        print(f"[mode {name}] {ep.name} paced streams")
        per_stream: dict[int, tuple[float, dict[str, float]]] = {}
        for chunks in (50, 2):
            upstream.configure(chunks=chunks, delay_ms=2)
            st, shares = await _measured(parts, functools.partial(load, ep, True), 2, seconds)
            total = st.cpu_ns / 1000 / max(st.completed, 1)
            per_stream[chunks] = (total, {part: share * total for part, share in shares.items()})
        upstream.configure()
        (t50, p50), (t2, p2) = per_stream[50], per_stream[2]
        out["stream"][ep.name] = {
            "cpu_us_per_chunk": (t50 - t2) / 48,
            "parts_us": {part: (p50[part] - p2[part]) / 48 for part in p50},
        }
    return out


# --- PostgreSQL and Redis, started by scripts/services.sh ------------------------------------------


def service_urls() -> tuple[str, str]:
    database, redis = os.environ.get(DATABASE_ENV, ""), os.environ.get(REDIS_ENV, "")
    if not database or not redis:
        raise SystemExit(
            f"bench --store postgresql: {DATABASE_ENV} and {REDIS_ENV} are not set; run it through "
            "`make bench` (bench/run.sh starts PostgreSQL and Redis with scripts/services.sh)"
        )
    return database, redis


async def create_database(admin_url: str) -> str:
    import asyncpg

    name = f"bench_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(admin_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    parts = urlsplit(admin_url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


async def service_pids(database_url: str, redis_url: str) -> dict[str, int]:
    """The PostgreSQL server (postmaster) and redis-server processes behind the two URLs."""
    import asyncpg
    import redis.asyncio as aioredis

    conn = await asyncpg.connect(database_url)
    try:
        data_directory = await conn.fetchval("SHOW data_directory")
    finally:
        await conn.close()
    postmaster = int((Path(data_directory) / "postmaster.pid").read_text().split()[0])
    client = aioredis.Redis.from_url(redis_url)
    try:
        redis_pid = int((await client.info("server"))["process_id"])
    finally:
        await client.aclose()
    return {"postgresql": postmaster, "redis": redis_pid}


def pin_tree(pid: int, core: int) -> None:
    """Every thread of ``pid`` and its descendants on ``core`` (new backends inherit it)."""
    for process in tree(pid):
        try:
            threads = os.listdir(f"/proc/{process}/task")
        except OSError:
            continue
        for thread in threads:
            try:
                os.sched_setaffinity(int(thread), {core})
            except OSError:
                continue


async def start_postgresql_mode(upstream_port: int, workdir: Path) -> tuple[Target, dict[str, int]]:
    admin_url, redis_url = service_urls()
    database_url = await create_database(admin_url)
    pids = await service_pids(database_url, redis_url)
    for pid in pids.values():
        pin_tree(pid, SERVICE_CORE)
    target = await asyncio.to_thread(
        start_modelgate,
        upstream_port,
        workdir,
        name="modelgate-postgresql",
        database_url=database_url,
        redis_url=redis_url,
    )
    return target, pids


async def interleaved_store_cost(
    sqlite: Target, postgresql: Target, services: dict[str, int], seconds: float, endpoints: list[str]
) -> dict[str, dict[str, float]]:
    """CPU per whole request (c = 16) of the SQLite gateway and of the PostgreSQL + Redis one, in
    alternating 0.5 s slices (``bench.load.interleaved``), so drift of the machine hits both alike:
    the PostgreSQL budget's ratio from one measurement. Each gateway's CPU is taken over its own
    slices; PostgreSQL's and Redis's over the whole measurement (their idle time during the SQLite
    slices included: the ratio errs against the PostgreSQL mode, never for it)."""
    out: dict[str, dict[str, float]] = {}
    for name in endpoints:
        loads = []
        for target in (sqlite, postgresql):
            ep = next(e for e in target.endpoints if e.name == name)
            req = lg.build_request("127.0.0.1", target.port, ep.path, ep.headers, ep.body(False))
            cpu = functools.partial(tree_cpu_ns, target.proc.pid)
            loads.append(lg.Load(f"{target.name} {name}", "127.0.0.1", target.port, req, b"", cpu))
        print(f"[modes] {name} whole c=16, SQLite and PostgreSQL + Redis interleaved")
        before = sum(tree_cpu_ns(pid) for pid in services.values())
        a, b = await lg.interleaved(loads, 16, seconds)
        spent = sum(tree_cpu_ns(pid) for pid in services.values()) - before
        ours = a.cpu_ns / 1000 / max(a.completed, 1)
        theirs = (b.cpu_ns + spent) / 1000 / max(b.completed, 1)
        out[name] = {"sqlite_us": ours, "postgresql_us": theirs, "ratio": theirs / ours}
    return out


# --- reporting -------------------------------------------------------------------------------------


def _f(value: float, digits: int = 1) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def print_modes(modes: list[dict[str, Any]]) -> None:
    print("\n== deployment modes: CPU of every process involved (bench/modes.py) ==")
    print(f"{'mode':22} {'endpoint':10} {'req/s':>7} {'req/s/core':>11} {'CPU µs/req':>11}  parts (µs)")
    for mode in modes:
        for name, w in mode["whole"].items():
            parts = ", ".join(f"{p} {_f(v)}" for p, v in w["parts_us"].items())
            print(
                f"{mode['mode']:22} {name:10} {_f(w['rps'], 0):>7} {_f(w['rps_per_core'], 0):>11} "
                f"{_f(w['cpu_us_per_request']):>11}  {parts}"
            )
    print(f"\n{'mode':22} {'endpoint':10} {'CPU µs/chunk':>13}  parts (µs)")
    for mode in modes:
        for name, s in mode["stream"].items():
            parts = ", ".join(f"{p} {_f(v)}" for p, v in s["parts_us"].items())
            print(f"{mode['mode']:22} {name:10} {_f(s['cpu_us_per_chunk']):>13}  {parts}")


def mode_budget(
    modes: dict[str, dict[str, Any]],
    floors: dict[str, Any],
    main: dict[str, Any] | None,
    chunk: dict[str, float] | None = None,
    stores: dict[str, dict[str, float]] | None = None,
) -> list[tuple[str, float, str, bool]]:
    """(line, ratio, budget, met) for the budget of issue 16 (worst endpoint where several); with
    floors of N relay processes, what N processes cost the machine before any gateway work."""
    lines: list[tuple[str, float, str, bool]] = []
    base = modes.get("sqlite")
    floor_chunk_us = floors.get("uvicorn+aiohttp", {}).get("cpu_us_per_chunk")
    one = floors.get("uvicorn+aiohttp", {}).get("rps_per_core_c16")
    for name, floor in floors.items():
        if name.startswith("uvicorn+aiohttp x") and one:
            ratio = floor["rps_per_core_c16"] / one
            lines.append((f"floor {name}: req/s per busy core / 1 process", ratio, "(machine)", True))
    if chunk is not None:
        # Measured in alternating slices with the floor relay (bench.run.interleaved_chunk_cost).
        ratio = chunk["ratio"]
        lines.append(
            ("CPU per chunk (chat) / uvicorn+aiohttp floor, interleaved", ratio, "<= 1.20", ratio <= 1.2)
        )
    elif floor_chunk_us:
        source = main if main is not None else base
        chunk = (source or {}).get("stream", {}).get("chat", {}).get("cpu_us_per_chunk", math.nan)
        ratio = chunk / floor_chunk_us
        lines.append(("CPU per chunk (chat) / uvicorn+aiohttp floor", ratio, "<= 1.20", ratio <= 1.2))
    if stores:
        # Measured in alternating slices with a SQLite gateway (interleaved_store_cost).
        ratio = max(e["ratio"] for e in stores.values())
        line = "postgresql + redis: CPU per request / SQLite's, interleaved"
        lines.append((line, ratio, "<= 1.50", ratio <= 1.5))
    if base is None:
        return lines
    for name, mode in modes.items():
        if name.startswith("workers"):
            ratio = min(
                mode["whole"][e]["rps_per_core"] / base["whole"][e]["rps_per_core"] for e in mode["whole"]
            )
            lines.append((f"{name}: req/s per busy core / 1 worker's", ratio, ">= 0.90", ratio >= 0.9))
            floor = floors.get(f"uvicorn+aiohttp x{name.split()[-1]}", {}).get("rps_per_core_c16")
            if floor and one:
                # What the machine allows N processes (shared cores, the load on core 1): the gateway's
                # ratio over the bare relays' ratio of the same run.
                share = ratio / (floor / one)
                lines.append((f"{name}: that ratio / the relay floor's", share, "(machine)", True))
        elif name.startswith("postgresql") and not stores:
            ratio = max(
                mode["whole"][e]["cpu_us_per_request"] / base["whole"][e]["cpu_us_per_request"]
                for e in mode["whole"]
            )
            lines.append((f"{name}: CPU per request / SQLite's", ratio, "<= 1.50", ratio <= 1.5))
    return lines


def print_mode_budget(lines: list[tuple[str, float, str, bool]]) -> None:
    if not lines:
        return
    print("\n== budget (issue 16) ==")
    for line, ratio, budget, met in lines:
        verdict = "" if budget.startswith("(") else "yes" if met else "NO"
        print(f"{line:52} {_f(ratio, 2):>6}  {budget:>9}  {verdict}")
