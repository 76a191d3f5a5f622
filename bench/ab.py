"""``make bench-ab REF=<commit>``: this working tree against another commit, in one run
(``THIS=<commit>`` puts a second commit in the working tree's place: two commits of the past).

Both gateways run on core 0 at once, from their own source trees (the other commit is checked out
into a temporary git worktree and put first on its ``PYTHONPATH``), against the same fake upstream
and load generator on core 1. Every measurement alternates the two in 0.5 s slices
(``bench.load.interleaved``), so a noisy neighbour or a frequency change hits both alike; the
figures are the ones ``make bench`` reports: requests per busy gateway core (whole requests) and
CPU per streamed chunk (paced streams of 50 minus 2 chunks, / 48). Ratios are this tree / REF.

``ARGS="--store postgresql"`` (through ``bench/run.sh``, which starts PostgreSQL and Redis): each
gateway keeps its ledger in a database of its own and its windows in the shared Redis, and a
side's CPU is its gateway's plus that of the PostgreSQL server processes connected to its database
(Redis, shared, is in neither); requests per core are then per core of gateway and PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from bench import load as lg
from bench import modes
from bench.procs import backends, cpu_ns, tree
from bench.run import MARKER, Upstream
from bench.targets import GATEWAY_CORE, KEY_LIMITS, ROOT, Target, start_modelgate


@contextlib.contextmanager
def checkout(ref: str, where: Path) -> Iterator[Path]:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), ref], check=True)
    try:
        yield where
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)], check=False)


@dataclass
class Side:
    """One gateway under comparison and what its CPU is measured over."""

    target: Target
    #: PostgreSQL's postmaster and the side's database (``--store postgresql``), else None.
    database: tuple[int, str] | None = None

    def cpu(self) -> int:
        pids = tree(self.target.proc.pid)
        if self.database is not None:
            pids += backends(*self.database)
        return cpu_ns(pids)


async def start_side(
    source: Path | None, upstream_port: int, workdir: Path, store: str, pool: int = 1, limits: str = "rpm"
) -> Side:
    """A gateway running the code under ``source`` (None: this tree) on ``store``."""
    if store == "sqlite":
        return Side(
            await asyncio.to_thread(start_from, source, upstream_port, workdir, pool=pool, limits=limits)
        )
    admin_url, redis_url = modes.service_urls()
    database_url = await modes.create_database(admin_url)
    services = await modes.service_pids(database_url, redis_url)
    for pid in services.values():
        modes.pin_tree(pid, modes.SERVICE_CORE)
    target = await asyncio.to_thread(
        start_from,
        source,
        upstream_port,
        workdir,
        database_url=database_url,
        redis_url=redis_url,
        pool=pool,
        limits=limits,
    )
    return Side(target, (services["postgresql"], urlsplit(database_url).path.lstrip("/")))


def start_from(
    source: Path | None,
    upstream_port: int,
    workdir: Path,
    *,
    database_url: str | None = None,
    redis_url: str | None = None,
    pool: int = 1,
    limits: str = "rpm",
) -> Target:
    """A gateway running the code under ``source`` (None: this tree)."""
    workdir.mkdir(parents=True)
    saved = os.environ.get("PYTHONPATH")
    if source is not None:
        os.environ["PYTHONPATH"] = str(source)
    try:
        return start_modelgate(
            upstream_port, workdir, database_url=database_url, redis_url=redis_url, pool=pool, limits=limits
        )
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def loads(side: Side, name: str, stream: bool) -> lg.Load:
    target = side.target
    ep = next(e for e in target.endpoints if e.name == name)
    req = lg.build_request("127.0.0.1", target.port, ep.path, ep.headers, ep.body(stream))
    return lg.Load(
        f"{target.name} {name}",
        "127.0.0.1",
        target.port,
        req,
        MARKER if stream else b"",
        side.cpu,
        GATEWAY_CORE,
    )


async def compare(ref_target: Side, ours: Side, upstream: Upstream, args: argparse.Namespace) -> list[str]:
    rows = []
    upstream.configure()
    for name in args.endpoints:
        for stream in (False, True):
            await lg.interleaved([loads(ref_target, name, stream), loads(ours, name, stream)], 4, 1.0)
    for name in args.endpoints:
        for c in args.concurrency:
            a, b = await lg.interleaved(
                [loads(ref_target, name, False), loads(ours, name, False)], c, args.seconds
            )
            rows.append(
                f"{name:10} c={c:<3} req/s/core  ref {a.rps_per_core:8,.0f}   this {b.rps_per_core:8,.0f}"
                f"   ratio {b.rps_per_core / a.rps_per_core:5.3f}   (errors {a.errors}/{b.errors})"
                f"   p50 ms ref {lg.pct(a.latencies, 0.5) * 1000:.2f} this {lg.pct(b.latencies, 0.5) * 1000:.2f}"
            )
    for name in args.endpoints:
        per_stream: dict[int, tuple[float, float]] = {}
        for chunks in (50, 2):
            upstream.configure(chunks=chunks, delay_ms=2)
            a, b = await lg.interleaved(
                [loads(ref_target, name, True), loads(ours, name, True)], 2, args.seconds
            )
            per_stream[chunks] = (
                a.cpu_ns / 1000 / max(a.completed, 1),
                b.cpu_ns / 1000 / max(b.completed, 1),
            )
        upstream.configure()
        ref_chunk = (per_stream[50][0] - per_stream[2][0]) / 48
        our_chunk = (per_stream[50][1] - per_stream[2][1]) / 48
        rows.append(
            f"{name:10} stream     CPU µs/chunk ref {ref_chunk:8.1f}   this {our_chunk:8.1f}"
            f"   diff {our_chunk - ref_chunk:+5.1f} µs"
        )
    return rows


async def main_async(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="modelgate-bench-ab-") as tmp, contextlib.ExitStack() as trees:
        work = Path(tmp)
        ref_tree = trees.enter_context(checkout(args.ref, work / "ref"))
        this_tree = trees.enter_context(checkout(args.this, work / "this")) / "src" if args.this else None
        upstream = Upstream(work)
        started: list[Side] = []
        try:
            ref_target = await start_side(
                ref_tree / "src", upstream.port, work / "a", args.store, args.pool, args.limits
            )
            started.append(ref_target)
            ours = await start_side(this_tree, upstream.port, work / "b", args.store, args.pool, args.limits)
            started.append(ours)
            rows = await compare(ref_target, ours, upstream, args)
        finally:
            for side in started:
                side.target.stop()
            upstream.stop()
    this = args.this or "this tree"
    print(f"\n== {this} (this) vs {args.ref} (ref), {args.store}, interleaved on core {GATEWAY_CORE} ==")
    print("\n".join(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description="this tree against another commit (bench/ab.py)")
    parser.add_argument("--ref", required=True, help="the commit to compare with (e.g. HEAD~3)")
    parser.add_argument("--this", help="a commit to run instead of the working tree")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per target per point")
    parser.add_argument("--endpoints", nargs="+", default=["messages", "chat", "responses"])
    parser.add_argument("--concurrency", nargs="+", type=int, default=[16, 64])
    parser.add_argument(
        "--pool",
        type=int,
        default=1,
        choices=range(1, 9),
        metavar="N",
        help="N credentials per provider (1-8): session affinity keys and pins every request",
    )
    parser.add_argument(
        "--limits",
        choices=sorted(KEY_LIMITS),
        default="rpm",
        help="the bench keys' limits (never reached): rpm, rpm-month, all (tpm, concurrency, the account's)",
    )
    parser.add_argument(
        "--store",
        choices=["sqlite", "postgresql"],
        default="sqlite",
        help="postgresql: each side on a database of its own, its server processes' CPU counted",
    )
    args = parser.parse_args()
    os.sched_setaffinity(0, {1})
    try:
        import uvloop
    except ImportError:
        asyncio.run(main_async(args))
    else:
        uvloop.run(main_async(args))


if __name__ == "__main__":
    main()
