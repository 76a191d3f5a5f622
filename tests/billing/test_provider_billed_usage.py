"""What the provider bills reaches the ledger (issue #27): a compacting request's passes
(``usage.iterations``), 1-hour cache writes and server web searches, reported by byte-exact fake
upstreams on loopback, are recorded and charged exactly, whole and streamed, passthrough and
translated; and a request offering a web search tool holds enough for its searches."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from modelgate.billing.pricing import bound_uc
from modelgate.gateway import headers as hdr
from tests.billing.helpers import PATHS, Seen, _parse_sse, body_for, headers_for, send, wait_for_record
from tests.billing.wired import gateway_over_fakes
from tests.fakes.upstream import FakeUpstream, Reply
from tests.gateway_server import GatewayServer
from tests.polling import wait_until

#: A compacting request: the compaction pass read 3,000 tokens and wrote 400; the message pass
#: (what the top level reports) read 120 fresh, 500 cached, wrote 1,000 cache tokens of which
#: 600 to the 1-hour cache, and answered in 9; two web searches ran.
COMPACTING = Reply(
    text="Compacted and searched.",
    input_tokens=120,
    output_tokens=9,
    cache_read_tokens=500,
    cache_write_tokens=1000,
    cache_write_1h_tokens=600,
    web_search_requests=2,
    iterations=(
        {
            "type": "compaction",
            "input_tokens": 3000,
            "output_tokens": 400,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
        {
            "type": "message",
            "input_tokens": 120,
            "output_tokens": 9,
            "cache_creation_input_tokens": 1000,
            "cache_read_input_tokens": 500,
            "cache_creation": {"ephemeral_5m_input_tokens": 400, "ephemeral_1h_input_tokens": 600},
        },
    ),
)
#: aria-sonnet-4.6 in µc per token: input 3, output 15, 5-minute write 3.75, 1-hour write 6 (twice
#: input), read 0.3; a web search 10,000 µc (10 credits per 1,000). Every token billed once:
#: 3,120 input (both passes), 409 output, 400 + 600 writes, 500 reads, 2 searches.
COMPACTING_UC = 3120 * 3 + 409 * 15 + (400 * 375 + 600 * 600 + 500 * 30) // 100 + 2 * 10_000
#: The same on nova-5.5 (Responses clients hold Nova keys): 1.25 / 10 / 1.25 / 2.5 / 0.125 credits
#: per million tokens, 10 per 1,000 searches; 30,052.5 µc rounded up once.
COMPACTING_NOVA_UC = -(
    -(3120 * 1_250_000 + 409 * 10_000_000 + 400 * 1_250_000 + 600 * 2_500_000 + 500 * 125_000 + 2 * 10**10)
    // 10**6
)
#: Which model a client format reaches the Messages upstream with (key groups, docs/architecture.md §2).
MODEL_OF = {"messages": "aria-sonnet-4.6", "chat": "aria-sonnet-4.6", "responses": "nova-5.5"}
#: An OpenAI Responses answer that ran three web_search_call items; nova-6-sol prices (2 / 16).
SEARCHING = Reply(text="Searched the web.", input_tokens=50, output_tokens=5, web_search_requests=3)
SEARCHING_UC = 50 * 2 + 5 * 16 + 3 * 10_000


@pytest.fixture(scope="module")
def wired(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    deployments = {
        "aria-sonnet-4.6": "fake-anthropic",
        "nova-5.5": "fake-anthropic",
        "nova-6-sol": "fake-openai",
    }
    with gateway_over_fakes(
        tmp_path_factory.mktemp("provider-billed") / "data",
        deployments,
        anthropic=FakeUpstream(default=COMPACTING),
        openai=FakeUpstream(default=SEARCHING),
    ) as server:
        yield server


def _run(wired: GatewayServer, fmt: str, model: str, stream: bool, name: str) -> tuple[Seen, str]:
    group = "Nova" if model.startswith("nova") else "Pro"
    issued = wired.key(wired.account(name), group, rpm=1000)

    async def run() -> Seen:
        async with httpx.AsyncClient(base_url=wired.base_url, timeout=30) as client:
            return await send(client, fmt, issued.secret, model, max_tokens=50, stream=stream)

    return asyncio.run(run()), issued.record.id


@pytest.mark.parametrize("fmt", ["messages", "chat", "responses"])
@pytest.mark.parametrize("stream", [False, True])
def test_compaction_passes_one_hour_writes_and_searches_are_billed_once(
    wired: GatewayServer, fmt: str, stream: bool
) -> None:
    """Messages upstream: passthrough to a Messages client, translated to Chat and Responses."""
    seen, key_id = _run(wired, fmt, MODEL_OF[fmt], stream, f"compacting-{fmt}-{stream}")
    assert seen.status == 200
    (record,) = wait_for_record(wired, seen.request_id, key_id)
    assert record.status == "ok"
    assert (record.input_tokens, record.output_tokens) == (3120, 409)
    assert (record.cache_creation_tokens, record.cache_write_1h_tokens, record.cache_read_tokens) == (
        1000,
        600,
        500,
    )
    assert record.web_search_requests == 2
    expected = COMPACTING_NOVA_UC if fmt == "responses" else COMPACTING_UC
    assert (COMPACTING_UC, COMPACTING_NOVA_UC) == (40_745, 30_053)
    assert record.charged_uc == expected
    assert record.shortfall_uc == 0
    if not stream:
        assert seen.headers[hdr.CHARGED] == str(expected)


def test_a_translated_client_sees_the_billed_usage(wired: GatewayServer) -> None:
    """A Chat client of the Messages upstream sees every billed input token in its prompt count."""
    seen, _ = _run(wired, "chat", "aria-sonnet-4.6", False, "translated-usage")
    usage = seen.body["usage"]
    assert usage["prompt_tokens"] == 3120 + 1000 + 500
    assert usage["completion_tokens"] == 409


@pytest.mark.parametrize("stream", [False, True])
def test_responses_web_search_calls_are_billed_per_call(
    wired: GatewayServer, stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="modelgate.requests")
    seen, key_id = _run(wired, "responses", "nova-6-sol", stream, f"searching-{stream}")
    assert seen.status == 200
    (record,) = wait_for_record(wired, seen.request_id, key_id)
    assert (record.input_tokens, record.output_tokens, record.web_search_requests) == (50, 5, 3)
    assert record.charged_uc == SEARCHING_UC == 30_180
    # The request log line says so too (written once the request has ended).

    def lines() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = [getattr(r, "fields", {}) for r in caplog.records]
        return [f for f in found if f.get("request_id") == seen.request_id]

    wait_until(lines, "the request's log line")
    assert [(f["web_search_requests"], f["charged_uc"]) for f in lines()] == [(3, SEARCHING_UC)]


def _hold_seen(wired: GatewayServer, body: dict[str, Any], name: str) -> tuple[int, int, str]:
    """(µc held, body bytes, request id) of a streamed Messages request: the balance header of a
    stream is sent after the hold and before the charge."""
    account = wired.account(name)
    issued = wired.key(account, "Pro", rpm=1000)
    raw = orjson.dumps(body)

    async def run() -> tuple[int, str]:
        async with httpx.AsyncClient(base_url=wired.base_url, timeout=30) as client:
            head = {**headers_for("messages", issued.secret), "content-type": "application/json"}
            async with client.stream("POST", PATHS["messages"], content=raw, headers=head) as r:
                assert r.status_code == 200
                _parse_sse(await r.aread())
                return int(r.headers[hdr.BALANCE_REMAINING]), r.headers["request-id"]

    balance_after_hold, request_id = asyncio.run(run())
    return account.balance_uc - balance_after_hold, len(raw), request_id


@pytest.mark.parametrize(
    ("tools", "searches"),
    [
        ([], 0),
        ([{"type": "web_search_20250305", "name": "web_search"}], 10),
        ([{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}], 3),
        ([{"type": "web_search_20250305", "name": "web_search", "max_uses": 50}], 10),
    ],
)
def test_the_hold_covers_the_searches_a_request_may_run(
    wired: GatewayServer, tools: list[dict[str, Any]], searches: int
) -> None:
    """The hold is the bound at the dearest input rate (the 1-hour write) plus the most searches
    the request allows: ``billing.max_web_searches_per_request`` (10), or the tool's lower
    ``max_uses``; none without the tool."""
    body = body_for("messages", "aria-sonnet-4.6", "Find it", 50, stream=True)
    if tools:
        body["tools"] = tools
    held, size, request_id = _hold_seen(wired, body, f"hold-{orjson.dumps(tools).decode()}")
    price = wired.services.catalogue.models["aria-sonnet-4.6"].price
    # A request offering a tool (the web search) holds the tool allowance on top.
    overhead = wired.settings.billing.input_overhead_tokens + (
        wired.settings.billing.tool_overhead_tokens if tools else 0
    )
    assert held == bound_uc(size + overhead, 50, price, searches)
    assert held == -(-((size + overhead) * 6_000_000 + 50 * 15_000_000 + searches * 10**10) // 10**6)
    assert request_id
