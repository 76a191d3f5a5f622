"""A seeded generator of requests broken below HTTP semantics, for the connection layer
(``server.protocol``): framing, header syntax, request lines, versions. What an SDK never sends
and only a raw socket can: each case says which error shape its path (and the headers parsed
before the break) must get."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

#: Paths with the shape a refusal on them takes: ``client`` paths answer Anthropic clients (an
#: ``anthropic-version`` header) in the Messages shape and others in OpenAI's; ``admin`` is the
#: admin API's own ``{"error": {"type", "message"}}``.
PATHS = {
    "/v1/messages": "messages",
    "/v1/messages/count_tokens": "messages",
    "/v1/chat/completions": "openai",
    "/v1/responses": "openai",
    "/v1/conversations": "openai",
    "/v1/models": "client",
    "/nope": "client",
    "/admin/api/keys": "admin",
    # The Gemini API's routes (the key in the query never reaches the refusal or a log).
    "/v1beta/models/aria-haiku-4.5:generateContent?key=sk-cs4-" + "Q" * 38: "google",
    "/v1/models/aria-haiku-4.5:streamGenerateContent?alt=sse": "google",
    "/v1/models/..%2F..:countTokens": "google",
}
#: Heads broken after a good request line; ``{tail}`` is where the request's own headers go.
BROKEN_HEADS = [
    b"content-length: nope\r\n",
    b"content-length: -1\r\n",
    b"content-length: 1, 2\r\n",
    b"content-length: 99999999999999999999999999\r\n",
    b"content-length: 5\r\ncontent-length: 6\r\n",
    b"transfer-encoding: chunked\r\ncontent-length: 3\r\n",
    b"x-bad\x01value: 1\r\n",
    b"x-bad: \x00\r\n",
    b"bad header: 1\r\n",
    b"no-colon\r\n",
    b" folded: line\r\n",
    b"x-a: 1\r\n continued\r\n",
    b": empty-name\r\n",
    b"x-a: 1\r\x0bx-b: 2\r\n",
]
#: Bodies broken after a good head that announces chunked framing.
BROKEN_CHUNKS = [
    b"zz\r\n",
    b"5\r\nab\r\n0\r\n\r\n",
    b"-1\r\nx\r\n",
    b"ffffffffffffffffffff\r\n",
    b"3;\x00\r\nabc\r\n",
]
#: Request lines broken after the target (the path is known, the version is not).
BROKEN_VERSIONS = [b"HTTP/1.1x", b"HTTP/9", b"HTTP/1.1 extra", b"http/1.1", b"HTTP/\x00"]


@dataclass(frozen=True)
class RawCase:
    raw: bytes
    path: str
    #: ``messages``, ``openai``, ``google`` or ``admin``: the shape the 4xx body must have.
    shape: str
    what: str


def _head(method: bytes, path: str, version: bytes, anthropic: bool) -> bytes:
    line = method + b" " + path.encode() + b" " + version + b"\r\nhost: 127.0.0.1\r\n"
    if anthropic:
        line += b"anthropic-version: 2023-06-01\r\n"
    # A header a continuation line may extend: the ones above are complete before the break.
    return line + b"x-pad: 1\r\n"


def raw_cases(seed: int, count: int) -> Iterator[RawCase]:
    rng = random.Random(seed)
    paths = list(PATHS)
    for _ in range(count):
        path = rng.choice(paths)
        anthropic = PATHS[path] == "client" and rng.random() < 0.5
        shape = "messages" if anthropic else PATHS[path].replace("client", "openai")
        kind = rng.choice(("head", "chunk", "version"))
        if kind == "head":
            broken = rng.choice(BROKEN_HEADS)
            raw = _head(b"POST", path, b"HTTP/1.1", anthropic) + broken + b"\r\n"
            what = f"header {broken!r}"
        elif kind == "chunk":
            broken = rng.choice(BROKEN_CHUNKS)
            head = _head(b"POST", path, b"HTTP/1.1", anthropic)
            raw = head + b"content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n" + broken
            what = f"chunk {broken!r}"
        else:
            broken = rng.choice(BROKEN_VERSIONS)
            raw = b"POST " + path.encode() + b" " + broken + b"\r\nhost: x\r\n\r\n"
            # The head is refused before any header is read: the path alone decides.
            shape = PATHS[path].replace("client", "openai")
            what = f"version {broken!r}"
        yield RawCase(raw, path, shape, what)
