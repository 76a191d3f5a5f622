"""The two large-body phases of ``make bench`` alone (issue #34): the body sizes against the floor
relay (``bench/body_sizes.py``) and small requests beside ~31 MiB bodies (``bench/large.py``),
with the same gateway, fake upstream and placement as the full bench, without its other phases.

Run: ``.venv/bin/python -m bench.bodies --sizes-seconds 3 --sizes "1 MiB" --large-seconds 10``
(0 seconds skips a phase).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path

from bench import body_sizes
from bench.large import bench_large_bodies, print_large
from bench.run import LOAD_CORE, Upstream
from bench.targets import start_modelgate


async def run(args: argparse.Namespace) -> None:
    sizes = {label: size for label, size in body_sizes.SIZES.items() if label in args.sizes}
    with tempfile.TemporaryDirectory(prefix="modelgate-bench-bodies-") as tmp:
        workdir = Path(tmp)
        upstream = Upstream(workdir)
        try:
            target = start_modelgate(upstream.port, workdir)
            try:
                if args.large_seconds > 0:
                    print_large(await bench_large_bodies(target, upstream.port, args.large_seconds))
                if args.sizes_seconds > 0 and sizes:
                    results = await body_sizes.bench_body_sizes(
                        target, upstream.port, workdir, args.sizes_seconds, sizes
                    )
                    body_sizes.print_body_sizes(results)
            finally:
                target.stop()
        finally:
            upstream.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="modelgate's large-body benchmarks alone (docs/bench.md)")
    parser.add_argument("--sizes-seconds", type=float, default=3.0, help="seconds per body size; 0 skips")
    parser.add_argument(
        "--sizes", nargs="+", default=list(body_sizes.SIZES), choices=list(body_sizes.SIZES), metavar="SIZE"
    )
    parser.add_argument("--large-seconds", type=float, default=10.0, help="seconds per placement; 0 skips")
    args = parser.parse_args()
    os.sched_setaffinity(0, {LOAD_CORE})
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
