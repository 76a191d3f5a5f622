"""The upstream HTTP/1.1 client against scripted servers on loopback that write exact bytes:
keep-alive and the pool, body framings, codings, timeouts, flow control, TLS and hostile replies."""

from __future__ import annotations

import asyncio
import datetime
import gzip
import ssl
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from modelgate import errors
from modelgate.upstream import transport
from modelgate.upstream.base import (
    ConnectFailed,
    ConnectionCounts,
    ConnectTimeout,
    FirstByteTimeout,
    IdleTimeout,
    StreamBroken,
)
from modelgate.upstream.kind import TimeoutConfig
from modelgate.upstream.transport import HttpClient

FAST = TimeoutConfig(connect=0.5, first_byte=0.5, idle=0.3, total=5.0)
JSON = {"content-type": "application/json", "user-agent": "modelgate"}


@dataclass
class Seen:
    """What the scripted server saw: one entry per connection, its requests in order."""

    connections: list[list[tuple[str, dict[str, str], bytes]]] = field(default_factory=list)
    closed: list[int] = field(default_factory=list)

    @property
    def requests(self) -> list[tuple[str, dict[str, str], bytes]]:
        return [r for conn in self.connections for r in conn]


Script = Callable[[int, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]


async def read_request(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    line, *fields = head.decode().split("\r\n")[:-2]
    headers = {k.lower(): v for k, v in (f.split(": ", 1) for f in fields)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return line, headers, body


@asynccontextmanager
async def scripted(script: Script, tls: ssl.SSLContext | None = None) -> AsyncIterator[tuple[int, Seen]]:
    """A server answering each request with ``script(n, reader, writer)`` (n counts requests over
    all connections); the script returns False to end the connection."""
    seen = Seen()
    count = 0
    writers: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal count
        writers.append(writer)
        mine: list[tuple[str, dict[str, str], bytes]] = []
        seen.connections.append(mine)
        index = len(seen.connections) - 1
        try:
            while (request := await read_request(reader)) is not None:
                mine.append(request)
                count += 1
                if not await script(count, reader, writer):
                    break
                await writer.drain()
            else:
                seen.closed.append(index)
        except ConnectionError:
            seen.closed.append(index)
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    try:
        yield port, seen
    finally:
        server.close()
        for writer in writers:
            writer.close()
        await server.wait_closed()


def reply(body: bytes, *, status: str = "200 OK", extra: str = "") -> bytes:
    return f"HTTP/1.1 {status}\r\ncontent-length: {len(body)}\r\n{extra}\r\n".encode() + body


def answer(*chunks: bytes, keep: bool = True) -> Script:
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        for chunk in chunks:
            writer.write(chunk)
        return keep

    return script


@asynccontextmanager
async def pooled(limit: int = 4) -> AsyncIterator[HttpClient]:
    """A client (a provider's pool) for the block, closed after it."""
    client = HttpClient(label="'t'", timeouts=FAST, max_concurrency=limit)
    try:
        yield client
    finally:
        await client.aclose()


async def test_requests_reuse_one_connection_and_say_exactly_what_was_asked() -> None:
    script = answer(reply(b'{"ok":1}', extra="x-request-id: r1\r\n"))
    async with scripted(script) as (port, seen), pooled() as c:
        for _ in range(3):
            got = await c.post(f"http://127.0.0.1:{port}/v1/messages?beta=true", b'{"a":1}', JSON)
            assert (got.status, got.headers["x-request-id"], await got.read()) == (200, "r1", b'{"ok":1}')
            await got.close()
    assert len(seen.connections) == 1 and len(seen.requests) == 3
    line, headers, body = seen.requests[0]
    assert line == "POST /v1/messages?beta=true HTTP/1.1"
    assert headers == {
        "host": f"127.0.0.1:{port}",
        "content-type": "application/json",
        "user-agent": "modelgate",
        "content-length": "7",
    }
    assert body == b'{"a":1}'


async def test_chunked_stream_arrives_in_order_and_until_eof_bodies_end_with_the_connection() -> None:
    events = [b"data: one\n\n", b"data: two\n\n", b"data: [DONE]\n\n"]

    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        if n == 1:
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            for event in events:
                writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                await writer.drain()
                await asyncio.sleep(0.01)
            writer.write(b"0\r\n\r\n")
            return True
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it")
        return False

    async with scripted(script) as (port, seen), pooled() as c:
        got = await c.post(f"http://127.0.0.1:{port}/s", b"{}", JSON)
        assert b"".join([chunk async for chunk in got.iter_chunks()]) == b"".join(events)
        await got.close()
        whole = await c.post(f"http://127.0.0.1:{port}/w", b"{}", JSON)
        assert await whole.read() == b"all of it"
        await whole.close()
        again = await c.post(f"http://127.0.0.1:{port}/w", b"{}", JSON)
        assert await again.read() == b"all of it"
    # The until-EOF body's connection is not reused: a third request needed a new one.
    assert [len(conn) for conn in seen.connections] == [2, 1]


async def test_gzip_and_deflate_bodies_are_decoded_and_a_corrupt_one_is_a_broken_stream() -> None:
    text = b'{"content":"' + b"x" * 5000 + b'"}'
    bodies = [
        reply(gzip.compress(text), extra="content-encoding: gzip\r\n"),
        reply(zlib.compress(text), extra="content-encoding: deflate\r\n"),
        reply(b"\x1f\x8b\x08\x00garbage-not-gzip", extra="content-encoding: gzip\r\n"),
    ]

    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(bodies[n - 1])
        return True

    async with scripted(script) as (port, _), pooled() as c:
        for _ in range(2):
            got = await c.post(f"http://127.0.0.1:{port}/", b"{}", JSON)
            assert await got.read() == text
        bad = await c.post(f"http://127.0.0.1:{port}/", b"{}", JSON)
        with pytest.raises(StreamBroken, match="does not decompress"):
            await bad.read()


async def test_an_informational_head_is_skipped() -> None:
    script = answer(b"HTTP/1.1 100 Continue\r\n\r\n", reply(b"done", status="201 Created"))
    async with scripted(script) as (port, _), pooled() as c:
        got = await c.post(f"http://127.0.0.1:{port}/", b"{}", JSON)
        assert (got.status, await got.read()) == (201, b"done")


async def test_hostile_and_broken_replies_fail_in_the_gateways_terms() -> None:
    scripts = {
        "garbage": (answer(b"SSH-2.0-OpenSSH\r\n\r\n"), errors.UpstreamFailed, "malformed response"),
        "closed": (answer(keep=False), errors.UpstreamFailed, "closed before a response"),
        "endless head": (
            answer(b"HTTP/1.1 200 OK\r\nx-pad: " + b"a" * 32768, b"b" * 40000),
            errors.UpstreamFailed,
            "a head over 65536 bytes",
        ),
    }
    for name, (script, error, message) in scripts.items():
        async with scripted(script) as (port, _), pooled() as c:
            with pytest.raises(error, match=message):
                await c.post(f"http://127.0.0.1:{port}/", b"{}", JSON)
        assert name
    cut = answer(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly ten..", keep=False)
    async with scripted(cut) as (port, _), pooled() as c:
        got = await c.post(f"http://127.0.0.1:{port}/", b"{}", JSON)
        assert got.status == 200
        with pytest.raises(StreamBroken, match="broke mid-response"):
            await got.read()


async def test_a_header_with_a_line_break_is_refused_before_anything_is_sent() -> None:
    async with scripted(answer(reply(b"ok"))) as (port, seen), pooled() as c:
        with pytest.raises(ValueError, match="line break"):
            await c.post(f"http://127.0.0.1:{port}/", b"{}", {"x-trace": "a\r\nx-injected: 1"})
    assert seen.requests == []


async def test_refused_connections_and_silent_upstreams_time_out_as_their_phase() -> None:
    async with scripted(answer(reply(b"ok"))) as (port, _):
        pass  # the port is closed again
    async with pooled() as c:
        with pytest.raises(ConnectFailed, match=r"cannot connect \(ECONNREFUSED\)"):
            await c.post(f"http://127.0.0.1:{port}/", b"{}", JSON)

    async def silent(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        await reader.read()  # until the client gives up and closes
        return False

    async with scripted(silent) as (port, seen), pooled() as c:
        with pytest.raises(FirstByteTimeout, match=r"no response within 0\.5s"):
            await c.post(f"http://127.0.0.1:{port}/", b"{}", JSON)
    assert seen.closed == [] and len(seen.requests) == 1  # the server saw the client hang up


async def test_a_stalled_stream_hits_the_idle_timeout_and_its_connection_is_dropped() -> None:
    async def stall(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        if n == 1:
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
            await writer.drain()
            await reader.read()
            return False
        writer.write(reply(b"fresh"))
        return True

    async with scripted(stall) as (port, seen), pooled() as c:
        got = await c.post(f"http://127.0.0.1:{port}/", b"{}", JSON)
        received = []
        with pytest.raises(IdleTimeout, match=r"sent nothing for 0\.3s"):
            async for chunk in got.iter_chunks():
                received.append(chunk)
        assert received == [b"hello"]
        await got.close()
        after = await c.post(f"http://127.0.0.1:{port}/", b"{}", JSON)
        assert await after.read() == b"fresh"
    assert [len(conn) for conn in seen.connections] == [1, 1]


async def test_the_pool_limit_queues_requests_and_bounds_the_wait_by_the_connect_timeout() -> None:
    release = asyncio.Event()

    async def held(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nhi\r\n")
        await writer.drain()
        await release.wait()
        writer.write(b"0\r\n\r\n")
        return True

    async with scripted(held) as (port, seen), pooled(limit=1) as c:
        first = await c.post(f"http://127.0.0.1:{port}/", b"{}", JSON)
        with pytest.raises(ConnectTimeout, match=r"no connection within 0\.5s"):
            await c.post(f"http://127.0.0.1:{port}/", b"{}", JSON)
        waiting = asyncio.ensure_future(c.post(f"http://127.0.0.1:{port}/", b"{}", JSON))
        await asyncio.sleep(0.05)
        assert not waiting.done() and len(seen.requests) == 1
        assert c.connection_counts() == ConnectionCounts(busy=1, idle=0, waiting=1)
        release.set()
        assert b"".join([chunk async for chunk in first.iter_chunks()]) == b"hi"
        second = await waiting
        assert await second.read() == b"hi"
        assert c.connection_counts() == ConnectionCounts(busy=0, idle=1, waiting=0)
    assert len(seen.connections) == 1  # the queued request took the freed connection


async def test_a_large_body_goes_out_whole_and_a_big_stream_reply_pauses_then_frees_its_connection() -> None:
    big = bytes(range(256)) * (12 * 1024)  # 3 MiB: sent in slices
    answer_body = b"z" * (400 * 1024)  # past the high-water mark by its last read, unread

    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(reply(answer_body if n == 1 else b"next"))
        return True

    async with scripted(script) as (port, seen), pooled() as c:
        got = await c.post(f"http://127.0.0.1:{port}/", big, JSON)
        await asyncio.sleep(0.1)  # the reply arrives while nobody reads it
        total = 0
        async for chunk in got.iter_chunks():
            total += len(chunk)
        assert total == len(answer_body)
        again = await c.post(f"http://127.0.0.1:{port}/", b"{}", JSON)
        assert await asyncio.wait_for(again.read(), 2) == b"next"
    assert seen.requests[0][2] == big and len(seen.connections) == 1


async def test_closing_an_unread_reply_drops_its_connection_and_unsolicited_bytes_end_an_idle_one() -> None:
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        if n == 1:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
            return True
        writer.write(reply(b"ok") + b"HTTP/1.1 200 OK\r\n")  # a second head nobody asked for
        return True

    async with scripted(script) as (port, seen), pooled() as c:
        got = await c.post(f"http://127.0.0.1:{port}/", b"{}", JSON)
        await got.close()
        for _ in range(2):
            again = await c.post(f"http://127.0.0.1:{port}/", b"{}", JSON)
            assert await again.read() == b"ok"
            await asyncio.sleep(0.05)
    assert [len(conn) for conn in seen.connections] == [1, 1, 1]


async def test_idle_connections_are_closed_after_the_keepalive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "KEEPALIVE_SECONDS", 0.1)
    async with scripted(answer(reply(b"ok"))) as (port, seen), pooled() as c:
        first = await c.post(f"http://127.0.0.1:{port}/", b"{}", JSON)
        assert await first.read() == b"ok"
        for _ in range(50):
            if seen.closed:
                break
            await asyncio.sleep(0.02)
        assert seen.closed == [0]  # the sweep closed it
        second = await c.post(f"http://127.0.0.1:{port}/", b"{}", JSON)
        assert await second.read() == b"ok"
    assert len(seen.connections) == 2


def _certificate(where: Path, name: str) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = where / f"{name}.pem", where / f"{name}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_file, key_file


async def test_https_upstreams_are_verified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = _certificate(tmp_path, "localhost")
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    async with scripted(answer(reply(b"secure")), tls=server_tls) as (port, seen):
        async with pooled() as untrusting:
            with pytest.raises(ConnectFailed, match="SSLCertVerificationError"):
                await untrusting.post(f"https://localhost:{port}/", b"{}", JSON)
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        async with pooled() as trusting:
            got = await trusting.post(f"https://localhost:{port}/v1/x", b"{}", JSON)
            assert (got.status, await got.read()) == (200, b"secure")
    assert seen.requests[0][1]["host"] == f"localhost:{port}"
