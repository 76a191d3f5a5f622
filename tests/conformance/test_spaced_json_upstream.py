"""Regression (issue #14): an OpenAI-compatible upstream that writes its JSON the way Python's
``json.dumps`` does by default (``"choices": []``, ``"usage": null``), relayed on the Chat
passthrough path through the real gateway.

The gateway always asks a Chat upstream for the usage chunk. It used to recognise that chunk only
in compact JSON, so a client that had not asked for usage got the extra ``choices: []`` chunk and
``"usage": null`` on every chunk, and the SDK's ordinary ``chunk.choices[0]`` loop raised
IndexError. Whatever the spacing: a client that did not ask sees neither; a client that asked
gets exactly one usage chunk; billing equals the upstream's usage either way.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest
from openai.types.chat import ChatCompletionMessageParam

from modelgate.billing.pricing import cost_uc
from modelgate.ir import Usage
from modelgate.storage.base import UsageRecord
from tests.conformance.conftest import issue_key, usage_records
from tests.fakes.upstream import FakeUpstream, Reply
from tests.gateway.clients import SdkClients
from tests.gateway_server import GatewayServer, running_gateway
from tests.loop_thread import LoopThread

MODEL = "aria-haiku-4.5"
UPSTREAM_MODEL = "llama-spaced"
REPLY = Reply(text="Hello from a spaced upstream.", input_tokens=21, output_tokens=8, chunks=4)
ASK: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hello"}]


@dataclass
class Spaced:
    gateway: GatewayServer
    upstream: FakeUpstream


@pytest.fixture(scope="module")
def spaced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Spaced]:
    with LoopThread("spaced-upstream") as loop:
        upstream = loop.start(FakeUpstream(default=REPLY, dialect="chat", json_style="spaced"))
        providers = [
            {"name": "simulator", "kind": "simulator"},
            {"name": "spaced", "kind": "openai-compatible", "base_url": upstream.base_url},
        ]
        deployments = {MODEL: [{"provider": "spaced", "upstream_model": UPSTREAM_MODEL}]}
        with running_gateway(
            tmp_path_factory.mktemp("spaced") / "data", providers=providers, deployments=deployments
        ) as gateway:
            yield Spaced(gateway, upstream)


def _chunks(spaced: Spaced, secret: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The data chunks of one streamed Chat request, as sent on the wire (``[DONE]`` left out)."""
    with httpx.stream(
        "POST",
        f"{spaced.gateway.base_url}/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {secret}"},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        raw = response.read()
    assert raw.endswith(b"data: [DONE]\n\n")
    events = [block.removeprefix(b"data: ") for block in raw.split(b"\n\n") if block.startswith(b"data: ")]
    return [orjson.loads(event) for event in events if event != b"[DONE]"]


def _billed_as_the_upstream_reported(spaced: Spaced, key_id: str) -> UsageRecord:
    (record,) = usage_records(spaced.gateway, key_id)
    usage = Usage(input_tokens=REPLY.input_tokens, output_tokens=REPLY.output_tokens)
    price = spaced.gateway.services.catalogue.models[MODEL].price
    assert (record.input_tokens, record.output_tokens) == (REPLY.input_tokens, REPLY.output_tokens)
    assert record.status == "ok" and record.charged_uc == cost_uc(usage, price) > 0
    return record


def test_the_fake_upstream_really_writes_spaced_json(spaced: Spaced) -> None:
    """The premise: what this upstream sends is what broke the compact-only recognition."""
    body = {
        "model": UPSTREAM_MODEL,
        "messages": ASK,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    raw = httpx.post(f"{spaced.upstream.base_url}/v1/chat/completions", json=body).content
    assert b'"choices": []' in raw and b'"usage": null' in raw
    assert b'"choices":[]' not in raw and b'"usage":null' not in raw


def test_a_client_that_did_not_ask_sees_no_usage_chunk_and_no_usage_key(spaced: Spaced) -> None:
    secret, key_id = issue_key(spaced.gateway, "Basic")
    chunks = _chunks(spaced, secret, {"model": MODEL, "messages": ASK, "stream": True})
    # The gateway asked the upstream for usage all the same (it bills from it) ...
    forced = spaced.upstream.requests[-1].json()
    assert forced["stream_options"] == {"include_usage": True} and forced["model"] == UPSTREAM_MODEL
    # ... and the client got none of it: every chunk has a choice, none carries a usage key.
    assert chunks and all(chunk["choices"] for chunk in chunks)
    assert [key for chunk in chunks for key in chunk if key == "usage"] == []
    assert {chunk["model"] for chunk in chunks} == {MODEL}
    text = "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks)
    assert text == REPLY.text
    _billed_as_the_upstream_reported(spaced, key_id)


def test_the_sdks_ordinary_streaming_loop_works(spaced: Spaced, sdk: SdkClients) -> None:
    secret, key_id = issue_key(spaced.gateway, "Basic")
    stream = sdk.openai(spaced.gateway.base_url, secret).chat.completions.create(
        model=MODEL, messages=ASK, stream=True
    )
    text = ""
    for chunk in stream:  # raised IndexError on the stripped usage chunk's empty choices
        text += chunk.choices[0].delta.content or ""
    assert text == REPLY.text
    _billed_as_the_upstream_reported(spaced, key_id)


def test_a_client_that_asked_gets_exactly_one_usage_chunk(spaced: Spaced, sdk: SdkClients) -> None:
    secret, key_id = issue_key(spaced.gateway, "Basic")
    body = {"model": MODEL, "messages": ASK, "stream": True, "stream_options": {"include_usage": True}}
    chunks = _chunks(spaced, secret, body)
    usage_chunks = [chunk for chunk in chunks if chunk["choices"] == []]
    assert len(usage_chunks) == 1 and usage_chunks[0] is chunks[-1]
    usage = usage_chunks[0]["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (REPLY.input_tokens, REPLY.output_tokens)
    assert all(chunk.get("usage") is None for chunk in chunks[:-1])
    _billed_as_the_upstream_reported(spaced, key_id)

    # The SDK reads the same usage off the last chunk.
    again, again_key = issue_key(spaced.gateway, "Basic")
    parsed = list(
        sdk.openai(spaced.gateway.base_url, again).chat.completions.create(
            model=MODEL, messages=ASK, stream=True, stream_options={"include_usage": True}
        )
    )
    assert [c.usage is not None for c in parsed].count(True) == 1 and parsed[-1].usage is not None
    assert parsed[-1].usage.completion_tokens == REPLY.output_tokens
    _billed_as_the_upstream_reported(spaced, again_key)


def test_a_whole_reply_in_spaced_json_is_relayed_and_billed(spaced: Spaced, sdk: SdkClients) -> None:
    secret, key_id = issue_key(spaced.gateway, "Basic")
    completion = sdk.openai(spaced.gateway.base_url, secret).chat.completions.create(
        model=MODEL, messages=ASK
    )
    assert completion.model == MODEL and completion.choices[0].message.content == REPLY.text
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (21, 8)
    _billed_as_the_upstream_reported(spaced, key_id)
