"""Floors: what the HTTP libraries alone cost, measured like the gateway (``make bench ARGS=--floors``).

Each floor is a relay with no gateway work at all (no auth, limits, ledger, taps), run on core 0
against the same fake upstream and measured with the same load: Chat whole requests at c = 16
(requests per busy core) and paced 50- vs 2-chunk streams (CPU per chunk). The distance between a
floor and modelgate is what the gateway's own work costs; a budget below a floor cannot be met
with that pair of libraries.

- ``uvicorn+aiohttp``: the pair modelgate runs on (ASGI server, pooled client), relaying bytes.
- ``aiohttp+aiohttp``: aiohttp's own server in front of the same client.
- ``raw``: uvloop protocols forwarding bytes between the two sockets (no HTTP parsing): what the
  kernel, loopback TCP and the event loop cost per chunk, the floor under any Python stack.

With ``--workers N`` the uvicorn+aiohttp relay is also run as N processes on one port
(SO_REUSEPORT), on the cores the gateway's workers get: what N processes cost this machine before
any gateway work (bench/modes.py compares it with the one-process relay).

Run one relay: ``python -m bench.floors KIND PORT UPSTREAM_PORT``.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, cast

import aiohttp
import uvloop

from modelgate.config import ServerConfig
from modelgate.offload.heap import keep_body_buffers

KINDS = ("uvicorn+aiohttp", "aiohttp+aiohttp", "raw")
#: The uvicorn+aiohttp relay as one of several processes on a port (``--workers N --floors``).
PROCESSES = "uvicorn+aiohttp/reuseport"
UPSTREAM_HEADERS = {"authorization": "Bearer sk-bench-upstream", "content-type": "application/json"}


class _Client:
    """One pooled aiohttp session, created inside the running loop."""

    def __init__(self, upstream_port: int) -> None:
        self.url = f"http://127.0.0.1:{upstream_port}/v1/chat/completions"
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=0)
            self._session = aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())
        return self._session


def run_uvicorn(port: int, upstream_port: int, *, reuse_port: bool = False) -> None:
    import socket

    import uvicorn

    client = _Client(upstream_port)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await receive()
            await send({"type": "lifespan.startup.complete"})
            await receive()
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["method"] == "GET":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        parts = []  # joined once: adding each part to the last would copy a large body many times
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(parts)
        reply = await client.session().post(client.url, data=body, headers=UPSTREAM_HEADERS)
        kind = reply.headers.get("content-type", "application/json").encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", kind)]})
        while chunk := await reply.content.readany():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        reply.release()
        await send({"type": "http.response.body", "body": b""})

    if not reuse_port:
        uvicorn.run(app, host="127.0.0.1", port=port, loop="uvloop", log_level="warning", access_log=False)
        return
    # One of several processes on one port (SO_REUSEPORT): the floor of `serve --workers N`.
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    config = uvicorn.Config(app, loop="uvloop", log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


def run_aiohttp(port: int, upstream_port: int) -> None:
    from aiohttp import web

    client = _Client(upstream_port)

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.method == "GET":
            return web.Response(text="ok")
        body = await request.read()
        reply = await client.session().post(client.url, data=body, headers=UPSTREAM_HEADERS)
        out = web.StreamResponse(headers={"content-type": reply.headers.get("content-type", "")})
        await out.prepare(request)
        while chunk := await reply.content.readany():
            await out.write(chunk)
        reply.release()
        await out.write_eof()
        return out

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    uvloop.install()
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


class _UpstreamSide(asyncio.Protocol):
    def __init__(self, client: asyncio.Transport) -> None:
        self.client = client

    def data_received(self, data: bytes) -> None:
        self.client.write(data)


class _ClientSide(asyncio.Protocol):
    """Forwards a client connection's bytes to its own upstream connection and back."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.transport: asyncio.Transport | None = None
        self.upstream: asyncio.Transport | None = None
        self.pending: list[bytes] = []
        self.connecting: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream protocol is always handed a Transport (asyncio types it as the base class).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        if data.startswith(b"GET"):  # the harness's readiness probe
            self.transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        elif self.upstream is not None:
            self.upstream.write(data)
        else:
            self.pending.append(data)
            if self.connecting is None:
                self.connecting = asyncio.ensure_future(self._connect())

    async def _connect(self) -> None:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        client = self.transport
        self.upstream, _ = await loop.create_connection(
            lambda: _UpstreamSide(client), "127.0.0.1", self.upstream_port
        )
        for data in self.pending:
            self.upstream.write(data)
        self.pending.clear()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.upstream is not None:
            self.upstream.close()


def run_raw(port: int, upstream_port: int) -> None:
    async def serve() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _ClientSide(upstream_port), "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(serve())


def main() -> None:
    kind, port, upstream_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    # The heap kept for large bodies as the gateway keeps it (``modelgate serve`` does the same at
    # start with its default ``server.body_arena_bytes``): left to glibc's adaptive thresholds, the
    # relay's cost per MiB depended on which bodies it had freed before (0.8 to 5.5 ms per MiB of
    # the same 1 MiB many-turns body in different runs), so a ratio to it depended on the order of
    # the points and on what ran before them.
    keep_body_buffers(ServerConfig().body_arena_bytes)
    runners = {"uvicorn+aiohttp": run_uvicorn, "aiohttp+aiohttp": run_aiohttp, "raw": run_raw}
    if kind == PROCESSES:
        run_uvicorn(port, upstream_port, reuse_port=True)
        return
    runners[kind](port, upstream_port)


if __name__ == "__main__":
    main()
