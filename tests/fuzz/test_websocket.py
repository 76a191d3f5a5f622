"""Hostile use of the Responses WebSocket (issue #27): hostile upgrades (no key, bad keys, broken
handshakes, other paths and methods) and hostile messages on accepted sockets (not JSON, binary,
over the size limit, unknown types, missing and mistyped fields, floods). Never a 5xx: every
refused upgrade is an HTTP 4xx with an OpenAI-shaped JSON body, every refused message an ``error``
message with a 4xx ``status`` or a close with a code; nothing is charged for refused work and the
ledger is exact after.

Messages above 2 KiB are prepared in the body workers (``server.offload_body_bytes``), so that
path is fuzzed too. ``MODELGATE_TEST_FUZZ_SEED`` reproduces a run.
"""

from __future__ import annotations

import json
import os
import random
import socket as sockets
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect
from websockets.sync.connection import Connection

from modelgate.clock import month_of
from tests.gateway_server import GatewayServer, running_gateway
from tests.hardening.wire import read_reply, request_head
from tests.polling import wait_until

SEED = int(os.environ.get("MODELGATE_TEST_FUZZ_SEED", "0") or random.randrange(1 << 30))
SOCKETS = 24
MESSAGES_PER_SOCKET = 14
MAX_MESSAGE = 64 * 1024
CLOSE_CODES = {1000, 1003, 1007, 1008, 1009}
MODEL = "nova-6-astra"


def user(text: str) -> list[dict[str, Any]]:
    return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}]


def hostile_message(rng: random.Random) -> tuple[str, str | bytes]:
    """(tag, message) — a text message or a binary one."""
    valid: dict[str, Any] = {"type": "response.create", "model": MODEL, "input": user("fuzz"), "store": False}
    choices: list[tuple[str, Any]] = [
        ("valid", valid),
        ("valid_large", {**valid, "input": user("word " * rng.randint(600, 3000))}),
        ("prewarm", {**valid, "generate": False}),
        ("not_json", "{not json" + "x" * rng.randint(0, 50)),
        ("json_array", "[1, 2, 3]"),
        ("json_scalar", rng.choice(["42", "null", '"text"', "true"])),
        ("no_type", {k: v for k, v in valid.items() if k != "type"}),
        ("unknown_type", {**valid, "type": rng.choice(["response.cancel", "session.update", "", 7, None])}),
        ("no_model", {k: v for k, v in valid.items() if k != "model"}),
        ("bad_model", {**valid, "model": rng.choice(["nova-nope", "aria-sonnet-4.6", 12, [], "x" * 300])}),
        ("no_input", {k: v for k, v in valid.items() if k != "input"}),
        ("bad_input", {**valid, "input": rng.choice([5, {"a": 1}, [1, 2], [{"type": "bogus"}], None])}),
        ("generate_mistyped", {**valid, "generate": rng.choice(["no", 0, None, []])}),
        ("stream_id", {**valid, "stream_id": "lane-1"}),
        ("stream_false", {**valid, "stream": False}),
        ("background", {**valid, "background": True}),
        ("unknown_previous", {**valid, "previous_response_id": rng.choice(["resp_x", "", 3, "r" * 500])}),
        ("deep", {**valid, "metadata": json.loads("[" * 300 + "]" * 300)}),
        ("max_tokens_mistyped", {**valid, "max_output_tokens": rng.choice([-1, "many", 10**30])}),
        ("processed", {"type": "response.processed", "response_id": "resp_whatever"}),
        ("binary", b"\x00\x01binary" + os.urandom(rng.randint(0, 64))),
        ("oversize", {**valid, "input": user("y" * (MAX_MESSAGE + 10))}),
    ]
    tag, value = rng.choice(choices)
    if isinstance(value, bytes | str):
        return tag, value
    try:
        return tag, json.dumps(value)
    except ValueError:  # the deep one
        return tag, "[" * 300 + "]" * 300


class Outcomes:
    def __init__(self) -> None:
        self.refused_ids: set[str] = set()
        self.statuses: Counter[int] = Counter()
        self.closes: Counter[int] = Counter()
        self.completed = 0


def read_answer(socket: Connection, outcomes: Outcomes, tag: str) -> bool:
    """Read one answer; False once the socket closed."""
    while True:
        try:
            message = socket.recv(timeout=20)
        except ConnectionClosed as closed:
            assert closed.rcvd is not None, f"{tag}: closed without a close frame"
            assert closed.rcvd.code in CLOSE_CODES, (tag, closed.rcvd.code, closed.rcvd.reason)
            outcomes.closes[closed.rcvd.code] += 1
            return False
        except TimeoutError:
            assert tag == "processed", f"{tag}: no answer"  # response.processed is answered with nothing
            return True
        assert isinstance(message, str), tag
        event = json.loads(message)
        if event["type"] == "error" and "status" in event:
            status = event["status"]
            assert 400 <= status < 500, (tag, event)
            error = event["error"]
            assert isinstance(error["message"], str) and isinstance(error["type"], str), event
            assert "param" in error and "code" in error, event
            outcomes.statuses[status] += 1
            outcomes.refused_ids.add(event["headers"]["request-id"])
            return True
        assert event["type"] != "response.failed", (tag, event)
        if event["type"] == "response.completed":
            outcomes.completed += 1
            return True


def fuzz_socket(gateway: GatewayServer, secret: str, rng: random.Random, outcomes: Outcomes) -> None:
    headers = {"Authorization": f"Bearer {secret}", "openai-beta": "responses_websockets=2026-02-06"}
    with connect(
        f"ws://127.0.0.1:{gateway.port}/v1/responses", additional_headers=headers, max_size=None
    ) as socket:
        for _ in range(MESSAGES_PER_SOCKET):
            if rng.random() < 0.08:  # a flood: many messages without reading
                valid = {"type": "response.create", "model": MODEL, "input": user("flood"), "store": False}
                try:
                    for _ in range(rng.randint(5, 40)):
                        socket.send(json.dumps(valid))
                except ConnectionClosed:
                    pass
                drain_socket(socket, outcomes)
                return
            tag, message = hostile_message(rng)
            try:
                socket.send(message)
            except ConnectionClosed:
                drain_socket(socket, outcomes)
                return
            if tag == "processed":
                continue
            if not read_answer(socket, outcomes, tag):
                return


def drain_socket(socket: Connection, outcomes: Outcomes) -> None:
    """Read whatever comes until the socket closes (a flood ends in completions, then maybe 1008)."""
    while True:
        try:
            message = socket.recv(timeout=30)
        except ConnectionClosed as closed:
            if closed.rcvd is not None:
                assert closed.rcvd.code in CLOSE_CODES, closed.rcvd
                outcomes.closes[closed.rcvd.code] += 1
            return
        except TimeoutError:
            socket.close()
            return
        event = json.loads(message)
        if event["type"] == "error" and "status" in event:
            assert event["status"] < 500, event
            outcomes.refused_ids.add(event["headers"]["request-id"])
        elif event["type"] == "response.completed":
            outcomes.completed += 1


def hostile_upgrades(gateway: GatewayServer, secrets: list[str], rng: random.Random) -> Counter[int]:
    statuses: Counter[int] = Counter()
    key = "dGhlIHNhbXBsZSBub25jZQ=="
    for _ in range(60):
        headers = {"host": "x", "connection": "Upgrade", "upgrade": "websocket"}
        if rng.random() < 0.8:
            headers["sec-websocket-version"] = rng.choice(["13", "13", "13", "8", "", "thirteen"])
        if rng.random() < 0.8:
            headers["sec-websocket-key"] = rng.choice([key, key, key, "short", "", "!!!!", key + "=="])
        auth = rng.random()
        if auth < 0.3:
            headers["authorization"] = f"Bearer {rng.choice(secrets)}"
        elif auth < 0.5:
            headers["authorization"] = rng.choice(
                ["Bearer sk-cs4-" + "a" * 38, "Basic abc", "Bearer ", "Bearer x"]
            )
        elif auth < 0.6:
            headers["x-api-key"] = rng.choice(["", "sk-cs4-zzz", "\u00e9t\u00e9"])
        method = rng.choice(["GET", "GET", "GET", "POST", "PUT"])
        path = rng.choice(
            ["/v1/responses", "/v1/responses", "/v1/responses?x=1", "/v1/chat/completions", "/nowhere"]
        )
        with sockets.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
            sock.sendall(request_head(method, path, headers))
            reply = read_reply(sock)
        statuses[reply.status] += 1
        assert reply.status < 500, (method, path, headers, reply.status)
        if reply.status != 101:
            error = reply.json()["error"]
            assert isinstance(error["message"], str) and isinstance(error["type"], str), error
            if path.startswith("/v1/responses"):  # the OpenAI shape (elsewhere: by client)
                assert "code" in error and "param" in error, (headers, error)
    for secret in (None, "sk-cs4-" + "b" * 38):
        with pytest.raises(InvalidStatus) as refused:
            extra = {} if secret is None else {"Authorization": f"Bearer {secret}"}
            connect(f"ws://127.0.0.1:{gateway.port}/v1/responses", additional_headers=extra)
        assert refused.value.response.status_code == 401
    return statuses


def test_hostile_websocket_traffic_is_refused_in_format_and_never_charged(tmp_path: Path) -> None:
    print(f"websocket fuzz: seed {SEED} (MODELGATE_TEST_FUZZ_SEED={SEED} reproduces it)")
    rng = random.Random(SEED)
    with running_gateway(
        tmp_path / "data",
        server={"offload_body_bytes": 2048},
        responses={"websocket_max_message_bytes": MAX_MESSAGE, "websocket_max_pending_messages": 4},
    ) as gateway:
        account = gateway.account("ws-fuzz", credits=10_000)
        keys = [gateway.key(account, "Nova", rpm=100_000) for _ in range(3)]
        secrets = [k.secret for k in keys]
        before = gateway.call(gateway.services.accounts.get_account(account.id))
        assert before is not None
        upgrades = hostile_upgrades(gateway, secrets, rng)
        outcomes = Outcomes()
        for _ in range(SOCKETS):
            fuzz_socket(gateway, rng.choice(secrets), rng, outcomes)
        print(
            f"websocket fuzz: upgrades {dict(upgrades)}; message statuses {dict(outcomes.statuses)}; "
            f"closes {dict(outcomes.closes)}; completed {outcomes.completed}"
        )
        stats = gateway.app.sockets.stats
        wait_until(lambda: stats.open == 0, "every socket counted closed")
        assert sum(stats.closed.values()) == stats.accepted
        deadline = time.monotonic() + 15
        while (
            gateway.call(gateway.services.ledger_store.reservation_stats())[0] and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        month = month_of(gateway.services.clock.time())
        records = gateway.call(
            gateway.services.usage.usage_records(month, account_id=account.id, limit=100_000)
        )
        after = gateway.call(gateway.services.accounts.get_account(account.id))
        assert after is not None
        assert outcomes.completed > 0 and outcomes.statuses and outcomes.closes
        charged = {r.request_id for r in records if r.charged_uc > 0}
        assert not outcomes.refused_ids & charged, outcomes.refused_ids & charged
        assert gateway.call(gateway.services.ledger_store.reservation_stats())[0] == 0
        assert after.available_uc == before.available_uc - sum(r.charged_uc for r in records)
