"""Measure the gateway's upstream HTTP client against aiohttp and httpx, streamed and whole.

A local aiohttp.web fake SSE server runs in a *separate process* (so the CPU time measured here is
the client's alone). For each client library and each concurrency level, N streaming requests of
``CHUNKS`` SSE events are issued through ONE shared pooled client, and we report requests/s (wall)
and client CPU milliseconds per request (``time.process_time``). ``--chunks 1`` is a whole answer
read at once. ``modelgate`` is ``upstream.transport.HttpClient`` (its own HTTP/1.1 pool).

Run: ``.venv/bin/python bench/http_clients.py [--requests 2000] [--chunks 50]``
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import socket
import time
from collections.abc import Awaitable, Callable

import aiohttp
import httpx
from aiohttp import web

CHUNK = b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hello "}}\n\n'


def _serve(port: int, chunks: int) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        for _ in range(chunks):
            await resp.write(CHUNK)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/messages", handler)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _wait_up(url: str) -> None:
    for _ in range(100):
        try:
            async with aiohttp.ClientSession() as s, s.post(url, data=b"{}") as r:
                await r.read()
                return
        except aiohttp.ClientError:
            await asyncio.sleep(0.05)
    raise RuntimeError("bench server did not start")


async def _run(one: Callable[[], Awaitable[int]], total: int, concurrency: int) -> tuple[float, float]:
    queue = iter(range(total))

    async def worker() -> None:
        for _ in queue:
            n = await one()
            assert n > 0

    wall0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return total / wall, cpu * 1000 / total


async def bench_aiohttp(url: str, total: int, concurrency: int) -> tuple[float, float]:
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> int:
            size = 0
            async with session.post(url, data=b'{"stream":true}') as resp:
                async for chunk in resp.content.iter_any():
                    size += len(chunk)
            return size

        await _run(one, concurrency, concurrency)  # warm the pool
        return await _run(one, total, concurrency)


async def bench_httpx(url: str, total: int, concurrency: int) -> tuple[float, float]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:

        async def one() -> int:
            size = 0
            async with client.stream("POST", url, content=b'{"stream":true}') as resp:
                async for chunk in resp.aiter_raw():
                    size += len(chunk)
            return size

        await _run(one, concurrency, concurrency)
        return await _run(one, total, concurrency)


async def bench_modelgate(url: str, total: int, concurrency: int) -> tuple[float, float]:
    from modelgate.upstream.kind import TimeoutConfig
    from modelgate.upstream.transport import HttpClient

    client = HttpClient(label="bench", timeouts=TimeoutConfig(), max_concurrency=concurrency)
    headers = {"content-type": "application/json"}
    try:

        async def one() -> int:
            size = 0
            reply = await client.post(url, b'{"stream":true}', headers)
            async for chunk in reply.iter_chunks():
                size += len(chunk)
            await reply.close()
            return size

        await _run(one, concurrency, concurrency)
        return await _run(one, total, concurrency)
    finally:
        await client.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--concurrency", type=int, nargs="*", default=[16, 64])
    args = parser.parse_args()

    port = _free_port()
    server = multiprocessing.Process(target=_serve, args=(port, args.chunks), daemon=True)
    server.start()
    url = f"http://127.0.0.1:{port}/v1/messages"
    try:
        await _wait_up(url)
        print(f"{args.requests} streaming requests x {args.chunks} SSE chunks, server in a separate process")
        print(f"{'client':9} {'conc':>5} {'req/s':>9} {'client CPU ms/req':>18}")
        for conc in args.concurrency:
            for name, fn in (
                ("modelgate", bench_modelgate),
                ("aiohttp", bench_aiohttp),
                ("httpx", bench_httpx),
            ):
                rps, cpu_ms = await fn(url, args.requests, conc)
                print(f"{name:9} {conc:>5} {rps:>9.0f} {cpu_ms:>18.3f}")
    finally:
        server.terminate()
        server.join()


if __name__ == "__main__":
    asyncio.run(main())
