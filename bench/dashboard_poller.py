"""A dashboard left open, in a process of its own: ``make bench``'s data-size modes run one per
gateway while they measure small requests' p99 "while a dashboard polls" (bench/datasize.py).

A browser is not on the machine it measures; here the poller has to share the load generator's
core, so it is built to cost that core as little as the browser would cost it (nothing):

- a process of its own, not a task in the load generator's event loop: there, its HTTP client
  work (building requests, reading the answers) stalled the loop that times the chat requests,
  and every request in flight looked slower by that stall, whatever the gateway did;
- a lean client: prebuilt request bytes on one kept-alive socket, answers read by their
  content-length (as ``bench.load``), not httpx (about a millisecond of CPU per call there, on
  the core that also runs the load generator and the fake upstream);
- at nice 19, so the load generator and the upstream are never made to wait for it.

The gateway's side is whole: it parses, authenticates, reads, encodes and sends every report as
for any client. Like the dashboard (``dashboard/api.js``) it sends back the ``ETag`` of each
path's last answer in ``If-None-Match``.

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
import socket
import time
from types import FrameType
from urllib.parse import urlsplit

TOKEN_ENV = "BENCH_ADMIN_TOKEN"


class Connection:
    """One kept-alive HTTP/1.1 connection; ``get`` returns the status and the answer's headers."""

    def __init__(self, host: str, port: int, token: str) -> None:
        self.sock = socket.create_connection((host, port), timeout=60)
        self.head = f"Host: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
        self.buf = b""

    def get(self, path: str, if_none_match: str | None) -> tuple[int, dict[str, str]]:
        extra = f"If-None-Match: {if_none_match}\r\n" if if_none_match else ""
        self.sock.sendall(f"GET {path} HTTP/1.1\r\n{self.head}{extra}\r\n".encode())
        while b"\r\n\r\n" not in self.buf:
            self._read()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))  # a 304 has no body
        while len(self.buf) < length:
            self._read()
        self.buf = self.buf[length:]
        return status, headers

    def _read(self) -> None:
        data = self.sock.recv(1 << 16)
        if not data:
            raise ConnectionError("the gateway closed the connection")
        self.buf += data

    def close(self) -> None:
        self.sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the gateway's base URL, e.g. http://127.0.0.1:8080")
    parser.add_argument("paths", nargs="+", help="admin API paths, e.g. /admin/api/usage/daily")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between rounds")
    args = parser.parse_args()
    os.nice(19)
    stopping = False

    def stop(_signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    statuses: collections.Counter[int] = collections.Counter()
    rounds = 0
    # What the dashboard keeps between polls: the last ETag of each path.
    etags: dict[str, str] = {}
    where = urlsplit(args.url)
    conn = Connection(where.hostname or "127.0.0.1", where.port or 80, os.environ[TOKEN_ENV])
    try:
        while not stopping:
            for path in args.paths:
                status, headers = conn.get(path, etags.get(path))
                statuses[status] += 1
                if status == 200 and "etag" in headers:
                    etags[path] = headers["etag"]
                if stopping:
                    break
            rounds += 1
            if rounds == 1:
                print("polling", flush=True)  # the bench starts measuring after this line
            time.sleep(args.interval)
    finally:
        conn.close()
    print(json.dumps({"rounds": rounds, "statuses": dict(statuses)}), flush=True)


if __name__ == "__main__":
    main()
