"""``make bench-edge``: normal requests while thousands of connections trickle or idle (issue #11).

2,000 connections send a request head one byte a second and 2,000 connect and send nothing, for
``--seconds`` (60); each reconnects as soon as the gateway closes it, as an attacker would. Small
chat requests (concurrency 2) run throughout; their p50 is compared with a quiet baseline taken
first. Same layout as ``make bench``: the gateway on core 0, everything else on core 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import load as lg
from bench.run import LOAD_CORE, Upstream
from bench.targets import GATEWAY_CORE, Target, start_modelgate

TRICKLE_HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\nx-slow: "


@dataclass
class Attack:
    trickling: int
    idle: int
    connects: int = 0
    cut_by_server: int = 0
    refused: int = 0


async def attacker(port: int, trickle: bool, attack: Attack, until: float) -> None:
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            attack.refused += 1
            await asyncio.sleep(0.5)
            continue
        attack.connects += 1
        try:
            if trickle:
                writer.write(TRICKLE_HEAD)
            while time.monotonic() < until:
                if trickle:
                    writer.write(b"x")
                    await writer.drain()
                try:
                    data = await asyncio.wait_for(reader.read(4096), 1.0)
                except TimeoutError:
                    continue
                if not data or b"HTTP/1.1" in data:
                    attack.cut_by_server += 1
                    break
        except OSError:
            attack.cut_by_server += 1
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


def small_load(target: Target) -> lg.Load:
    chat = next(ep for ep in target.endpoints if ep.name == "chat")
    request = lg.build_request("127.0.0.1", target.port, chat.path, chat.headers, chat.body(False))
    return lg.Load("small chat", "127.0.0.1", target.port, request, core=GATEWAY_CORE)


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="modelgate-bench-edge-") as tmp:
        workdir = Path(tmp)
        upstream = Upstream(workdir)
        target = start_modelgate(upstream.port, workdir)
        try:
            (quiet,) = await lg.together([(small_load(target), 2)], args.baseline)
            attack = Attack(args.trickling, args.idle)
            until = time.monotonic() + args.seconds
            attackers = [
                asyncio.create_task(attacker(target.port, i < args.trickling, attack, until))
                for i in range(args.trickling + args.idle)
            ]
            await asyncio.sleep(2.0)  # every attacker connected before measuring
            (under,) = await lg.together([(small_load(target), 2)], args.seconds - 4.0)
            await asyncio.gather(*attackers)
        finally:
            target.stop()
            upstream.stop()
    q50, a50 = lg.pct(quiet.latencies, 0.5) * 1000, lg.pct(under.latencies, 0.5) * 1000
    print(f"\n== edge: {args.trickling} trickling + {args.idle} idle connections for {args.seconds:g} s ==")
    print(f"quiet:  {quiet.completed} small requests, p50 {q50:.2f} ms, errors {quiet.errors}")
    print(
        f"attack: {under.completed} small requests, p50 {a50:.2f} ms, p99 "
        f"{lg.pct(under.latencies, 0.99) * 1000:.2f} ms, max {max(under.latencies, default=0) * 1000:.2f} ms, "
        f"errors {under.errors} {under.first_error}"
    )
    print(f"p50 under attack / quiet: {a50 / q50:.2f} (budget <= 3)")
    print(
        f"attack connections: {attack.connects} made, {attack.cut_by_server} closed by the gateway "
        f"(head timeout), {attack.refused} refused"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--baseline", type=float, default=10.0)
    parser.add_argument("--trickling", type=int, default=2000)
    parser.add_argument("--idle", type=int, default=2000)
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    os.sched_setaffinity(0, {LOAD_CORE})
    import uvloop

    uvloop.run(run(args))


if __name__ == "__main__":
    main()
