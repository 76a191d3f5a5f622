"""An upstream that answers each connection's one request with exact bytes of the test's choosing
(then closes it): for wire shapes the aiohttp-based fakes cannot or would not write (one write
for a whole stream, malformed heads and framings)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def _read_request(conn: socket.socket) -> bytes:
    """The request's body (empty when the client closed first)."""
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(65536)
        if not more:
            return b""
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += conn.recv(65536)
    return body


@contextmanager
def raw_upstream(answer: Callable[[bytes], bytes]) -> Iterator[str]:
    """Serves on loopback until the block ends; each connection's request body is given to
    ``answer``, whose bytes are sent back in one write before the connection is closed. Yields
    the base URL."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            # A client that went away is no reason to stop: the next connection is served.
            with conn, contextlib.suppress(OSError):
                conn.sendall(answer(_read_request(conn)))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        server.close()
