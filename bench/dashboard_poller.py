"""A dashboard left open, in a process of its own: ``make bench``'s data-size modes run one per
gateway while they measure small requests' p99 "while a dashboard polls" (bench/datasize.py).

A browser is not part of the load generator: run inside the load generator's event loop, the
poller's own HTTP client work (building requests, reading and decoding the answers) stalled the
loop that times the chat requests, and every request in flight then looked slower by that stall,
whatever the gateway did. Here it runs as the browser would, beside the load generator on its
core, and only the gateway's answers cost the gateway anything.

Run: ``python -m bench.dashboard_poller URL [--interval 0.5] PATH...`` with the admin token in
``BENCH_ADMIN_TOKEN``; it polls the paths one after another every ``--interval`` seconds until it
is stopped (SIGTERM). It prints ``polling`` once its first round is answered, and on its way out
the number of rounds and of answers by status as one JSON line.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import time
from types import FrameType

import httpx

TOKEN_ENV = "BENCH_ADMIN_TOKEN"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the gateway's base URL, e.g. http://127.0.0.1:8080")
    parser.add_argument("paths", nargs="+", help="admin API paths, e.g. /admin/api/usage/daily")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between rounds")
    args = parser.parse_args()
    stopping = False

    def stop(_signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    statuses: collections.Counter[int] = collections.Counter()
    rounds = 0
    headers = {"authorization": f"Bearer {os.environ[TOKEN_ENV]}"}
    # What a browser's fetch keeps between polls: the last ETag of each path (sent back as
    # If-None-Match, so an unchanged report can be answered 304 without its body).
    etags: dict[str, str] = {}
    with httpx.Client(base_url=args.url, headers=headers, timeout=60) as client:
        while not stopping:
            for path in args.paths:
                sent = {"if-none-match": etags[path]} if path in etags else {}
                answer = client.get(path, headers=sent)
                statuses[answer.status_code] += 1
                if answer.status_code == 200 and "etag" in answer.headers:
                    etags[path] = answer.headers["etag"]
                if stopping:
                    break
            rounds += 1
            if rounds == 1:
                print("polling", flush=True)  # the bench starts measuring after this line
            time.sleep(args.interval)
    print(json.dumps({"rounds": rounds, "statuses": dict(statuses)}), flush=True)


if __name__ == "__main__":
    main()
