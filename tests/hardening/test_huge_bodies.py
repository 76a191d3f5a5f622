"""Bodies of 10 and 30 MiB (one long message, and many Claude-Code-shaped turns) complete through
the real gateway; the input rules still catch duplicated, escaped and too-deep control fields
at the far end of a huge body; and small requests keep being answered while several 30 MiB
bodies are being processed (issue #34)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.gateway_server import GatewayServer, running_gateway

MIB = 1 << 20
_accounts = itertools.count()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    with running_gateway(tmp_path_factory.mktemp("huge")) as gw:
        yield gw


def _headers(gw: GatewayServer, group: str = "Basic") -> dict[str, str]:
    key = gw.key(gw.account(f"acct-{next(_accounts)}", 10_000), group).secret
    return {"x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json"}


def _turns(size: int) -> list[dict[str, Any]]:
    """Claude-Code-shaped turns (text, tool use, tool results with terminal escapes and code)
    adding up to about ``size`` bytes."""
    output = 'src/app.py:12: def f(x): return {"k": [x]}  # \u001b[31mred\u001b[0m \\ "quoted"\n' * 40
    pair: list[dict[str, Any]] = [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look at the file."},
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "/src/app.py"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": output}],
        },
    ]
    count = max(1, size // len(orjson.dumps(pair)))
    first: dict[str, Any] = {"role": "user", "content": "Fix the failing test."}
    return [first, *(turn for _ in range(count) for turn in pair), {"role": "user", "content": "go on"}]


def _messages_body(size: int, *, many_turns: bool) -> dict[str, Any]:
    messages = _turns(size) if many_turns else [{"role": "user", "content": "word " * (size // 5)}]
    return {
        "model": "aria-haiku-4.5",
        "max_tokens": 20,
        # A nested "model" (Claude Code's agent tool has one): only the top-level field is the model.
        "tools": [
            {
                "name": "Task",
                "description": "Run an agent",
                "input_schema": {"type": "object", "properties": {"model": {"type": "string"}}},
            }
        ],
        "messages": messages,
    }


@pytest.mark.parametrize(
    ("size", "many_turns"), [(10 * MIB, False), (10 * MIB, True), (30 * MIB, True), (30 * MIB, False)]
)
def test_huge_messages_bodies_complete(gateway: GatewayServer, size: int, many_turns: bool) -> None:
    raw = orjson.dumps(_messages_body(size, many_turns=many_turns))
    assert size * 0.9 < len(raw) < 32 * MIB
    jobs = gateway.services.offload.jobs
    response = httpx.post(
        f"{gateway.base_url}/v1/messages", content=raw, headers=_headers(gateway), timeout=300
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["type"] == "message" and answer["model"] == "aria-haiku-4.5"
    # The upstream read the whole conversation: its input count covers the body's text.
    assert answer["usage"]["input_tokens"] > len(raw) // 40
    assert int(response.headers["x-modelgate-credits-charged"]) > 0
    assert gateway.services.offload.jobs > jobs  # analysed in a body worker, not on the loop


def _huge_with_tail(tail: bytes) -> bytes:
    """A 12 MiB Messages body whose last top-level member is ``tail``."""
    raw = orjson.dumps(_messages_body(12 * MIB, many_turns=True))
    return raw[:-1] + b"," + tail + b"}"


@pytest.mark.parametrize(
    ("tail", "needle"),
    [
        (b'"model":"aria-opus-4.8"', b"model: the field is given more than once"),
        (b'"\\u006dodel":"aria-opus-4.8"', b"model: the field is given more than once"),
        (b'"\\u006D\\u006F\\u0064\\u0065\\u006C" : "aria-opus-4.8"', b"model: the field is given more than once"),
        (b'"max\\u005ftokens":64000', b"max_tokens: the field is given more than once"),
        (b'"stream":false,"str\\u0065am":true', b"stream: the field is given more than once"),
        (b'"metadata":' + b"[" * 200 + b"]" * 200, b"nested too deeply"),
        (b'"metadata":{"a":' + b'{"b":' * 130 + b"1" + b"}" * 131, b"nested too deeply"),
    ],
)  # fmt: skip
def test_control_field_attacks_inside_huge_bodies_are_refused(
    gateway: GatewayServer, tail: bytes, needle: bytes
) -> None:
    raw = _huge_with_tail(tail)
    response = httpx.post(
        f"{gateway.base_url}/v1/messages", content=raw, headers=_headers(gateway), timeout=300
    )
    assert response.status_code == 400, response.text
    assert response.json()["type"] == "error" and needle in response.content


def test_small_requests_are_answered_while_huge_bodies_are_processed(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "busy") as gw:
        raw = orjson.dumps(_messages_body(30 * MIB, many_turns=True))
        headers = _headers(gw)
        events: list[str] = []
        statuses: list[int] = []
        lock = threading.Lock()

        def large() -> None:
            response = httpx.post(f"{gw.base_url}/v1/messages", content=raw, headers=headers, timeout=600)
            with lock:
                statuses.append(response.status_code)
                events.append("large")

        threads = [threading.Thread(target=large) for _ in range(3)]
        for thread in threads:
            thread.start()
        while gw.services.offload.pending < 1:  # the bodies are in, their analysis under way
            threading.Event().wait(0.01)
        small = {"model": "aria-haiku-4.5", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
        with httpx.Client(base_url=gw.base_url, headers=headers, timeout=60) as client:
            for _ in range(5):
                answer = client.post("/v1/messages", json=small)
                assert answer.status_code == 200, answer.text
                with lock:
                    events.append("small")
        for thread in threads:
            thread.join()
        assert statuses == [200, 200, 200]
        # Every small request was answered while the huge ones were still being processed.
        assert events == ["small"] * 5 + ["large"] * 3


def test_a_huge_gemini_body_is_translated_and_completes(gateway: GatewayServer) -> None:
    """Gemini is inbound only: a large body is always translated, in a body worker."""
    text = "word " * (10 * MIB // 5)
    body = {
        "contents": [{"role": "user", "parts": [{"text": text}]}],
        "generationConfig": {"maxOutputTokens": 20},
    }
    key = gateway.key(gateway.account(f"acct-{next(_accounts)}", 10_000), "Basic").secret
    response = httpx.post(
        f"{gateway.base_url}/v1beta/models/aria-haiku-4.5:generateContent",
        json=body,
        headers={"x-goog-api-key": key},
        timeout=300,
    )
    assert response.status_code == 200, response.text
    assert response.json()["usageMetadata"]["promptTokenCount"] > 10 * MIB // 40
