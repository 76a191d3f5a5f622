"""``make bench``: the gateway's own cost, measured against a fast fake upstream.

Layout on a 2-core machine: the system under test alone on core 0; this process (the load
generator) and the fake upstream on core 1. For each endpoint (messages, chat, responses):

- added latency p50/p99 of whole requests at concurrency 1, 16 and 64: gateway minus
  direct-to-upstream, the two interleaved in 0.5 s slices of the same run;
- requests/s, and requests/s per fully busy gateway core (completed requests / gateway CPU s);
- streams of 50 chunks: added time to first token (c=1, interleaved with direct) and gateway CPU
  per chunk (paced 2 ms streams of 50 vs 2 chunks; the difference / 48);
- RSS idle, and with 256 streams held open (each got its first token, the upstream then pauses),
  and whether all 256 got their first token within 500 ms.

``--peer litellm`` runs the same against LiteLLM's proxy and prints the ratios.
See docs/bench.md.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import os
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import load as lg
from bench.body_sizes import bench_body_sizes, print_body_sizes
from bench.floors import KINDS as FLOOR_KINDS
from bench.floors import PROCESSES as FLOOR_PROCESSES
from bench.large import bench_large_bodies, print_large
from bench.modes import (
    bench_mode,
    interleaved_store_cost,
    mode_budget,
    parts_of,
    print_mode_budget,
    print_modes,
    start_postgresql_mode,
)
from bench.procs import Proc, cpu_ns, free_port, pinned, rss_kib, tree
from bench.targets import GATEWAY_CORE, ROOT, Target, direct_endpoints, start_litellm, start_modelgate

LOAD_CORE = 1
CONCURRENCY = (1, 16, 64)
#: Seconds per server per stream length of the interleaved chunk comparison with the floor relay.
FLOOR_CHUNK_SECONDS = 6.0
MARKER = b"w0000"  # the fake upstream's first streamed token
RESULTS = ROOT / "bench" / "results"

BUDGET = {
    "rps_per_core_chat": 2000.0,
    "rps_ratio_vs_litellm": 15.0,
    "added_p50_c1_ms": 1.0,
    "added_p99_c1_ms": 2.0,
    "c64_over_c16": 0.9,
    "ttft_added_ms": 1.5,
    "cpu_us_per_chunk": 40.0,
    "idle_rss_mib": 120.0,
    "kib_per_stream": 64.0,
    "held_first_token_ms": 500.0,
}


class Upstream:
    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        cmd = [sys.executable, "-m", "bench.upstream", "--port", str(self.port)]
        self.proc = Proc("fake upstream", pinned(cmd, LOAD_CORE), log=workdir / "upstream.log")
        self.proc.wait_http(f"http://127.0.0.1:{self.port}/health", 15)

    def configure(self, chunks: int = 50, delay_ms: float = 0.0, hold_ms: float = 0.0) -> None:
        body = json.dumps({"chunks": chunks, "delay_ms": delay_ms, "hold_ms": hold_ms}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/_bench/config", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=5) as resp:
            resp.read()

    def stop(self) -> None:
        self.proc.stop()


def _ms(seconds: float) -> float:
    return seconds * 1000


async def bench_target(target: Target, upstream: Upstream, args: argparse.Namespace) -> dict[str, Any]:
    pid = target.proc.pid

    def cpu() -> int:
        return cpu_ns(tree(pid))

    def rss() -> int:
        return rss_kib(tree(pid))

    def load(ep: Any, stream: bool, gateway: bool = True) -> lg.Load:
        if gateway:
            req = lg.build_request("127.0.0.1", target.port, ep.path, ep.headers, ep.body(stream))
            marker = MARKER if stream else b""
            return lg.Load(
                f"{target.name} {ep.name}", "127.0.0.1", target.port, req, marker, cpu, GATEWAY_CORE
            )
        req = lg.build_request("127.0.0.1", upstream.port, ep.path, ep.headers, ep.body(stream))
        return lg.Load(f"direct {ep.name}", "127.0.0.1", upstream.port, req, MARKER if stream else b"")

    eps = [ep for ep in target.endpoints if ep.name in args.endpoints]
    direct = {ep.name: ep for ep in direct_endpoints()}
    out: dict[str, Any] = {"target": target.name, "whole": {}, "stream": {}, "held": {}}
    seconds = args.seconds

    def check(stats: lg.Stats, what: str) -> None:
        if stats.errors:
            print(f"  ! {target.name} {what}: {stats.errors} errors (first: {stats.first_error})")
        if not stats.completed:
            raise SystemExit(
                f"bench: {target.name} {what}: no request succeeded ({stats.first_error}).\n"
                f"{target.proc.name} log:\n{target.proc.tail()}"
            )

    print(f"[{target.name}] warm-up")
    upstream.configure()
    for ep in eps:
        for stream in (False, True):
            (st,) = await lg.interleaved([load(ep, stream)], 4, 0.5)
            check(st, f"warm-up {ep.name} stream={stream}")
    await asyncio.sleep(1.0)
    out["idle_rss_kib"] = rss()

    print(f"[{target.name}] {args.streams} held streams per endpoint")
    upstream.configure(hold_ms=3000)
    for ep in eps:
        held = await lg.hold_streams(load(ep, True), args.streams, rss, wait=2.5)
        out["held"][ep.name] = {
            "opened": held.opened,
            "first_tokens": len(held.first_tokens),
            "first_token_max_ms": _ms(max(held.first_tokens)) if held.first_tokens else math.nan,
            "first_token_p50_ms": _ms(lg.pct(held.first_tokens, 0.5)),
            "errors": held.errors,
            "rss_before_kib": held.rss_before_kib,
            "rss_held_kib": held.rss_held_kib,
            "kib_per_stream": (held.rss_held_kib - held.rss_before_kib) / held.opened,
        }
    upstream.configure()

    for ep in eps:
        out["whole"][ep.name] = {}
        for c in args.concurrency:
            print(f"[{target.name}] {ep.name} whole c={c}")
            gw, dr = await lg.interleaved([load(ep, False), load(direct[ep.name], False, False)], c, seconds)
            check(gw, f"{ep.name} c={c}")
            check(dr, f"direct {ep.name} c={c}")
            out["whole"][ep.name][str(c)] = {
                "p50_ms": _ms(lg.pct(gw.latencies, 0.5)),
                "p99_ms": _ms(lg.pct(gw.latencies, 0.99)),
                "direct_p50_ms": _ms(lg.pct(dr.latencies, 0.5)),
                "direct_p99_ms": _ms(lg.pct(dr.latencies, 0.99)),
                "added_p50_ms": _ms(lg.pct(gw.latencies, 0.5) - lg.pct(dr.latencies, 0.5)),
                "added_p99_ms": _ms(lg.pct(gw.latencies, 0.99) - lg.pct(dr.latencies, 0.99)),
                "rps": gw.rps,
                "cpu_share": gw.cpu_share,
                "other_share": gw.other_share,
                "rps_per_core": gw.rps_per_core,
                "requests": gw.completed,
                "errors": gw.errors,
            }

    for ep in eps:
        print(f"[{target.name}] {ep.name} streams")
        upstream.configure(chunks=50)
        gw, dr = await lg.interleaved([load(ep, True), load(direct[ep.name], True, False)], 1, seconds)
        check(gw, f"{ep.name} stream c=1")
        check(dr, f"direct {ep.name} stream c=1")
        row: dict[str, Any] = {
            "ttft_p50_ms": _ms(lg.pct(gw.ttfts, 0.5)),
            "ttft_added_p50_ms": _ms(lg.pct(gw.ttfts, 0.5) - lg.pct(dr.ttfts, 0.5)),
            "ttft_added_p99_ms": _ms(lg.pct(gw.ttfts, 0.99) - lg.pct(dr.ttfts, 0.99)),
            "stream_added_p50_ms": _ms(lg.pct(gw.latencies, 0.5) - lg.pct(dr.latencies, 0.5)),
        }
        paced = await paced_streams(functools.partial(load, ep, True), upstream, seconds)
        for chunks, st in paced.items():
            check(st, f"{ep.name} paced stream chunks={chunks}")
        row["cpu_us_per_stream_50"], row["cpu_us_per_stream_2"], row["cpu_us_per_chunk"] = cpu_per_chunk(
            paced
        )
        out["stream"][ep.name] = row
    upstream.configure()
    return out


async def paced_streams(
    make: Callable[[], lg.Load], upstream: Upstream, seconds: float
) -> dict[int, lg.Stats]:
    """Streams of 50 and of 2 text deltas, 2 ms apart, at c = 2: every chunk is a cold wakeup."""
    return {
        chunks: stats for chunks, (stats,) in (await paced_streams_of([make()], upstream, seconds)).items()
    }


async def paced_streams_of(
    loads: list[lg.Load], upstream: Upstream, seconds: float
) -> dict[int, list[lg.Stats]]:
    """``paced_streams`` for several servers at once, in alternating slices: one Stats each."""
    out = {}
    for chunks in (50, 2):
        upstream.configure(chunks=chunks, delay_ms=2)
        out[chunks] = await lg.interleaved(loads, 2, seconds)
    upstream.configure()
    return out


def cpu_per_chunk(paced: dict[int, lg.Stats]) -> tuple[float, float, float]:
    """CPU µs per 50-chunk stream, per 2-chunk stream, and per chunk (their difference / 48)."""
    per_stream = {chunks: st.cpu_ns / 1000 / max(st.completed, 1) for chunks, st in paced.items()}
    return per_stream[50], per_stream[2], (per_stream[50] - per_stream[2]) / 48


async def bench_floor(
    kind: str,
    upstream: Upstream,
    workdir: Path,
    args: argparse.Namespace,
    *,
    processes: int = 1,
    cores: str = "",
) -> dict[str, Any]:
    """A relay with no gateway work (bench.floors), measured like the gateway: chat req/s per busy
    core at c = 16 and CPU per chunk of paced streams. With ``processes``, that many copies share
    the port (SO_REUSEPORT) on ``cores``."""
    port = free_port()
    cmd = [sys.executable, "-m", "bench.floors", kind, str(port), str(upstream.port)]
    name = kind.replace("/", "-")
    procs = [
        Proc(f"floor {kind}", pinned(cmd, cores or GATEWAY_CORE), log=workdir / f"floor-{name}-{i}.log")
        for i in range(processes)
    ]
    try:
        for each in procs:
            each.wait_http(f"http://127.0.0.1:{port}/health", 20)
        if processes > 1:
            # Any of them answers the probe: give the others time to listen before connecting,
            # so the kernel spreads the load's connections over all of them.
            await asyncio.sleep(3)
        chat = next(ep for ep in direct_endpoints() if ep.name == "chat")

        def cpu() -> int:
            return sum(cpu_ns(tree(each.pid)) for each in procs)

        def load(stream: bool) -> lg.Load:
            req = lg.build_request("127.0.0.1", port, chat.path, chat.headers, chat.body(stream))
            return lg.Load(kind, "127.0.0.1", port, req, MARKER if stream else b"", cpu, GATEWAY_CORE)

        upstream.configure()
        await lg.interleaved([load(False)], 4, 0.5)
        (whole,) = await lg.interleaved([load(False)], 16, args.seconds)
        paced = await paced_streams(lambda: load(True), upstream, args.seconds)
        return {
            "rps_per_core_c16": whole.rps_per_core,
            "cpu_us_per_chunk": cpu_per_chunk(paced)[2],
            "errors": whole.errors + sum(st.errors for st in paced.values()),
        }
    finally:
        for each in procs:
            each.stop()


async def interleaved_chunk_cost(target: Target, upstream: Upstream, workdir: Path) -> dict[str, float]:
    """CPU per streamed chat chunk of the gateway and of the uvicorn+aiohttp floor relay, both on
    the gateway's core and measured in alternating 0.5 s slices (as ``make bench-ab`` does), so
    drift of the machine hits both alike: the chunk budget's ratio from one measurement."""
    port = free_port()
    cmd = [sys.executable, "-m", "bench.floors", FLOOR_PROCESSES, str(port), str(upstream.port)]
    floor = Proc("floor (interleaved)", pinned(cmd, GATEWAY_CORE), log=workdir / "floor-interleaved.log")
    try:
        floor.wait_http(f"http://127.0.0.1:{port}/health", 20)
        ours = next(ep for ep in target.endpoints if ep.name == "chat")
        direct = next(ep for ep in direct_endpoints() if ep.name == "chat")
        gateway_pid, floor_pid = target.proc.pid, floor.pid
        loads = [
            lg.Load(
                "modelgate chat",
                "127.0.0.1",
                target.port,
                lg.build_request("127.0.0.1", target.port, ours.path, ours.headers, ours.body(True)),
                MARKER,
                lambda: cpu_ns(tree(gateway_pid)),
                GATEWAY_CORE,
            ),
            lg.Load(
                "floor chat",
                "127.0.0.1",
                port,
                lg.build_request("127.0.0.1", port, direct.path, direct.headers, direct.body(True)),
                MARKER,
                lambda: cpu_ns(tree(floor_pid)),
                GATEWAY_CORE,
            ),
        ]
        per_stream = await paced_streams_of(loads, upstream, FLOOR_CHUNK_SECONDS)
        gateway, relay = (cpu_per_chunk({n: per_stream[n][i] for n in per_stream})[2] for i in (0, 1))
        return {"modelgate_us": gateway, "floor_us": relay, "ratio": gateway / relay}
    finally:
        floor.stop()


# --- reporting ---------------------------------------------------------------------------------


def _f(value: float, digits: int = 2) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def print_target(r: dict[str, Any]) -> None:
    print(f"\n== {r['target']}: system under test on core 0; load generator + fake upstream on core 1 ==")
    print(
        f"{'endpoint':10} {'c':>3} {'p50 ms':>8} {'+p50 ms':>8} {'+p99 ms':>8} "
        f"{'req/s':>8} {'core %':>7} {'req/s/core':>11} {'other %':>8}"
    )
    for name, rows in r["whole"].items():
        for c, w in rows.items():
            print(
                f"{name:10} {c:>3} {_f(w['p50_ms']):>8} {_f(w['added_p50_ms']):>8} {_f(w['added_p99_ms']):>8} "
                f"{_f(w['rps'], 0):>8} {_f(w['cpu_share'] * 100, 0):>7} {_f(w['rps_per_core'], 0):>11} "
                f"{_f(w['other_share'] * 100, 0):>8}"
            )
    print(
        f"\n{'streams':10} {'+TTFT p50':>10} {'+TTFT p99':>10} {'CPU µs/chunk':>13} "
        f"{'KiB/held stream':>16} {'held TTFT max ms':>17} {'all <500ms':>11}"
    )
    for name, s in r["stream"].items():
        h = r["held"].get(name, {})
        ok = h.get("first_tokens") == h.get("opened") and h.get("first_token_max_ms", 1e9) <= 500
        print(
            f"{name:10} {_f(s['ttft_added_p50_ms']):>10} {_f(s['ttft_added_p99_ms']):>10} "
            f"{_f(s['cpu_us_per_chunk'], 1):>13} {_f(h.get('kib_per_stream', math.nan), 1):>16} "
            f"{_f(h.get('first_token_max_ms', math.nan), 0):>17} "
            f"{('yes' if ok else 'NO') + ' (' + str(h.get('first_tokens')) + '/' + str(h.get('opened')) + ')':>11}"
        )
    print(f"\nidle RSS: {r['idle_rss_kib'] / 1024:.1f} MiB")
    other = max(w["other_share"] for rows in r["whole"].values() for w in rows.values())
    if other > 0.05:
        print(
            f"WARNING: other processes used up to {other * 100:.0f}% of core {GATEWAY_CORE} during the run "
            "(column 'other %'): latency and req/s figures are skewed; req/s/core (requests per CPU "
            "second of the system under test) is the most robust figure. Re-run on a quiet machine."
        )


def _headline(r: dict[str, Any]) -> dict[str, float]:
    """One number per budget line (worst endpoint where there are several)."""
    whole, stream, held = r["whole"], r["stream"], r["held"]
    c_hi = str(max(int(c) for c in next(iter(whole.values()))))
    c_lo = str(min(int(c) for c in next(iter(whole.values()))))
    out = {
        "chat req/s per core": whole["chat"][c_hi]["rps_per_core"] if "chat" in whole else math.nan,
        "worst req/s per core": min(w[c_hi]["rps_per_core"] for w in whole.values()),
        "worst added p50 c=1 ms": max(w[c_lo]["added_p50_ms"] for w in whole.values()),
        "worst added p99 c=1 ms": max(w[c_lo]["added_p99_ms"] for w in whole.values()),
        "worst added TTFT p50 ms": max(s["ttft_added_p50_ms"] for s in stream.values()),
        "worst CPU µs per chunk": max(s["cpu_us_per_chunk"] for s in stream.values()),
        "idle RSS MiB": r["idle_rss_kib"] / 1024,
        "worst KiB per held stream": max(h["kib_per_stream"] for h in held.values()),
        "worst held TTFT max ms": max(h["first_token_max_ms"] for h in held.values()),
    }
    if "16" in next(iter(whole.values())) and "64" in next(iter(whole.values())):
        out["worst c=64/c=16 req/s"] = min(w["64"]["rps"] / w["16"]["rps"] for w in whole.values())
    return out


def print_budget(ours: dict[str, Any], peer: dict[str, Any] | None) -> None:
    h = _headline(ours)
    p = _headline(peer) if peer else None
    checks = {
        "chat req/s per core": (">=", BUDGET["rps_per_core_chat"]),
        "worst req/s per core": (None, None),
        "worst added p50 c=1 ms": ("<=", BUDGET["added_p50_c1_ms"]),
        "worst added p99 c=1 ms": ("<=", BUDGET["added_p99_c1_ms"]),
        "worst c=64/c=16 req/s": (">=", BUDGET["c64_over_c16"]),
        "worst added TTFT p50 ms": ("<=", BUDGET["ttft_added_ms"]),
        "worst CPU µs per chunk": ("<=", BUDGET["cpu_us_per_chunk"]),
        "idle RSS MiB": ("<=", BUDGET["idle_rss_mib"]),
        "worst KiB per held stream": ("<=", BUDGET["kib_per_stream"]),
        "worst held TTFT max ms": ("<=", BUDGET["held_first_token_ms"]),
    }
    print("\n== budget (issue 6) ==")
    head = f"{'metric':28} {'modelgate':>11}"
    if p:
        head += f" {'litellm':>11} {'ratio':>8}"
    print(head + f" {'budget':>10}  ok")
    for name, (op, limit) in checks.items():
        if name not in h:
            continue
        ok = ""
        if op == ">=" and limit is not None:
            ok = "yes" if h[name] >= limit else "NO"
        elif op == "<=" and limit is not None:
            ok = "yes" if h[name] <= limit else "NO"
        line = f"{name:28} {_f(h[name]):>11}"
        if p:
            ratio = p[name] / h[name] if "per core" not in name and "c=64" not in name else h[name] / p[name]
            line += f" {_f(p[name]):>11} {_f(ratio, 1) + 'x':>8}"
        budget = f"{op} {limit:g}" if op else ""
        print(line + f" {budget:>10}  {ok}")
    if p:
        ratio = h["chat req/s per core"] / p["chat req/s per core"]
        ok = "yes" if ratio >= BUDGET["rps_ratio_vs_litellm"] else "NO"
        print(
            f"{'chat req/s/core vs litellm':28} {_f(ratio, 1) + 'x':>11} {'':>11} {'':>8} {'>= 15x':>10}  {ok}"
        )
        print("(ratio column: how many times better modelgate is; >1 means modelgate wins)")


async def main_async(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="modelgate-bench-") as tmp:
        workdir = Path(tmp)
        upstream = Upstream(workdir)
        results: dict[str, Any] = {}
        floors: dict[str, Any] = {}
        modes: dict[str, Any] = {}
        chunk: dict[str, float] | None = None
        stores: dict[str, dict[str, float]] | None = None
        try:
            targets: list[tuple[str, Callable[[int, Path], Target]]] = [("modelgate", start_modelgate)]
            if args.peer == "litellm":
                targets.append(("litellm", start_litellm))
            for name, start in targets:
                print(f"starting {name} on core {0} ...")
                target = start(upstream.port, workdir)
                try:
                    if not args.modes_only:
                        results[name] = await bench_target(target, upstream, args)
                    if name == "modelgate" and args.large_seconds > 0 and not args.modes_only:
                        results[name]["large"] = await bench_large_bodies(
                            target, upstream.port, args.large_seconds
                        )
                    if name == "modelgate" and args.sizes_seconds > 0 and not args.modes_only:
                        results.setdefault(name, {})["sizes"] = await bench_body_sizes(
                            target, upstream.port, workdir, args.sizes_seconds
                        )
                    if name == "modelgate" and args.floors:
                        print("[modelgate] CPU per chunk against the floor relay, interleaved")
                        chunk = await interleaved_chunk_cost(target, upstream, workdir)
                    if name == "modelgate" and (args.workers or args.store):
                        modes["sqlite"] = await bench_mode(
                            "sqlite", target, parts_of(target), upstream, args.seconds, args.endpoints
                        )
                finally:
                    target.stop()
            for workers in args.workers:
                cores = args.worker_cores or ",".join(
                    str(c) for c in range(min(workers, os.cpu_count() or 1))
                )
                print(f"starting modelgate --workers {workers} on cores {cores} ...")
                target = start_modelgate(
                    upstream.port, workdir, name=f"modelgate-w{workers}", workers=workers, cores=cores
                )
                try:
                    modes[f"workers {workers}"] = await bench_mode(
                        f"workers {workers}",
                        target,
                        parts_of(target, workers=True),
                        upstream,
                        args.seconds,
                        args.endpoints,
                    )
                finally:
                    target.stop()
            if args.store == "postgresql":
                print("starting modelgate on PostgreSQL + Redis ...")
                target, pids = await start_postgresql_mode(upstream.port, workdir)
                try:
                    modes["postgresql + redis"] = await bench_mode(
                        "postgresql + redis",
                        target,
                        parts_of(target, pids),
                        upstream,
                        args.seconds,
                        args.endpoints,
                    )
                    sqlite = start_modelgate(upstream.port, workdir, name="modelgate-sqlite-interleaved")
                    try:
                        stores = await interleaved_store_cost(
                            sqlite, target, pids, args.seconds, args.endpoints
                        )
                    finally:
                        sqlite.stop()
                finally:
                    target.stop()
            for kind in FLOOR_KINDS if args.floors else ():
                print(f"floor {kind} on core 0 ...")
                floors[kind] = await bench_floor(kind, upstream, workdir, args)
            for workers in args.workers if args.floors else ():
                cores = args.worker_cores or ",".join(
                    str(c) for c in range(min(workers, os.cpu_count() or 1))
                )
                print(f"floor uvicorn+aiohttp x{workers} on cores {cores} ...")
                floors[f"uvicorn+aiohttp x{workers}"] = await bench_floor(
                    FLOOR_PROCESSES, upstream, workdir, args, processes=workers, cores=cores
                )
        finally:
            upstream.stop()
    for r in results.values():
        print_target(r)
        if "large" in r:
            print_large(r["large"])
        if "sizes" in r:
            print_body_sizes(r["sizes"])
    if "modelgate" in results:
        print_budget(results["modelgate"], results.get("litellm"))
    if floors:
        print_floors(results.get("modelgate"), floors)
        results["floors"] = floors
    if modes:
        print_modes(list(modes.values()))
        results["modes"] = modes
    if chunk is not None:
        results["chunk_interleaved"] = chunk
        print(
            f"\nCPU per chunk (chat), interleaved with the uvicorn+aiohttp floor on core {GATEWAY_CORE}: "
            f"modelgate {chunk['modelgate_us']:.1f} µs, floor {chunk['floor_us']:.1f} µs"
        )
    if stores is not None:
        results["stores_interleaved"] = stores
        print(
            f"\nCPU per whole request (c=16), SQLite and PostgreSQL + Redis interleaved on core {GATEWAY_CORE}:"
        )
        for name, e in stores.items():
            print(
                f"  {name:10} sqlite {e['sqlite_us']:7.1f} µs   postgresql + redis {e['postgresql_us']:7.1f} µs"
            )
    print_mode_budget(mode_budget(modes, floors, results.get("modelgate"), chunk, stores))
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / time.strftime("bench-%Y%m%d-%H%M%S.json")
    path.write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
    print(f"\nraw results: {path.relative_to(ROOT)}")


def print_floors(ours: dict[str, Any] | None, floors: dict[str, Any]) -> None:
    print("\n== floors: relays with no gateway work, same load (bench/floors.py) ==")
    print(f"{'relay':18} {'chat req/s/core c=16':>21} {'CPU µs/chunk (chat)':>20}")
    for kind, f in floors.items():
        print(f"{kind:18} {_f(f['rps_per_core_c16'], 0):>21} {_f(f['cpu_us_per_chunk'], 1):>20}")
    if ours is None:
        return
    whole = ours["whole"].get("chat", {}).get("16", {})
    stream = ours["stream"].get("chat", {})
    print(
        f"{'modelgate':18} {_f(whole.get('rps_per_core', math.nan), 0):>21} "
        f"{_f(stream.get('cpu_us_per_chunk', math.nan), 1):>20}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="modelgate benchmark (docs/bench.md)")
    parser.add_argument("--peer", choices=["litellm"], help="also bench this peer and print ratios")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per target per point")
    parser.add_argument("--streams", type=int, default=256, help="streams held open for the RSS figure")
    parser.add_argument(
        "--endpoints", nargs="+", default=["messages", "chat", "responses"], help="endpoints to bench"
    )
    parser.add_argument("--concurrency", nargs="+", type=int, default=list(CONCURRENCY))
    parser.add_argument(
        "--floors", action="store_true", help="also measure bare relays (bench/floors.py) on the same load"
    )
    parser.add_argument(
        "--large-seconds",
        type=float,
        default=30.0,
        help="seconds of the large-bodies phase (bench/large.py); 0 skips it",
    )
    parser.add_argument(
        "--sizes-seconds",
        type=float,
        default=4.0,
        help="seconds per body size of the body-sizes phase (bench/body_sizes.py); 0 skips it",
    )
    parser.add_argument(
        "--workers",
        nargs="*",
        type=int,
        default=[],
        help="also measure `serve --workers N` on SQLite (bench/modes.py), e.g. --workers 2",
    )
    parser.add_argument(
        "--worker-cores",
        help="cores for --workers (taskset list, e.g. 0); default 0..N-1, shared with the load on a 2-core machine",
    )
    parser.add_argument(
        "--store",
        choices=["postgresql"],
        help="also measure the ledger in PostgreSQL with Redis windows (started by bench/run.sh)",
    )
    parser.add_argument(
        "--modes-only",
        action="store_true",
        help="skip the single-process latency/memory bench; measure the deployment modes (and floors)",
    )
    parser.add_argument(
        "--keys",
        type=int,
        default=0,
        help="data-size mode: measure again with N more keys (bench/datasize.py)",
    )
    parser.add_argument(
        "--usage-records",
        type=int,
        default=0,
        help="data-size mode: measure again with N usage records (bench/datasize.py)",
    )
    args = parser.parse_args()
    if args.keys or args.usage_records:
        from bench import datasize

        os.sched_setaffinity(0, {LOAD_CORE})
        datasize.run(args)
        return
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("bench: needs at least 2 cores (system under test on 0, load on 1)")
    os.sched_setaffinity(0, {LOAD_CORE})
    try:
        import uvloop
    except ImportError:
        asyncio.run(main_async(args))
    else:
        uvloop.run(main_async(args))


if __name__ == "__main__":
    main()
