"""Large bodies are parsed, checked, built and counted in worker processes (issue #11) with the
same answers as inline processing; their number in memory is capped."""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gateway_server import GatewayServer, running_gateway

SMALL = 4096  # bodies above this go to a worker in the "offloaded" gateway
TEXT = "the quick brown fox jumps over the lazy dog. " * 4_000  # ~180 KB of prompt


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayServer, GatewayServer]]:
    root = tmp_path_factory.mktemp("large")
    offload = {"offload_body_bytes": SMALL}
    with (
        running_gateway(root / "inline") as inline,
        running_gateway(root / "offloaded", server=offload, simulator=offload) as worker,
    ):
        yield inline, worker


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    """Bodies go to one worker whose arena is far smaller than them (it grows for each job)."""
    server = {"offload_body_bytes": SMALL, "body_arena_bytes": 1024, "body_workers": 1}
    simulator = {"offload_body_bytes": SMALL}
    with running_gateway(tmp_path_factory.mktemp("tight"), server=server, simulator=simulator) as gateway:
        yield gateway


_accounts = itertools.count()


def call(gateway: GatewayServer, path: str, body: dict[str, Any], group: str) -> httpx.Response:
    key = gateway.key(gateway.account(f"acct-{next(_accounts)}", 1000), group).secret
    headers = (
        {"x-api-key": key, "anthropic-version": "2023-06-01"}
        if path.startswith("/v1/messages")
        else {"authorization": f"Bearer {key}"}
    )
    return httpx.post(gateway.base_url + path, json=body, headers=headers, timeout=60)


def without_ids(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: without_ids(v) for k, v in value.items() if k not in ("id", "created", "created_at", "call_id")
        }
    if isinstance(value, list):
        return [without_ids(v) for v in value]
    return value


CASES = [
    ("/v1/messages", "Basic", {"model": "aria-haiku-4.5", "max_tokens": 30, "messages": [{"role": "user", "content": TEXT}]}),
    ("/v1/messages/count_tokens", "Basic", {"model": "aria-haiku-4.5", "messages": [{"role": "user", "content": TEXT}]}),
    ("/v1/chat/completions", "Nova", {"model": "nova-5.5", "max_tokens": 30, "messages": [{"role": "user", "content": TEXT}]}),
    ("/v1/responses", "Nova", {"model": "nova-5.5", "max_output_tokens": 30, "input": TEXT}),
]  # fmt: skip


@pytest.mark.parametrize(("path", "group", "body"), CASES)
def test_offloaded_answers_equal_inline_ones(
    pair: tuple[GatewayServer, GatewayServer], path: str, group: str, body: dict[str, Any]
) -> None:
    inline, worker = pair
    assert_answers_alike(inline, worker, path, body, group)


def assert_answers_alike(
    inline: GatewayServer, worker: GatewayServer, path: str, body: dict[str, Any], group: str
) -> None:
    """``worker`` (bodies offloaded) answers and charges ``body`` as ``inline`` does."""
    before = worker.services.offload.jobs
    expected = call(inline, path, body, group)
    got = call(worker, path, body, group)
    assert expected.status_code == got.status_code == 200, got.text
    assert without_ids(got.json()) == without_ids(expected.json())
    assert worker.services.offload.jobs > before  # the work really happened in a worker
    assert got.headers.get("x-modelgate-credits-charged") == expected.headers.get(
        "x-modelgate-credits-charged"
    )


@pytest.mark.parametrize(("path", "group", "body"), CASES)
def test_answers_are_the_same_through_an_arena_smaller_than_the_body(
    pair: tuple[GatewayServer, GatewayServer],
    tight: GatewayServer,
    path: str,
    group: str,
    body: dict[str, Any],
) -> None:
    inline, _ = pair
    assert_answers_alike(inline, tight, path, body, group)


def test_a_body_worker_killed_under_a_request_answers_503_in_format_and_charges_nothing(
    tight: GatewayServer,
) -> None:
    body: dict[str, Any] = {
        "model": "aria-haiku-4.5",
        "max_tokens": 30,
        "messages": [{"role": "user", "content": TEXT}],
    }
    assert call(tight, "/v1/messages", body, "Basic").status_code == 200  # the worker is running
    (pid,) = tight.services.offload.pids()
    account = tight.account(f"acct-{next(_accounts)}", 1000)
    key = tight.key(account, "Basic").secret
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
    answers: list[httpx.Response] = []
    os.kill(pid, signal.SIGSTOP)  # it cannot answer: the request's job waits in its socket
    try:
        sender = threading.Thread(
            target=lambda: answers.append(
                httpx.post(f"{tight.base_url}/v1/messages", json=body, headers=headers, timeout=60)
            )
        )
        sender.start()
        deadline = time.monotonic() + 20
        while tight.services.offload.pending == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert tight.services.offload.pending == 1
    finally:
        os.kill(pid, signal.SIGKILL)
    sender.join(30)
    (answer,) = answers
    assert answer.status_code == 503, answer.text
    assert answer.json()["type"] == "error" and "retry" in answer.json()["error"]["message"]
    assert tight.services.offload.lost == 1
    after = tight.call(tight.services.accounts.get_account(account.id))
    assert after is not None and after.balance_uc == account.balance_uc  # nothing charged
    # The next large request gets a new worker.
    assert call(tight, "/v1/messages", body, "Basic").status_code == 200
    assert tight.services.offload.pids() != [pid]


def test_offloaded_streams_carry_the_same_text(pair: tuple[GatewayServer, GatewayServer]) -> None:
    inline, worker = pair
    body = {
        "model": "nova-5.5",
        "max_tokens": 30,
        "stream": True,
        "messages": [{"role": "user", "content": TEXT}],
    }

    def text(gateway: GatewayServer) -> str:
        response = call(gateway, "/v1/chat/completions", body, "Nova")
        assert response.status_code == 200
        return "".join(line for line in response.text.split("\n\n") if '"content"' in line).replace(
            "chatcmpl", ""
        )

    assert len(text(worker)) > 0 and text(worker).count('"content"') == text(inline).count('"content"')


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b'{"model":"aria-haiku-4.5","model":"aria-opus-4.8","max_tokens":5,"messages":[{"role":"user","content":"' + b"x" * 8000 + b'"}]}', b"more than once"),
        (b'{"model":"aria-haiku-4.5","max_tokens":5,"messages":[],"metadata":' + b"[" * 200 + b"]" * 200 + b',"pad":"' + b"x" * 8000 + b'"}', b"nested too deeply"),
        (b'{"model":"aria-haiku-4.5","max_tokens":5,"messages":"' + b"x" * 8000 + b'"}', b"messages"),
    ],
)  # fmt: skip
def test_refusals_made_in_a_worker_come_back_in_the_endpoints_format(
    pair: tuple[GatewayServer, GatewayServer], raw: bytes, needle: bytes
) -> None:
    _, worker = pair
    key = worker.key(worker.account(f"acct-{next(_accounts)}", 10), "Basic").secret
    response = httpx.post(
        f"{worker.base_url}/v1/messages",
        content=raw,
        headers={"x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json"},
    )
    assert response.status_code == 400 and response.json()["type"] == "error"
    assert needle in response.content


def _claude_code_shaped(duplicate: bool) -> bytes:
    """A Messages body whose top-level keys recur inside values (a tool parameter called
    ``model``, tool inputs naming a model and a token limit) with escaped ``<`` in its text: the
    searches must prove which occurrence is the member. ``duplicate``: a respelled ``model`` at
    the end as well."""
    turn = (
        b'{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Task",'
        b'"input":{"model":"aria-opus-4.8","max_tokens":99999}}]},'
        b'{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1",'
        b'"content":"\\u003cdiv\\u003e ' + b"x" * 200 + b'"}]},'
    )
    raw = (
        b'{"model":"aria-haiku-4.5","max_tokens":30,"tools":[{"name":"Task","input_schema":'
        b'{"type":"object","properties":{"model":{"type":"string"}}}}],"messages":['
        + turn * 40
        + b'{"role":"user","content":"go on \\u003c"}]'
    )
    return raw + (b',"\\u006dodel":"aria-opus-4.8"}' if duplicate else b"}")


def test_keys_written_inside_values_are_read_alike_inline_and_in_a_worker(
    pair: tuple[GatewayServer, GatewayServer],
) -> None:
    """The same answer and the same charge whichever side analysed the body, and the same refusal
    of a respelled duplicate hidden among nested occurrences."""
    answers = []
    for gateway in pair:
        key = gateway.key(gateway.account(f"acct-{next(_accounts)}", 1000), "Basic").secret
        headers = {"x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json"}
        url = f"{gateway.base_url}/v1/messages"
        good = httpx.post(url, content=_claude_code_shaped(False), headers=headers, timeout=60)
        assert good.status_code == 200, good.text
        bad = httpx.post(url, content=_claude_code_shaped(True), headers=headers, timeout=60)
        assert bad.status_code == 400 and b"more than once" in bad.content, bad.text
        answers.append((without_ids(good.json()), good.headers.get("x-modelgate-credits-charged")))
    assert answers[0] == answers[1]
    assert answers[0][1] is not None


def test_large_bodies_beyond_the_cap_get_a_fast_429(tmp_path: Path) -> None:
    slow = {"latency_ms": 1500.0, "offload_body_bytes": SMALL}
    with running_gateway(
        tmp_path / "d", server={"offload_body_bytes": SMALL, "max_large_bodies": 1}, simulator=slow
    ) as gw:
        key = gw.key(gw.account("acme"), "Basic").secret
        headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
        body = {"model": "aria-haiku-4.5", "max_tokens": 5, "messages": [{"role": "user", "content": TEXT}]}
        results: list[int] = []
        first = threading.Thread(
            target=lambda: results.append(
                httpx.post(f"{gw.base_url}/v1/messages", json=body, headers=headers, timeout=60).status_code
            )
        )
        first.start()
        while gw.services.large_bodies.in_flight == 0:  # the first one holds the slot
            threading.Event().wait(0.01)
        second = httpx.post(f"{gw.base_url}/v1/messages", json=body, headers=headers, timeout=60)
        assert second.status_code == 429 and second.headers["retry-after"] == "1"
        small = {**body, "messages": [{"role": "user", "content": "hi"}]}
        assert (
            httpx.post(f"{gw.base_url}/v1/messages", json=small, headers=headers, timeout=60).status_code
            == 200
        )
        first.join()
        assert results == [200] and gw.services.large_bodies.in_flight == 0
