"""A real HTTP server on loopback that receives alert webhooks: it keeps every POST (headers and
exact body) and can answer the first ``fail_next`` of them with 500."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int

    @property
    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass
class Receiver:
    url: str
    received: list[Received] = field(default_factory=list)
    fail_next: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answered(self, status: int = 200) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.status == status]

    def events(self, event: str) -> list[Any]:
        return [
            r.json
            for r in self.answered()
            if r.json.get("event", r.json.get("modelgate", {}).get("event")) == event
        ]


@contextmanager
def webhook_receiver() -> Iterator[Receiver]:
    receiver = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            with receiver.lock:
                status = 500 if receiver.fail_next > 0 else 200
                receiver.fail_next = max(0, receiver.fail_next - 1)
                receiver.received.append(
                    Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body, status)
                )
            self.send_response(status)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, name="webhook-receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
