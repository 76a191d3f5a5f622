"""The data-size modes' "p99 while a dashboard polls" (bench/datasize.py, docs/bench.md).

Each gateway gets a dashboard left open, in a process of its own (``bench.dashboard_poller``, as a
browser would be: not inside the load generator, whose event loop times the requests), pinned
beside the load generator. The small chat requests are measured in alternating slices: every
gateway quiet (every poller stopped with SIGSTOP), then every gateway polled (the pollers
continued), and so on for the whole run, so the neighbours' load on the shared machine hits the
quiet and the polled figures alike; the two were measured one after the other before, seconds
apart, and their ratio moved with that load.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from bench import dashboard_poller
from bench import load as lg
from bench.procs import Proc, pinned
from bench.targets import Target

#: The reports the polling dashboard asks for every 0.5 s, one call after another: the overview's
#: month summary (with its latest records), daily series and top keys, and the usage log's first
#: page (its total and facets too).
POLLED = (
    "/admin/api/usage",
    "/admin/api/usage/daily",
    "/admin/api/usage/top-keys",
    "/admin/api/usage/records",
)
#: After the pollers are stopped, a call still in flight is answered before the quiet slice starts.
SETTLE_SECONDS = 0.05


def start_poller(target: Target, token: str, workdir: Path, core: int) -> Proc:
    """A dashboard left open on ``target`` (``POLLED`` every 0.5 s), pinned to ``core``."""
    cmd = [sys.executable, "-m", "bench.dashboard_poller", f"http://127.0.0.1:{target.port}", *POLLED]
    env = {**os.environ, dashboard_poller.TOKEN_ENV: token}
    log = workdir / f"{target.name}-poller.log"
    return Proc(f"{target.name} dashboard", pinned(cmd, core), env=env, log=log)


async def wait_polling(poller: Proc, timeout: float = 30) -> None:
    """Until the poller has had its first round answered (it says so on its first line)."""
    deadline = time.perf_counter() + timeout
    while not poller.tail(1):
        if poller.popen.poll() is not None or time.perf_counter() > deadline:
            raise SystemExit(f"bench: {poller.name} did not start:\n{poller.tail()}")
        await asyncio.sleep(0.05)


def stop_poller(poller: Proc) -> dict[str, Any]:
    """Stops it; what it did (rounds, answers by status), from the line it prints on its way out."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(poller.pid, signal.SIGCONT)  # a stopped process would not see the SIGTERM
    poller.stop()
    try:
        done: dict[str, Any] = json.loads(poller.tail(1))
    except ValueError:
        raise SystemExit(f"bench: {poller.name} failed:\n{poller.tail()}") from None
    if set(done["statuses"]) - {"200", "304"}:
        raise SystemExit(f"bench: {poller.name} was refused: {done['statuses']}")
    return done


def _polling(pollers: list[Proc], on: bool) -> None:
    for poller in pollers:
        os.kill(poller.pid, signal.SIGCONT if on else signal.SIGSTOP)


async def quiet_and_polled(
    loads: list[lg.Load], pollers: list[Proc], concurrency: int, seconds: float, slice_seconds: float = 0.5
) -> tuple[list[lg.Stats], list[lg.Stats]]:
    """Each load for ``seconds`` with every poller stopped and ``seconds`` with every poller
    running, in alternating rounds (each round: one quiet slice per load, then one polled slice
    per load). Returns the quiet and the polled figures of each load."""
    pools = [lg.Pool(load) for load in loads]
    quiet = [lg.Stats() for _ in loads]
    polled = [lg.Stats() for _ in loads]
    try:
        for pool in pools:  # connect and warm each target before measuring
            await lg.timed_slice(pool, lg.Stats(), concurrency, 0.2)
        for _ in range(max(1, round(seconds / slice_seconds))):
            for on, stats in ((False, quiet), (True, polled)):
                _polling(pollers, on)
                if not on:
                    await asyncio.sleep(SETTLE_SECONDS)
                for pool, st in zip(pools, stats, strict=True):
                    await lg.timed_slice(pool, st, concurrency, slice_seconds)
    finally:
        _polling(pollers, True)
        for pool in pools:
            pool.close()
    return quiet, polled
