"""Streams cut by the client at random points: the gateway bills the input plus the output it
relayed until the disconnect (estimated per delta, exact for the simulator), which lies between
what the client received and what the upstream generated, and writes exactly one usage record."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from modelgate.formats import FormatName
from tests.billing.helpers import PATHS, body_for, headers_for, records_of, send, wait_for_record
from tests.gateway_server import GatewayServer, running_gateway

PROMPT = "Please tell me a long story about rivers and lanterns"
MAX_TOKENS = 120
CASES = [
    ("messages", "Pro", "aria-sonnet-4.6"),
    ("chat", "Pro", "aria-sonnet-4.6"),
    ("responses", "Nova", "nova-5.5"),
]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    # Gradual generation (one token every 4 ms) so a disconnect lands mid-stream.
    simulator = {"tokens_per_second": 250, "reply_words": 60}
    with running_gateway(tmp_path_factory.mktemp("cut") / "data", simulator=simulator) as server:
        yield server


def _is_output_delta(fmt: str, data: dict[str, Any]) -> bool:
    if fmt == "messages":
        return data.get("type") == "content_block_delta"
    if fmt == "chat":
        choices = data.get("choices") or []
        return bool(choices and (choices[0].get("delta") or {}).get("content"))
    return data.get("type") == "response.output_text.delta"


async def _read_then_close(
    client: httpx.AsyncClient, fmt: str, secret: str, model: str, events: int
) -> tuple[str, int]:
    """Open a stream, read ``events`` SSE events, hang up; (request id, output deltas received)."""
    body = body_for(fmt, model, PROMPT, MAX_TOKENS, stream=True)
    delivered = seen = 0
    async with client.stream("POST", PATHS[fmt], json=body, headers=headers_for(fmt, secret)) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            delivered += _is_output_delta(fmt, orjson.loads(line[5:]))
            seen += 1
            if seen >= events:
                break
        return response.headers["request-id"], delivered


@pytest.mark.parametrize(("fmt", "group", "model"), CASES)
def test_streams_cut_at_random_points_bill_between_delivered_and_generated(
    gateway: GatewayServer, fmt: str, group: str, model: str
) -> None:
    issued = gateway.key(gateway.account(f"cut-{fmt}"), group, rpm=10_000)
    rng = random.Random(f"cut-{fmt}")

    async def run() -> tuple[Any, list[tuple[str, int]]]:
        async with httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as client:
            full = await send(client, fmt, issued.secret, model, text=PROMPT, max_tokens=MAX_TOKENS)
            cuts = [rng.randint(1, 60) for _ in range(8)]
            return full, await asyncio.gather(
                *(_read_then_close(client, fmt, issued.secret, model, k) for k in cuts)
            )

    full, cut = asyncio.run(run())
    (reference,) = wait_for_record(gateway, full.request_id, issued.record.id)
    generated = reference.output_tokens  # everything the simulator would generate for this prompt
    assert full.status == 200 and generated > 60
    for request_id, delivered in cut:
        records = wait_for_record(gateway, request_id, issued.record.id)
        assert len(records) == 1, request_id
        record = records[0]
        assert delivered <= record.output_tokens <= generated, (delivered, record.output_tokens, generated)
        assert record.input_tokens == reference.input_tokens  # reported, or counted exactly
        assert record.status in {"client_disconnected", "ok"}
    # Exactly one usage record per request, and nothing left reserved.
    assert len(records_of(gateway, issued.record.id)) == 1 + len(cut)
    assert gateway.call(gateway.services.ledger_store.pending_reservations()) == 0
    account = gateway.call(gateway.services.accounts.get_account(issued.record.account_id))
    assert account is not None and account.reserved_uc == 0


def test_sdk_streams_closed_early_are_billed_once(gateway: GatewayServer) -> None:
    account = gateway.account("cut-sdk")
    pro = gateway.key(account, "Pro", rpm=10_000)
    nova = gateway.key(account, "Nova", rpm=10_000)

    async def run() -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        claude = anthropic.AsyncAnthropic(base_url=gateway.base_url, api_key=pro.secret, max_retries=0)
        async with claude.messages.stream(
            model="aria-sonnet-4.6", max_tokens=MAX_TOKENS, messages=[{"role": "user", "content": PROMPT}]
        ) as stream:
            delivered = 0
            async for event in stream:
                delivered += event.type == "content_block_delta"
                if delivered == 7:
                    break
            out.append((stream.response.headers["request-id"], delivered))
        gpt = openai.AsyncOpenAI(base_url=f"{gateway.base_url}/v1", api_key=nova.secret, max_retries=0)
        chunks = await gpt.chat.completions.create(
            model="nova-5.5",
            messages=[{"role": "user", "content": PROMPT}],
            stream=True,
            max_tokens=MAX_TOKENS,
        )
        delivered = 0
        async for chunk in chunks:
            delivered += bool(chunk.choices and chunk.choices[0].delta.content)
            if delivered == 11:
                break
        await chunks.close()
        out.append((chunks.response.headers["request-id"], delivered))
        await claude.close()
        await gpt.close()
        return out

    for (request_id, delivered), key in zip(asyncio.run(run()), (pro, nova), strict=True):
        records = wait_for_record(gateway, request_id, key.record.id)
        assert len(records) == 1
        assert delivered <= records[0].output_tokens < 60, records[0]
        assert records[0].status == "client_disconnected" and records[0].charged_uc > 0


@pytest.mark.parametrize("dialect", ["messages", "chat", "responses"])
@pytest.mark.parametrize("tools", [False, True])
def test_tap_estimate_is_exact_for_the_simulator(dialect: FormatName, tools: bool) -> None:
    """Each passthrough tap's per-delta estimate equals the simulator's own count, text and tool
    calls alike, so a cut simulator stream is billed exactly what was relayed."""
    from modelgate.billing.estimate import DELTA_ESTIMATOR
    from modelgate.formats import CODECS, ClientRequest
    from modelgate.upstream.config import SimulatorConfig
    from modelgate.upstream.simulator import SimulatorProvider

    body: dict[str, Any] = body_for(dialect, "sim", PROMPT + " with get_weather", 200, stream=True)
    if tools:
        schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
        if dialect == "messages":
            body["tools"] = [{"name": "get_weather", "description": "Weather", "input_schema": schema}]
        elif dialect == "chat":
            body["tools"] = [{"type": "function", "function": {"name": "get_weather", "parameters": schema}}]
        else:
            body["tools"] = [{"type": "function", "name": "get_weather", "parameters": schema}]
    if dialect == "chat":
        body["stream_options"] = {"include_usage": True}

    async def relay() -> Any:
        provider = SimulatorProvider("sim", SimulatorConfig(reply_words=40))
        reply = await provider.send(dialect, orjson.dumps(body), stream=True, client_headers={})
        codec = CODECS[dialect]
        tap = codec.stream_tap("sim", ClientRequest(codec, body, "sim"), DELTA_ESTIMATOR, None)
        async for chunk in reply.iter_chunks():
            tap.feed(chunk)
        tap.finish()
        return tap

    tap = asyncio.run(relay())
    assert tap.usage is not None and tap.usage.output_tokens > 5
    if not tools:
        assert tap.output_tokens == tap.usage.output_tokens
    else:  # tool arguments are split mid-word by the simulator: one piece more at most
        assert tap.usage.output_tokens - 1 <= tap.output_tokens <= tap.usage.output_tokens + 1
