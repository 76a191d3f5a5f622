"""Large bodies at the relay's pace (issue #34): latency and CPU per MiB of Chat requests of 64 KiB,
1 MiB and 10 MiB, one long message and many Claude-Code-shaped turns, through the gateway and
through the uvicorn+aiohttp floor relay (bench/floors.py) to the same fake upstream.

Both run on the gateway's core and are measured in alternating slices (``load.interleaved``) at
concurrency 1, so drift of a shared machine hits both alike; the figures are the p50 latency
(request sent to reply end) and the server process tree's CPU per MiB of body, and their ratio
to the floor's. Budget: ratio <= 3 for both, at 1 MiB and 10 MiB.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench import load as lg
from bench.floors import PROCESSES as FLOOR_PROCESSES
from bench.procs import Proc, cpu_ns, free_port, pinned, tree
from bench.targets import GATEWAY_CORE, Target, direct_endpoints

KIB = 1024
MIB = 1024 * KIB
SIZES = {"64 KiB": 64 * KIB, "1 MiB": MIB, "10 MiB": 10 * MIB}
BUDGET_RATIO = 3.0
_OUTPUT = 'src/app.py:12: def f(x): return {"k": [x]}  # \u001b[31mred\u001b[0m \\ "quoted"\n' * 20


def chat_body(model: str, size: int, many_turns: bool) -> bytes:
    """A Chat request of about ``size`` bytes: one long user message, or turns shaped like a
    coding agent's (assistant tool calls and tool results with code and terminal escapes)."""
    head: dict[str, Any] = {"model": model, "max_tokens": 256}
    if not many_turns:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "word " * (size // 5)}]
    else:
        call = {"id": "call_1", "type": "function", "function": {"name": "Read", "arguments": '{"path":"a"}'}}
        pair: list[dict[str, Any]] = [
            {"role": "assistant", "content": "Let me look.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": _OUTPUT},
        ]
        count = max(1, size // len(json.dumps(pair)))
        messages = [{"role": "user", "content": "Fix the test."}, *(pair * count)]
        messages.append({"role": "user", "content": "go on"})
    return json.dumps({**head, "messages": messages}, separators=(",", ":")).encode()


async def bench_body_sizes(
    target: Target, upstream_port: int, workdir: Path, seconds: float, sizes: dict[str, int] | None = None
) -> dict[str, Any]:
    """The points of ``sizes`` (label -> bytes; all of ``SIZES`` by default), both shapes each."""
    port = free_port()
    cmd = [sys.executable, "-m", "bench.floors", FLOOR_PROCESSES, str(port), str(upstream_port)]
    floor = Proc("floor (body sizes)", pinned(cmd, GATEWAY_CORE), log=workdir / "floor-sizes.log")
    results: dict[str, Any] = {}
    try:
        floor.wait_http(f"http://127.0.0.1:{port}/health", 20)
        ours = next(ep for ep in target.endpoints if ep.name == "chat")
        direct = next(ep for ep in direct_endpoints() if ep.name == "chat")
        gateway_pid, floor_pid = target.proc.pid, floor.pid
        for shape, many in (("one message", False), ("many turns", True)):
            for label, size in (SIZES if sizes is None else sizes).items():
                mine = chat_body(ours.model, size, many)
                theirs = chat_body(direct.model, size, many)
                loads = [
                    lg.Load(
                        "modelgate",
                        "127.0.0.1",
                        target.port,
                        lg.build_request("127.0.0.1", target.port, ours.path, ours.headers, mine),
                        cpu=lambda: cpu_ns(tree(gateway_pid)),
                        core=GATEWAY_CORE,
                    ),
                    lg.Load(
                        "floor",
                        "127.0.0.1",
                        port,
                        lg.build_request("127.0.0.1", port, direct.path, direct.headers, theirs),
                        cpu=lambda: cpu_ns(tree(floor_pid)),
                        core=GATEWAY_CORE,
                    ),
                ]
                print(f"[{target.name}] body sizes: chat {label}, {shape}, {seconds:g} s each, interleaved")
                gateway, relay = await lg.interleaved(loads, 1, seconds, slice_seconds=max(0.5, seconds / 4))
                results[f"{label}, {shape}"] = _point(gateway, relay, len(mine))
    finally:
        floor.stop()
    return results


def _point(gateway: lg.Stats, relay: lg.Stats, size: int) -> dict[str, Any]:
    def cpu_ms_per_mib(st: lg.Stats) -> float:
        return st.cpu_ns / 1e6 / (st.completed * size / MIB) if st.completed else float("nan")

    point: dict[str, Any] = {
        "p50_ms": lg.pct(gateway.latencies, 0.5) * 1000,
        "floor_p50_ms": lg.pct(relay.latencies, 0.5) * 1000,
        "cpu_ms_per_mib": cpu_ms_per_mib(gateway),
        "floor_cpu_ms_per_mib": cpu_ms_per_mib(relay),
        "requests": gateway.completed,
        "floor_requests": relay.completed,
        "errors": gateway.errors,
        "first_error": gateway.first_error,
        "other_share": gateway.other_share,
    }
    point["latency_ratio"] = (
        point["p50_ms"] / point["floor_p50_ms"] if point["floor_p50_ms"] else float("nan")
    )
    floor_cpu = point["floor_cpu_ms_per_mib"]
    point["cpu_ratio"] = point["cpu_ms_per_mib"] / floor_cpu if floor_cpu else float("nan")
    return point


def print_body_sizes(results: dict[str, Any]) -> None:
    print("\n== body sizes: chat through modelgate vs the uvicorn+aiohttp floor, c=1, interleaved ==")
    print(
        f"{'body':24} {'p50 ms':>9} {'floor':>9} {'ratio':>6} {'CPU ms/MiB':>11} {'floor':>8} "
        f"{'ratio':>6} {'n':>5} {'other':>6}  ok (<= {BUDGET_RATIO:g}x)"
    )
    for name, p in results.items():
        ok = "yes" if p["latency_ratio"] <= BUDGET_RATIO and p["cpu_ratio"] <= BUDGET_RATIO else "NO"
        errors = f"  errors {p['errors']} {p['first_error']}" if p["errors"] else ""
        print(
            f"{name:24} {p['p50_ms']:9.1f} {p['floor_p50_ms']:9.1f} {p['latency_ratio']:6.1f} "
            f"{p['cpu_ms_per_mib']:11.1f} {p['floor_cpu_ms_per_mib']:8.1f} {p['cpu_ratio']:6.1f} "
            f"{p['requests']:5d} {p['other_share']:6.0%}  {ok}{errors}"
        )
    print("(other: share of the gateway's core used by other processes while it was measured)")
