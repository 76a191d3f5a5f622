"""Hostile input at the HTTP layer (issue #28 item 6): broken framing, header syntax and request
lines sent over raw sockets get a 4xx whose JSON body has the wire format of the path (Messages
under ``/v1/messages``, by client on shared paths), never a 5xx or text (the requests carry no key: nothing can be charged).

``MODELGATE_TEST_FUZZ_COUNT`` scales it with the rest of the fuzz suite (a tenth as many here:
each case is its own connection); the seed is ``MODELGATE_TEST_FUZZ_SEED`` or a new one."""

from __future__ import annotations

import os
import random
from pathlib import Path

import orjson

from tests.fuzz.http_layer import RawCase, raw_cases
from tests.gateway_server import running_gateway
from tests.hardening.wire import connect, read_reply

COUNT = max(200, int(os.environ.get("MODELGATE_TEST_FUZZ_COUNT", "2000")) // 10)
SEED = int(os.environ.get("MODELGATE_TEST_FUZZ_SEED", "0") or random.randrange(1 << 30))


def check(case: RawCase, status: int, content_type: str, body: bytes) -> None:
    where = f"{case.what} on {case.path} (seed {SEED})"
    assert 400 <= status < 500, f"{status} for {where}: {body[:300]!r}"
    assert content_type.startswith("application/json"), f"{content_type} for {where}"
    parsed = orjson.loads(body)
    if case.shape == "google":
        assert set(parsed) == {"error"} and parsed["error"]["code"] == status, (where, parsed)
        assert isinstance(parsed["error"]["status"], str), (where, parsed)
        assert "sk-cs4-" not in body.decode("utf-8", "replace"), (where, parsed)
    elif case.shape == "messages":
        assert parsed["type"] == "error" and isinstance(parsed["error"]["type"], str), (where, parsed)
    elif case.shape == "openai":
        assert "type" not in parsed, (where, parsed)
        assert {"message", "type", "param", "code"} <= set(parsed["error"]), (where, parsed)
    else:
        assert isinstance(parsed["error"]["type"], str), (where, parsed)
        assert isinstance(parsed["error"]["message"], str), (where, parsed)


def test_broken_http_is_a_4xx_in_the_paths_wire_format(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "data", server={"header_timeout_seconds": 5}) as gateway:
        for case in raw_cases(SEED, COUNT):
            with connect(gateway.port) as sock:
                sock.sendall(case.raw)
                reply = read_reply(sock)
            check(case, reply.status, reply.headers.get("content-type", ""), reply.body)
