"""Large bodies must not stall anyone else (issue #11): small requests' latency while four
clients loop ~31 MiB requests on count_tokens, messages, chat and responses.

The large bodies hold hundreds of thousands of short messages, the costliest shape to parse
(``orjson`` needs a quarter of a second or more for one). The gateway must parse, check and
forward them in its worker processes, so the small requests (whole chat requests, concurrency 2)
keep their usual latency; the figures are their p50, p99 and maximum over the run.

The same small requests also go straight to the fake upstream, in alternating half-second slices
with the gateway's: the fake upstream and the clients share the other core with the large bodies'
clients, so what the run adds to the requests that skip the gateway is the bench's own share of
the slowdown, and the gateway's added p99 (its p99 less theirs, as the main table's ``+p99``) is
its own.

The four large-body clients run in a process of their own (``_large_clients``), on the same core as
the small requests' client: in one event loop with it, their writes and reads of ~31 MiB bodies
could delay the small requests' own, which would count against the gateway.

The phase runs twice. First as the rest of the bench places the gateway: the whole process tree
on the gateway's core, so the body workers compete with the serving loop for that one core.
Then with the body workers allowed on every core, as a deployment that pins nothing places them
(the serving process stays on its core): the budget assumes that placement, and the pinned run
shows what one shared core costs.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
from multiprocessing.connection import Connection
from typing import Any

from bench import load as lg
from bench.procs import tree
from bench.targets import GATEWAY_CORE, Target, direct_endpoints

LARGE_BYTES = 32 * 1024 * 1024 - 256 * 1024  # the turns come to ~31 MiB, under the 32 MiB limit
BUDGET = {"small_p99_ms": 100.0, "small_max_ms": 300.0, "p99_over_quiet": 1.5}


def conversation(limit: int) -> list[dict[str, str]]:
    """Short alternating turns adding up to about ``limit`` bytes of JSON."""
    turn = {"role": "assistant", "content": "a short turn of a very long conversation"}
    size = len(json.dumps(turn, separators=(",", ":"))) + 1  # the longer of the two turns, and a comma
    count = limit // size
    return [{"role": ("user", "assistant")[i % 2], "content": turn["content"]} for i in range(count)]


#: Endpoint name -> the path its large body is sent to.
PATHS = {
    "count_tokens": "/v1/messages/count_tokens",
    "messages": "/v1/messages",
    "chat": "/v1/chat/completions",
    "responses": "/v1/responses",
}


def large_bodies() -> dict[str, bytes]:
    """Endpoint name -> its body of ~31 MiB (sent to ``PATHS[name]``)."""
    turns = conversation(LARGE_BYTES - 4096)
    bodies = {
        "count_tokens": {"model": "aria-haiku-4.5", "messages": turns},
        "messages": {"model": "aria-haiku-4.5", "max_tokens": 16, "messages": turns},
        "chat": {"model": "nova-5.5", "max_tokens": 16, "messages": turns},
        # store:false: kept as a stored response its ~31 MiB of input would be ~90 MB of items, over
        # responses.max_object_bytes (a 400 after the input is planned); this phase measures body
        # handling, as it did before stored responses existed.
        "responses": {"model": "nova-5.5", "max_output_tokens": 16, "store": False, "input": turns},
    }
    return {name: json.dumps(body, separators=(",", ":")).encode() for name, body in bodies.items()}


async def bench_large_bodies(target: Target, upstream_port: int, seconds: float) -> dict[str, Any]:
    """The phase pinned, then with the body workers on every core (``spread_body_workers``)."""
    pinned = await _large_phase(target, upstream_port, seconds, "body workers on the gateway's core")
    moved = spread_body_workers(target)
    if not moved:
        return {"pinned": pinned}
    spread = await _large_phase(target, upstream_port, seconds, f"body workers ({moved}) on every core")
    return {"pinned": pinned, "spread": spread}


def spread_body_workers(target: Target) -> int:
    """Let the gateway's child processes (its body workers, started by the pinned run) run on
    every core; the serving process keeps its own. How many were moved."""
    cores = set(range(os.cpu_count() or 1))
    moved = 0
    for pid in tree(target.proc.pid)[1:]:
        try:
            os.sched_setaffinity(pid, cores)
        except OSError:
            continue  # gone meanwhile
        moved += 1
    return moved


async def _large_phase(target: Target, upstream_port: int, seconds: float, placement: str) -> dict[str, Any]:
    by_name = {ep.name: ep for ep in target.endpoints}
    large = [
        (name, path, by_name["messages" if path.startswith("/v1/messages") else name].headers)
        for name, path in PATHS.items()
    ]
    chat = by_name["chat"]
    small = lg.build_request("127.0.0.1", target.port, chat.path, chat.headers, chat.body(False))
    mine = lg.Load("small chat", "127.0.0.1", target.port, small, core=GATEWAY_CORE)
    straight = next(ep for ep in direct_endpoints() if ep.name == "chat")
    request = lg.build_request(
        "127.0.0.1", upstream_port, straight.path, straight.headers, straight.body(False)
    )
    direct = lg.Load("small chat, direct", "127.0.0.1", upstream_port, request)
    # The same small requests on a quiet gateway first: the p99 they must keep (issue #34: <= 1.5x).
    quiet, quiet_direct = await lg.interleaved([mine, direct], 2, min(5.0, seconds / 3))
    print(
        f"[{target.name}] large bodies ({placement}): 4 clients looping ~31 MiB requests, "
        f"small chat at c=2, {seconds:g} s"
    )
    spawn = multiprocessing.get_context("spawn")
    ours, theirs = spawn.Pipe()
    clients = spawn.Process(
        target=_large_clients, args=(theirs, target.port, large, seconds), name="bench-large-clients"
    )
    clients.start()
    try:
        await asyncio.to_thread(ours.recv)  # connected, bodies built: both loads start now
        ours.send("go")
        # Half the run each, in alternating slices: both end when the large bodies' clients do.
        small_stats, direct_stats = await lg.interleaved([mine, direct], 2, seconds / 2)
        done: dict[str, tuple[int, int, str]] = await asyncio.to_thread(ours.recv)
    finally:
        clients.join(30)
        if clients.is_alive():
            clients.kill()
    return {
        "placement": placement,
        "seconds": seconds,
        "small_requests": small_stats.completed,
        "small_errors": small_stats.errors,
        "small_p50_ms": lg.pct(small_stats.latencies, 0.5) * 1000,
        "small_p99_ms": lg.pct(small_stats.latencies, 0.99) * 1000,
        "small_max_ms": max(small_stats.latencies, default=float("nan")) * 1000,
        "quiet_p99_ms": lg.pct(quiet.latencies, 0.99) * 1000,
        "direct_p99_ms": lg.pct(direct_stats.latencies, 0.99) * 1000,
        "direct_quiet_p99_ms": lg.pct(quiet_direct.latencies, 0.99) * 1000,
        "direct_errors": direct_stats.errors + quiet_direct.errors,
        "large_requests": {label: completed for label, (completed, _, _) in done.items()},
        "large_errors": sum(errors for _, errors, _ in done.values()),
        "large_first_error": next((first for _, _, first in done.values() if first), ""),
    }


def _large_clients(
    channel: Connection, port: int, large: list[tuple[str, str, dict[str, str]]], seconds: float
) -> None:
    """The four large-body clients, one connection each, in this process of their own: reports
    when ready, starts on ``go``, and sends back (completed, errors, first error) per client."""
    bodies = large_bodies()
    loads = [
        (
            lg.Load(
                f"large {name}",
                "127.0.0.1",
                port,
                lg.build_request("127.0.0.1", port, path, headers, bodies[name]),
            ),
            1,
        )
        for name, path, headers in large
    ]

    async def run() -> list[lg.Stats]:
        channel.send("ready")
        await asyncio.to_thread(channel.recv)
        return await lg.together(loads, seconds)

    stats = asyncio.run(run())
    channel.send(
        {
            load.label: (st.completed, st.errors, st.first_error)
            for (load, _), st in zip(loads, stats, strict=True)
        }
    )


def print_large(results: dict[str, Any]) -> None:
    for r in results.values():
        _print_phase(r)
    print(
        "(pinned: the whole gateway on one core, its body workers sharing it with the serving loop; "
        "spread: the body workers free to use every core, as an unpinned deployment runs them)"
    )


def _print_phase(r: dict[str, Any]) -> None:
    print(
        f"\n== large bodies, {r['placement']} ({r['seconds']:g} s): small chat requests while 4 clients "
        "loop ~31 MiB bodies =="
    )
    print(
        f"small: {r['small_requests']} requests, p50 {r['small_p50_ms']:.2f} ms, p99 {r['small_p99_ms']:.2f} ms, "
        f"max {r['small_max_ms']:.2f} ms (budget p99 <= {BUDGET['small_p99_ms']:g}, max <= "
        f"{BUDGET['small_max_ms']:g}); errors {r['small_errors']}"
    )
    quiet = r.get("quiet_p99_ms", float("nan"))
    ratio = r["small_p99_ms"] / quiet if quiet else float("nan")
    print(
        f"small p99 quiet {quiet:.2f} ms; while large bodies run {ratio:.2f}x quiet "
        f"(budget <= {BUDGET['p99_over_quiet']:g}x) {'yes' if ratio <= BUDGET['p99_over_quiet'] else 'NO'}"
    )
    if "direct_p99_ms" in r:
        direct, direct_quiet = r["direct_p99_ms"], r["direct_quiet_p99_ms"]
        added, added_quiet = r["small_p99_ms"] - direct, quiet - direct_quiet
        print(
            f"the same requests straight to the fake upstream: p99 quiet {direct_quiet:.2f} ms, while large "
            f"bodies run {direct:.2f} ms ({direct / direct_quiet:.2f}x; the bench's own core); errors "
            f"{r['direct_errors']}"
        )
        print(
            f"the gateway's added p99 (its p99 less theirs): quiet {added_quiet:.2f} ms, while large bodies "
            f"run {added:.2f} ms ({added / added_quiet if added_quiet > 0 else float('nan'):.2f}x)"
        )
    done = ", ".join(f"{k.removeprefix('large ')} {v}" for k, v in r["large_requests"].items())
    print(f"large requests completed: {done}; errors {r['large_errors']} {r['large_first_error']}")
