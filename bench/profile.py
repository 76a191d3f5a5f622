"""Profile the gateway's hot path under load with py-spy: what costs what, in % of samples.

Starts the fake upstream and the gateway exactly as ``make bench`` does (real keys, limits,
reserve/settle, usage records), drives one endpoint at a fixed concurrency and samples the gateway
with ``py-spy record --gil`` (only the thread holding the GIL, so idle waits do not count).
Prints the top functions by self and by inclusive time, and the share of each package.

Run: ``make bench-profile ARGS="--endpoint chat --concurrency 16 [--store postgresql]"`` or
``.venv/bin/python -m bench.profile --endpoint chat --stream``. py-spy is installed into the
project's ``.venv`` on first use (a bench tool, not a project dependency).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import load as lg
from bench import modes
from bench.run import LOAD_CORE, MARKER, Upstream
from bench.targets import start_modelgate

AREAS = [
    ("modelgate/storage", "storage (modelgate)"),
    ("asyncpg/", "asyncpg (PostgreSQL client)"),
    ("redis/", "redis-py (Redis client)"),
    ("modelgate/upstream", "upstream client (modelgate)"),
    ("modelgate/formats", "formats (taps, codecs)"),
    ("modelgate/", "modelgate other (pipeline, auth, relay)"),
    ("aiohttp/", "aiohttp (upstream HTTP)"),
    ("starlette/", "starlette"),
    ("uvicorn/", "uvicorn"),
    ("concurrent/futures", "thread pool hand-off"),
    ("asyncio/", "asyncio"),
]


def py_spy() -> str:
    found = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if found:
        return found
    print("bench: installing py-spy into the venv (a bench tool, not a project dependency)")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "py-spy"], check=True)
    return str(Path(sys.executable).parent / "py-spy")


def _norm(frame: str) -> str:
    frame = re.sub(r":\d+\)$", ")", frame)
    return re.sub(r"\(/.*?/(site-packages|src|python3\.\d+)/", "(", frame)


def report(raw: Path, top: int) -> None:
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    areas: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [_norm(f) for f in stack.split(";")]
        own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
        leaf = stack.split(";")[-1]
        areas[next((name for key, name in AREAS if key in leaf), "other (C, stdlib)")] += n
    if not total:
        print("no samples")
        return
    print(f"\n{total} samples of the GIL-holding thread")
    print("\n-- where the time is spent (leaf frame's package) --")
    for name, n in areas.most_common():
        print(f"{100 * n / total:5.1f}%  {name}")
    print(f"\n-- top {top} functions, self time --")
    for f, n in own.most_common(top):
        print(f"{100 * n / total:5.1f}%  {f}")
    print(f"\n-- top {top} functions, inclusive (modelgate, aiohttp, starlette) --")
    shown = 0
    for f, n in incl.most_common():
        if any(k in f for k in ("modelgate", "aiohttp", "starlette", "sqlite", "httptools_impl")):
            print(f"{100 * n / total:5.1f}%  {f}")
            shown += 1
            if shown >= top:
                break


async def run(args: argparse.Namespace) -> None:
    spy = py_spy()
    with tempfile.TemporaryDirectory(prefix="modelgate-profile-") as tmp:
        workdir = Path(tmp)
        upstream = Upstream(workdir)
        if args.store == "postgresql":
            target, _ = await modes.start_postgresql_mode(upstream.port, workdir)
        else:
            target = start_modelgate(upstream.port, workdir)
        try:
            upstream.configure(chunks=args.chunks, delay_ms=args.delay_ms)
            ep = next(e for e in target.endpoints if e.name == args.endpoint)
            req = lg.build_request("127.0.0.1", target.port, ep.path, ep.headers, ep.body(args.stream))
            load = lg.Load(ep.name, "127.0.0.1", target.port, req, MARKER if args.stream else b"")
            await lg.interleaved([load], args.concurrency, 1.0)
            out = workdir / "profile.txt"
            cmd = [spy, "record", "--pid", str(target.proc.pid), "--duration", str(int(args.seconds))]
            cmd += ["--rate", "500", "--format", "raw", "--output", str(out), "--nonblocking", "--gil"]
            spy_proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            (stats,) = await lg.interleaved([load], args.concurrency, args.seconds)
            log = spy_proc.communicate()[0].decode(errors="replace")
            what = f"{args.endpoint} {'stream' if args.stream else 'whole'} c={args.concurrency}"
            print(f"{what}: {stats.rps:.0f} req/s, p50 {lg.pct(stats.latencies, 0.5) * 1000:.2f} ms")
            if not out.exists():
                raise SystemExit(f"py-spy wrote no profile (needs ptrace permission):\n{log}")
            if args.keep:
                shutil.copy(out, args.keep)
            report(out, args.top)
        finally:
            target.stop()
            upstream.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="profile the gateway under load (py-spy)")
    parser.add_argument("--endpoint", choices=["messages", "chat", "responses"], default="chat")
    parser.add_argument("--stream", action="store_true", help="streamed requests")
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--delay-ms", type=float, default=0.0, help="pause between streamed chunks")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--store",
        choices=["sqlite", "postgresql"],
        default="sqlite",
        help="postgresql: the ledger in PostgreSQL, windows in Redis (through bench/run.sh, which starts them)",
    )
    parser.add_argument("--keep", help="copy the raw py-spy profile here (flamegraph input)")
    args = parser.parse_args()
    os.sched_setaffinity(0, {LOAD_CORE})
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
