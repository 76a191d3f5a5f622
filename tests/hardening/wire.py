"""Raw HTTP/1.1 over a socket, for what SDK clients never send: partial heads, slow bodies,
broken framing, upgrades, and more open connections than a server allows."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass
class RawReply:
    status: int
    headers: dict[str, str]
    body: bytes
    #: The server closed the connection after this reply.
    closed: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def json(self) -> Any:
        return orjson.loads(self.body)


def connect(port: int, timeout: float = 10.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.settimeout(timeout)
    return sock


def read_reply(sock: socket.socket) -> RawReply:
    """One response (content-length framed, as every refusal is), and whether the peer closed."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a response head: {data!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    closed = False
    sock.settimeout(2.0)
    try:
        closed = sock.recv(1) == b""
    except TimeoutError:
        closed = False
    except ConnectionResetError:
        closed = True
    return RawReply(status, headers, rest[:length], closed)


def request_head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()
