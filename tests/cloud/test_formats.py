"""Every client format against every cloud kind, whole and streamed, text and a tool round trip.

One gateway serves an aria (Messages/Chat) and a nova (Chat/Responses) model from each cloud:
Bedrock, Vertex AI, and Azure OpenAI in both URL styles. The fakes speak each cloud's wire (SigV4,
event streams, OAuth2 bearer tokens, ``api-key``); the official SDKs' stream helpers judge what
clients get; the usage records must hold exactly the counts the cloud reported.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from modelgate.billing.pricing import cost_uc
from modelgate.ir import Usage
from tests.cloud.harness import (
    AZURE_DEPLOYMENT,
    BEDROCK_MODEL,
    ENV,
    VERTEX_MODEL,
    Clouds,
    azure_provider,
    bedrock_provider,
    start_clouds,
    vertex_provider,
)
from tests.cloud.sdk import Format, turn
from tests.conformance.conftest import issue_key, usage_records
from tests.fakes.bedrock import CloudRequest
from tests.fakes.upstream import FakeUpstream, Reply
from tests.gateway.clients import anthropic_client
from tests.gateway_server import GatewayServer, running_gateway
from tests.loop_thread import LoopThread

#: kind -> (aria model for Messages clients, nova model for Chat and Responses clients).
MODELS = {
    "bedrock": ("aria-haiku-4.5", "nova-5.5"),
    "vertex": ("aria-opus-4.8", "nova-5.6-sol"),
    "azure-v1": ("aria-opus-4.7", "nova-5.6-terra"),
    "azure-deployments": ("aria-opus-4.6", "nova-6-sol"),
}
TOOL = Reply.tool_call(
    "get_weather", {"city": "Paris"}, text="Let me check.", input_tokens=30, output_tokens=9
)
FINAL = Reply(text="It is sunny in Paris.", input_tokens=45, output_tokens=8)


@dataclass
class Cloudy:
    gateway: GatewayServer
    clouds: Clouds


@pytest.fixture(scope="module")
def cloudy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloudy]:
    directory = tmp_path_factory.mktemp("clouds")
    with LoopThread("fake-upstreams") as fakes:
        clouds = start_clouds(fakes, directory)
        providers = [
            {"name": "simulator", "kind": "simulator"},
            bedrock_provider("bedrock", clouds.bedrock),
            vertex_provider("vertex", clouds.vertex, clouds.credential_files),
            azure_provider("azure-v1", clouds.azure),
            azure_provider("azure-deployments", clouds.azure, api="deployments"),
        ]
        upstream = {
            "bedrock": BEDROCK_MODEL,
            "vertex": VERTEX_MODEL,
            "azure-v1": AZURE_DEPLOYMENT,
            "azure-deployments": AZURE_DEPLOYMENT,
        }
        deployments = {
            model: [{"provider": kind, "upstream_model": upstream[kind]}]
            for kind, pair in MODELS.items()
            for model in pair
        }
        with running_gateway(
            directory / "data",
            env=ENV,
            providers=providers,
            deployments=deployments,
            routing={"max_attempts": 1},
        ) as gateway:
            yield Cloudy(gateway, clouds)


def _fake(clouds: Clouds, kind: str) -> FakeUpstream:
    return {"bedrock": clouds.bedrock, "vertex": clouds.vertex}.get(kind, clouds.azure)


def _model_and_group(kind: str, fmt: Format) -> tuple[str, str]:
    aria, nova = MODELS[kind]
    return (aria, "Pro") if fmt == "messages" else (nova, "Nova")


def _passthrough_names_upstream_model(kind: str, fmt: Format) -> bool:
    # Azure answers name the deployment's underlying model (gpt-4o-...), not the deployment, and
    # a same-dialect relay rewrites only the id it sent: as for the openai kind (see the note).
    return kind.startswith("azure") and fmt != "messages"


def _script(clouds: Clouds, kind: str, *steps: Any) -> None:
    clouds.reset(**{kind.split("-")[0]: list(steps)})


def _cost(gateway: GatewayServer, model: str, input_tokens: int, output_tokens: int) -> int:
    price = gateway.services.catalogue.models[model].price
    return cost_uc(Usage(input_tokens=input_tokens, output_tokens=output_tokens), price)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("fmt", ["messages", "chat", "responses"])
@pytest.mark.parametrize("kind", list(MODELS))
def test_text(cloudy: Cloudy, kind: str, fmt: Format, stream: bool) -> None:
    model, group = _model_and_group(kind, fmt)
    secret, key_id = issue_key(cloudy.gateway, group)
    _script(cloudy.clouds, kind, Reply(text="Hello from the cloud.", input_tokens=21, output_tokens=6))
    answer = turn(fmt, cloudy.gateway.base_url, secret, model, stream=stream)
    assert answer.text == "Hello from the cloud."
    assert answer.finish in ("end_turn", "stop", "completed")
    if not _passthrough_names_upstream_model(kind, fmt):
        assert answer.model == model
    fake = _fake(cloudy.clouds, kind)
    assert len(fake.requests) == 1
    sent = fake.requests[0]
    assert isinstance(sent, CloudRequest) and sent.credential  # authenticated as the cloud demands
    record = usage_records(cloudy.gateway, key_id)[0]
    assert (record.status, record.input_tokens, record.output_tokens) == ("ok", 21, 6)
    assert record.charged_uc == _cost(cloudy.gateway, model, 21, 6)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("fmt", ["messages", "chat", "responses"])
@pytest.mark.parametrize("kind", list(MODELS))
def test_tool_round_trip(cloudy: Cloudy, kind: str, fmt: Format, stream: bool) -> None:
    model, group = _model_and_group(kind, fmt)
    secret, key_id = issue_key(cloudy.gateway, group)
    _script(cloudy.clouds, kind, TOOL, FINAL)
    first = turn(fmt, cloudy.gateway.base_url, secret, model, stream=stream, tools=True)
    assert first.tool is not None
    assert (first.tool.name, first.tool.arguments) == ("get_weather", {"city": "Paris"})
    assert first.finish in ("tool_use", "tool_calls")
    second = turn(fmt, cloudy.gateway.base_url, secret, model, stream=stream, after=first)
    assert second.text == "It is sunny in Paris." and second.tool is None
    # The cloud got the tool result back in its own dialect, under the id the client saw.
    sent = orjson.loads(_fake(cloudy.clouds, kind).requests[-1].body)
    if kind in ("bedrock", "vertex"):
        result = sent["messages"][-1]["content"][0]
        assert result["type"] == "tool_result" and result["tool_use_id"] == first.tool.id
    elif fmt == "responses":
        outputs = [
            i for i in sent["input"] if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        assert outputs and outputs[0]["call_id"] == first.tool.id
    else:
        assert (
            sent["messages"][-1]["role"] == "tool" and sent["messages"][-1]["tool_call_id"] == first.tool.id
        )
    records = usage_records(cloudy.gateway, key_id, count=2)
    assert [(r.input_tokens, r.output_tokens) for r in records] == [(30, 9), (45, 8)]
    assert [r.charged_uc for r in records] == [
        _cost(cloudy.gateway, model, 30, 9),
        _cost(cloudy.gateway, model, 45, 8),
    ]


@pytest.mark.parametrize("kind", ["bedrock", "vertex"])
def test_count_tokens_is_asked_of_the_cloud(cloudy: Cloudy, kind: str) -> None:
    secret, _ = issue_key(cloudy.gateway, "Pro")
    _script(cloudy.clouds, kind, Reply(input_tokens=321))
    client = anthropic_client(cloudy.gateway.base_url, secret)
    counted = client.messages.count_tokens(
        model=MODELS[kind][0], messages=[{"role": "user", "content": "Hi"}]
    )
    assert counted.input_tokens == 321
    (sent,) = _fake(cloudy.clouds, kind).requests
    assert sent.path.endswith("/count-tokens" if kind == "bedrock" else "/count-tokens:rawPredict")
