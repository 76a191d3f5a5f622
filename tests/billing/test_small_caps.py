"""A small cap is usable to its end and a refusal says why (issue #35 item 1).

The hold's input bound is the body's bytes plus a small allowance (128 tokens), and the larger tool
allowance (1,024) only for a request offering tools or asking for structured output; a 402 says
the request's worst case, its minimum, what is left of the binding limit and what lowers the hold,
in each wire format. Against a fake upstream that bills every request as dearly as a provider could
(every byte of text a token, every input token a 1-hour cache write, the whole ``max_tokens``, its
documented tool prompt, images and PDF pages at their published rates), the charge never exceeds
the hold, in every format, with images, documents and tools.
"""

from __future__ import annotations

import asyncio
import base64
import math
import struct
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from modelgate.billing.input_bound import MediaRules, input_bound
from modelgate.billing.pricing import bound_uc
from modelgate.gateway import headers as hdr
from tests.billing.helpers import PATHS, _parse_sse, headers_for, wait_for_record
from tests.billing.wired import gateway_over_fakes
from tests.fakes.upstream import FakeUpstream, RecordedRequest, Reply
from tests.gateway_server import GatewayServer, running_gateway

#: Anthropic's published tool-use system prompt (the largest it lists, Claude 3 Opus: 530 tokens).
TOOL_PROMPT_TOKENS = 530
#: Tokens a provider frames each message with (Chat: 3 to 4; Messages: a few).
TOKENS_PER_MESSAGE = 4
#: A 400 x 300 image: Anthropic bills width x height / 750 tokens, OpenAI (high detail)
#: 85 + 170 per 512-pixel tile (one here).
IMAGE_SIZE = (400, 300)
IMAGE_TOKENS = max(math.ceil(400 * 300 / 750), 85 + 170 * 1)
#: Anthropic bills 1,500 to 3,000 tokens a PDF page (text and the page's image).
PDF_PAGES, TOKENS_PER_PAGE = 2, 3000


def png(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return b"\x89PNG\r\n\x1a\n" + chunk


def pdf(pages: int) -> bytes:
    return f"%PDF-1.4\n1 0 obj\n<< /Type /Pages /Kids [] /Count {pages} >>\nendobj\n%%EOF".encode()


IMAGE = base64.b64encode(png(*IMAGE_SIZE)).decode()
PDF = base64.b64encode(pdf(PDF_PAGES)).decode()
TOOL = {
    "name": "get_weather",
    "description": "The weather at a place, now.",
    "schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
TEXT = "Describe the picture and the document, then look up the weather in Zürich — «vite»."


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def dearest_bill(request: RecordedRequest) -> Reply:
    """The most a provider could bill for what it received: one token per byte of every string
    (media data aside: priced as the provider prices them), a few tokens per message, its tool
    prompt, and every output token ``max_tokens`` allows; Messages input as 1-hour cache writes."""
    body = request.json()
    text = orjson.dumps(body).decode()
    media = text.count(IMAGE) * IMAGE_TOKENS + text.count(PDF) * PDF_PAGES * TOKENS_PER_PAGE
    strings = sum(len(s.encode()) for s in _strings(body) if IMAGE not in s and PDF not in s)
    messages = body.get("messages") or body.get("input") or []
    tokens = strings + media + TOKENS_PER_MESSAGE * (len(messages) + 1)
    if body.get("tools"):
        tokens += TOOL_PROMPT_TOKENS
    output = next(body[f] for f in ("max_tokens", "max_completion_tokens", "max_output_tokens") if f in body)
    if request.dialect == "messages":
        return Reply(
            text="ok",
            input_tokens=0,
            output_tokens=output,
            cache_write_tokens=tokens,
            cache_write_1h_tokens=tokens,
        )
    return Reply(text="ok", input_tokens=tokens, output_tokens=output)


@pytest.fixture(scope="module")
def dear(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    deployments = {
        "aria-sonnet-4.6": "fake-anthropic",
        "nova-5.5": "fake-anthropic",
        "nova-6-sol": "fake-openai",
    }
    with gateway_over_fakes(
        tmp_path_factory.mktemp("dear") / "data",
        deployments,
        anthropic=FakeUpstream(script=dearest_bill),
        openai=FakeUpstream(script=dearest_bill),
    ) as server:
        yield server


def rich_body(fmt: str, model: str, *, media: bool, tools: bool) -> dict[str, Any]:
    """A streamed request in ``fmt`` with text, optionally an image and a PDF, optionally a tool."""
    if fmt == "messages":
        content: list[dict[str, Any]] = [{"type": "text", "text": TEXT}]
        if media:
            content += [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": IMAGE}},
                {
                    "type": "document",
                    "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
                },
            ]
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": 300,
            "system": "Be brief.",
            "messages": [{"role": "user", "content": content}],
        }
        if tools:
            body["tools"] = [
                {"name": TOOL["name"], "description": TOOL["description"], "input_schema": TOOL["schema"]}
            ]
    elif fmt == "chat":
        parts: list[dict[str, Any]] = [{"type": "text", "text": TEXT}]
        if media:
            parts += [
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{IMAGE}"}},
                {
                    "type": "file",
                    "file": {"filename": "a.pdf", "file_data": f"data:application/pdf;base64,{PDF}"},
                },
            ]
        body = {
            "model": model,
            "max_tokens": 300,
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": parts}],
        }
        if tools:
            function = {
                "name": TOOL["name"],
                "description": TOOL["description"],
                "parameters": TOOL["schema"],
            }
            body["tools"] = [{"type": "function", "function": function}]
    else:
        items: list[dict[str, Any]] = [{"type": "input_text", "text": TEXT}]
        if media:
            items += [
                {"type": "input_image", "image_url": f"data:image/png;base64,{IMAGE}"},
                {
                    "type": "input_file",
                    "filename": "a.pdf",
                    "file_data": f"data:application/pdf;base64,{PDF}",
                },
            ]
        body = {
            "model": model,
            "max_output_tokens": 300,
            "instructions": "Be brief.",
            "input": [{"role": "user", "content": items}],
        }
        if tools:
            body["tools"] = [{"type": "function", **{k: v for k, v in TOOL.items() if k != "schema"},
                              "parameters": TOOL["schema"]}]  # fmt: skip
    body["stream"] = True
    return body


def _held_and_charged(server: GatewayServer, fmt: str, body: dict[str, Any], name: str) -> tuple[int, Any]:
    group = "Nova" if str(body["model"]).startswith("nova") else "Pro"
    account = server.account(name)
    issued = server.key(account, group, rpm=1000)

    async def run() -> tuple[int, str]:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            head = {**headers_for(fmt, issued.secret), "content-type": "application/json"}
            async with client.stream("POST", PATHS[fmt], content=orjson.dumps(body), headers=head) as r:
                assert r.status_code == 200, (await r.aread()).decode()
                events = _parse_sse(await r.aread())
                assert events
                return int(r.headers[hdr.BALANCE_REMAINING]), r.headers.get("request-id") or r.headers[
                    "x-request-id"
                ]

    balance_after_hold, request_id = asyncio.run(run())
    (record,) = wait_for_record(server, request_id, issued.record.id)
    return account.balance_uc - balance_after_hold, record


@pytest.mark.parametrize(
    ("fmt", "model"),
    [
        ("messages", "aria-sonnet-4.6"),  # passthrough to the Messages upstream
        ("chat", "aria-sonnet-4.6"),  # translated to the Messages upstream
        ("responses", "nova-5.5"),  # translated to the Messages upstream
        ("chat", "nova-6-sol"),  # passthrough to the OpenAI upstream
        ("responses", "nova-6-sol"),  # passthrough to the OpenAI upstream
    ],
)
@pytest.mark.parametrize(("media", "tools"), [(False, False), (True, False), (False, True), (True, True)])
def test_the_dearest_bill_never_exceeds_the_hold(
    dear: GatewayServer, fmt: str, model: str, media: bool, tools: bool
) -> None:
    body = rich_body(fmt, model, media=media, tools=tools)
    held, record = _held_and_charged(dear, fmt, body, f"dear-{fmt}-{model}-{media}-{tools}")
    assert record.status == "ok"
    assert record.output_tokens == 300
    assert record.input_tokens + record.cache_creation_tokens > len(TEXT)
    assert 0 < record.charged_uc <= held
    assert record.shortfall_uc == 0


# --- the 402 and small caps, on the simulator ------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    with running_gateway(tmp_path_factory.mktemp("small-caps") / "data") as server:
        yield server


def _post(server: GatewayServer, fmt: str, secret: str, body: dict[str, Any]) -> httpx.Response:
    head = {**headers_for(fmt, secret), "content-type": "application/json"}
    return httpx.post(f"{server.base_url}{PATHS[fmt]}", content=orjson.dumps(body), headers=head, timeout=30)


QUESTION = (
    "Here is a short function that parses a date; can you tell me why it fails for the last day of "
    "February in a leap year, and suggest the smallest change that fixes it? Answer in one sentence."
)


def _plain(fmt: str, model: str, max_tokens: int | None) -> dict[str, Any]:
    if fmt == "responses":
        body: dict[str, Any] = {"model": model, "input": "Hello"}
        limit = "max_output_tokens"
    else:
        body = {"model": model, "messages": [{"role": "user", "content": "Hello"}]}
        limit = "max_tokens"
    if max_tokens is not None:
        body[limit] = max_tokens
    return body


def test_a_fresh_key_with_a_tiny_cap_runs_a_small_request(gateway: GatewayServer) -> None:
    """The issue's first request: a Pro key capped at 0.002 credits, sonnet, max_tokens 40 (before:
    402 'this key has reached its monthly credit cap' with nothing spent)."""
    issued = gateway.key(gateway.account("tiny-cap"), "Pro", monthly_cap_uc=2_000)
    response = _post(gateway, "messages", issued.secret, _plain("messages", "sonnet", 40))
    assert response.status_code == 200, response.text
    assert int(response.headers[hdr.CHARGED]) > 0


def test_a_cap_of_50000_is_not_refused_at_42985(tmp_path: Any) -> None:
    """The issue's second case: 42,985 µc of a 50,000 µc cap spent, the next small request runs."""
    # 14,000 x 3 + 65 x 15 + 33 x 0.3 = 42,984.9, rounded up once: 42,985 µc.
    fake = FakeUpstream(script=[Reply(input_tokens=14_000, output_tokens=65, cache_read_tokens=33)])
    with gateway_over_fakes(
        tmp_path / "data", {"aria-sonnet-4.6": "fake-anthropic"}, anthropic=fake
    ) as server:
        issued = server.key(server.account("fifty"), "Pro", monthly_cap_uc=50_000)
        first = _post(server, "messages", issued.secret, _plain("messages", "sonnet", 100))
        assert first.status_code == 200, first.text
        assert first.headers[hdr.CHARGED] == "42985"
        assert first.headers[hdr.CAP_REMAINING] == "7015"
        # A question of a few sentences (before, its hold of (bytes + 1,024) x 6 µc did not
        # fit in the 7,015 µc left, so the cap could never be spent to its end).
        body = _plain("messages", "sonnet", 40)
        body["messages"][0]["content"] = QUESTION
        second = _post(server, "messages", issued.secret, body)
        assert second.status_code == 200, second.text
        assert int(second.headers[hdr.CAP_REMAINING]) < 7015


@pytest.mark.parametrize("fmt", ["messages", "chat", "responses"])
def test_the_402_says_the_worst_case_what_is_left_and_how_to_lower_it(
    gateway: GatewayServer, fmt: str
) -> None:
    model = "nova-5.5" if fmt == "responses" else "aria-sonnet-4.6"
    group = "Nova" if fmt == "responses" else "Pro"
    issued = gateway.key(gateway.account(f"refused-{fmt}"), group, monthly_cap_uc=300)
    body = _plain(fmt, model, 1000)
    response = _post(gateway, fmt, issued.secret, body)
    assert response.status_code == 402
    assert response.headers["x-should-retry"] == "false"
    price = gateway.services.catalogue.models[model].price
    bound = len(orjson.dumps(body)) + 128
    worst, minimum = bound_uc(bound, 1000, price), bound_uc(bound, 1, price)
    error = response.json()["error"]
    if fmt == "messages":
        assert (error["type"], error["details"]["error_code"]) == ("billing_error", "monthly_cap_reached")
    else:
        assert (error["type"], error["code"]) == ("insufficient_quota", "monthly_cap_reached")
    message = error["message"]
    assert f"worst-case cost is {worst:,} µc" in message
    assert f"up to {bound:,} input tokens, max_tokens 1,000" in message
    assert f"lowered to 1 it needs {minimum:,} µc" in message
    assert "monthly credit cap has 300 µc (0.0003 credits) left this UTC month" in message
    assert "shorter prompt" in message and "raise the key's monthly cap" in message
    assert "reached its monthly credit cap" not in message


def test_the_402_names_the_balance_when_it_binds(gateway: GatewayServer) -> None:
    account = gateway.account("poor", credits=0.0005)
    issued = gateway.key(account, "Pro", monthly_cap_uc=1_000_000)
    body = _plain("chat", "aria-sonnet-4.6", 50)
    body["tools"] = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    response = _post(gateway, "chat", issued.secret, body)
    assert response.status_code == 402
    error = response.json()["error"]
    assert error["code"] == "insufficient_balance"
    # A request offering tools holds the tool allowance too.
    assert f"up to {len(orjson.dumps(body)) + 128 + 1024:,} input tokens" in error["message"]
    assert "credit balance has 500 µc (0.0005 credits) free" in error["message"]
    assert "top up the account" in error["message"]


@pytest.mark.parametrize(
    ("body", "adds"),
    [
        ({"messages": []}, False),
        ({"tools": []}, False),
        ({"tools": [{"name": "f"}]}, True),
        ({"functions": [{"name": "f"}]}, True),
        ({"mcp_servers": [{"url": "https://x"}]}, True),
        ({"response_format": {"type": "text"}}, False),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, True),
        ({"text": {"format": {"type": "text"}, "verbosity": "low"}}, False),
        ({"text": {"format": {"type": "json_schema", "schema": {}}}}, True),
        ({"output_config": {"effort": "low"}}, False),
        ({"output_config": {"format": {"type": "json_schema", "schema": {}}}}, True),
        ({"output_format": {"type": "json_schema", "schema": {}}}, True),
        ({"generationConfig": {"temperature": 0.2}}, False),
        ({"generationConfig": {"responseSchema": {"type": "OBJECT"}}}, True),
        ({"generation_config": {"response_json_schema": {"type": "object"}}}, True),
    ],
)
def test_the_tool_allowance_is_held_for_tools_and_schemas_only(body: dict[str, Any], adds: bool) -> None:
    rules = MediaRules(128, 1600, 400, 100, 3000, 100, tool_overhead_tokens=1024)
    raw = orjson.dumps(body)
    assert input_bound(raw, body, rules) == len(raw) + 128 + (1024 if adds else 0)
