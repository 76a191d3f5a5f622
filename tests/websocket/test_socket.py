"""Responses over WebSocket (issue #27): each ``response.create`` is served like an HTTP request
(billed, logged, refused in the OpenAI shape), events arrive as on SSE, responses chain on the
socket with ``store: false``, and Codex's ``generate: false`` pre-warm costs nothing."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.fakes.upstream import Reply
from tests.websocket.conftest import (
    CHAT_ONLY,
    PASSTHROUGH,
    SIMULATED,
    TRANSLATED,
    Suite,
    completed,
    events,
    open_socket,
    refused,
    send,
)


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def texts(body: dict[str, Any]) -> list[str]:
    """Every text of a request body's turns, in order (Responses ``input`` or Messages ``messages``)."""
    turns = body.get("input") if "input" in body else body.get("messages")
    out: list[str] = []
    for turn in turns or []:
        content = turn.get("content")
        if isinstance(content, str):
            out.append(content)
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                out.append(part["text"])
    return out


def test_a_response_streams_as_the_sse_events_and_is_billed(suite: Suite) -> None:
    secret, key_id, account_id = suite.key()
    before = suite.available(account_id)
    with open_socket(suite.gateway, secret) as socket:
        send(socket, model=PASSTHROUGH, input="Hello?", store=False)
        got = events(socket)
    kinds = [e["type"] for e in got]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds
    assert [e["sequence_number"] for e in got] == list(range(len(got)))
    text = "".join(e["delta"] for e in got if e["type"] == "response.output_text.delta")
    assert text == "Hello over the socket."
    assert got[-1]["response"]["model"] == PASSTHROUGH
    (record,) = suite.usage(key_id)
    assert (record.model, record.input_tokens, record.output_tokens) == (PASSTHROUGH, 20, 5)
    assert record.charged_uc > 0 and suite.available(account_id) == before - record.charged_uc
    (upstream,) = [r.json() for r in suite.sent("gpt-fake") if "Hello?" in json.dumps(r.json())]
    assert upstream["stream"] is True and "type" not in upstream and "generate" not in upstream


def test_the_openai_sdk_socket_client_reads_every_event(suite: Suite) -> None:
    secret, key_id, _ = suite.key()

    async def converse() -> list[Any]:
        client = openai.AsyncOpenAI(api_key=secret, base_url=f"{suite.gateway.base_url}/v1", max_retries=0)
        seen: list[Any] = []
        async with client.responses.connect() as connection:
            await connection.send({"type": "response.create", "model": SIMULATED, "input": "Hi there."})
            async for event in connection:
                seen.append(event)
                if event.type == "response.completed":
                    break
        await client.close()
        return seen

    seen = asyncio.run(converse())
    assert seen[0].type == "response.created" and seen[-1].type == "response.completed"
    final = seen[-1].response
    assert final.status == "completed" and final.output_text.startswith("[simulator]")
    assert final.usage is not None and final.usage.output_tokens > 0
    assert [r.model for r in suite.usage(key_id)] == [SIMULATED]


@pytest.mark.parametrize("model", [PASSTHROUGH, TRANSLATED, CHAT_ONLY])
def test_store_false_responses_chain_on_the_socket(suite: Suite, model: str) -> None:
    secret, key_id, _ = suite.key()
    with open_socket(suite.gateway, secret) as socket:
        first = completed(socket, model=model, input=[user(f"first {model}")], store=False)
        second = completed(
            socket,
            model=model,
            input=[user(f"second {model}")],
            store=False,
            previous_response_id=first["id"],
        )
        completed(
            socket,
            model=model,
            input=[user(f"third {model}")],
            store=False,
            previous_response_id=second["id"],
        )
    upstream = {PASSTHROUGH: "gpt-fake", TRANSLATED: "claude-fake", CHAT_ONLY: "chat-fake"}[model]
    bodies = [r.json() for r in suite.sent(upstream) if f"first {model}" in json.dumps(r.json())]
    assert len(bodies) == 3
    answer = "Hello over the socket."
    assert texts(bodies[1]) == [f"first {model}", answer, f"second {model}"]
    assert texts(bodies[2]) == [f"first {model}", answer, f"second {model}", answer, f"third {model}"]
    assert all("previous_response_id" not in b for b in bodies)
    assert len(suite.usage(key_id, count=3)) == 3


def test_an_unknown_previous_response_is_a_404_message_and_the_socket_stays_open(suite: Suite) -> None:
    secret, key_id, _ = suite.key()
    with open_socket(suite.gateway, secret) as socket:
        error = refused(socket, model=SIMULATED, input="x", store=False, previous_response_id="resp_nowhere")
        assert error["status"] == 404 and error["error"]["param"] == "previous_response_id"
        completed(socket, model=SIMULATED, input="still here", store=False)
    # The refusal is in the usage log (0 µc), before the answer that followed it.
    assert [r.status for r in suite.usage(key_id, count=2)] == ["refused_404", "ok"]


def test_a_prewarm_generates_nothing_and_bills_nothing_and_can_be_chained(suite: Suite) -> None:
    secret, key_id, account_id = suite.key()
    before = suite.available(account_id)
    asked = len(suite.fake.requests)
    with open_socket(suite.gateway, secret) as socket:
        send(
            socket,
            model=PASSTHROUGH,
            instructions="Be brief.",
            input=[user("warm me")],
            store=False,
            generate=False,
        )
        created, done = events(socket)
        assert created["type"] == "response.created" and done["type"] == "response.completed"
        warm = done["response"]
        assert warm["id"] == created["response"]["id"] and warm["output"] == []
        assert warm["usage"]["input_tokens"] == 0 and warm["usage"]["output_tokens"] == 0
        assert len(suite.fake.requests) == asked and suite.usage(key_id, timeout=0.3) == []
        assert suite.available(account_id) == before
        # Codex's next request chains from the pre-warm with only what is new.
        completed(
            socket,
            model=PASSTHROUGH,
            instructions="Be brief.",
            input=[],
            store=False,
            previous_response_id=warm["id"],
        )
    (body,) = [r.json() for r in suite.sent("gpt-fake") if "warm me" in json.dumps(r.json())]
    assert texts(body) == ["warm me"] and body["instructions"] == "Be brief."
    (record,) = suite.usage(key_id)
    assert suite.available(account_id) == before - record.charged_uc


def test_refusals_are_error_messages_in_the_openai_shape_and_cost_nothing(suite: Suite) -> None:
    secret, key_id, account_id = suite.key(rpm=2)
    before = suite.available(account_id)
    with open_socket(suite.gateway, secret) as socket:
        missing = refused(socket, model="nova-no-such-model", input="x")
        assert missing["status"] == 404 and missing["error"]["code"] == "model_not_found"
        assert set(missing["error"]) >= {"message", "type", "param", "code"}
        assert missing["headers"]["request-id"].startswith("req_")
        completed(socket, model=SIMULATED, input="one", store=False)
        completed(socket, model=SIMULATED, input="two", store=False)
        limited = refused(socket, model=SIMULATED, input="three", store=False)
        assert limited["status"] == 429 and limited["error"]["type"] == "rate_limit_error"
        assert int(limited["headers"]["retry-after"]) >= 1
    records = suite.usage(key_id, count=4)
    assert [r.status for r in records] == ["refused_404", "ok", "ok", "refused_429"]
    assert all(r.charged_uc == 0 for r in records if r.status != "ok")
    assert suite.available(account_id) == before - sum(r.charged_uc for r in records)


def test_a_request_over_the_cap_is_a_402_message_and_nothing_is_held(suite: Suite) -> None:
    secret, key_id, account_id = suite.key(credits=0.000001)
    with open_socket(suite.gateway, secret) as socket:
        error = refused(socket, model=SIMULATED, input="too dear", store=False)
        assert error["status"] == 402 and error["error"]["code"] == "insufficient_balance"
        assert error["headers"]["x-should-retry"] == "false"
    (record,) = suite.usage(key_id)
    assert (record.status, record.charged_uc) == ("refused_402", 0) and suite.available(account_id) == 1


def test_a_key_revoked_mid_connection_is_refused_on_its_next_message(suite: Suite) -> None:
    from websockets.exceptions import ConnectionClosed

    secret, key_id, _ = suite.key()
    gateway = suite.gateway
    with open_socket(gateway, secret) as socket:
        completed(socket, model=SIMULATED, input="before", store=False)
        record = gateway.call(gateway.management.key(key_id))
        revoked = gateway.call(gateway.management.revoke_key(record))
        gateway.wait_for_key_version(key_id, revoked.version)
        error = refused(socket, model=SIMULATED, input="after", store=False)
        assert error["status"] == 401
        with pytest.raises(ConnectionClosed) as closed:
            socket.recv(timeout=5)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    assert len(suite.usage(key_id)) == 1


def test_messages_sent_ahead_wait_their_turn(suite: Suite) -> None:
    secret, key_id, _ = suite.key()
    with open_socket(suite.gateway, secret) as socket:
        send(socket, model=SIMULATED, input="first", store=False)
        send(socket, model=SIMULATED, input="second", store=False)
        first, second = events(socket), events(socket)
    assert first[-1]["type"] == second[-1]["type"] == "response.completed"
    assert first[-1]["response"]["id"] != second[-1]["response"]["id"]
    assert len(suite.usage(key_id, count=2)) == 2


def test_codex_response_processed_messages_get_no_answer(suite: Suite) -> None:
    secret, _, _ = suite.key()
    with open_socket(suite.gateway, secret) as socket:
        done = completed(socket, model=SIMULATED, input="hi", store=False)
        socket.send(json.dumps({"type": "response.processed", "response_id": done["id"]}))
        nxt = completed(socket, model=SIMULATED, input="next", store=False)
    assert nxt["id"] != done["id"]


@pytest.fixture
def request_lines() -> Iterator[list[dict[str, Any]]]:
    lines: list[dict[str, Any]] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            fields = getattr(record, "fields", None)
            if fields:
                lines.append(dict(fields))

    handler = Collect()
    logger = logging.getLogger("modelgate.requests")
    logger.addHandler(handler)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)


def test_request_log_lines_say_how_the_request_arrived(
    suite: Suite, request_lines: list[dict[str, Any]]
) -> None:
    secret, key_id, _ = suite.key()
    with open_socket(suite.gateway, secret) as socket:
        completed(socket, model=SIMULATED, input="over the socket", store=False)
    client = openai.OpenAI(api_key=secret, base_url=f"{suite.gateway.base_url}/v1", max_retries=0)
    client.responses.create(model=SIMULATED, input="over http", store=False)
    suite.usage(key_id, count=2)
    mine = [line for line in request_lines if line["key_id"] == key_id]
    assert sorted(line["transport"] for line in mine) == ["http", "websocket"]


def test_a_client_leaving_mid_response_is_billed_what_was_relayed(suite: Suite) -> None:
    secret, key_id, account_id = suite.key()
    before = suite.available(account_id)
    suite.fake.push(Reply(text="a long slow answer " * 10, chunks=30, event_delay=0.1, input_tokens=20))
    with open_socket(suite.gateway, secret) as socket:
        send(socket, model=PASSTHROUGH, input="then I leave", store=False)
        while json.loads(socket.recv(timeout=10))["type"] != "response.output_text.delta":
            pass
    (record,) = suite.usage(key_id)
    assert record.status == "client_disconnected" and record.input_tokens > 0  # estimated: no usage came
    assert record.output_tokens > 0 and record.charged_uc > 0
    assert suite.available(account_id) == before - record.charged_uc
