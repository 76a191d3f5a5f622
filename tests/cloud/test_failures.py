"""Cloud failures through a real gateway: typed Bedrock exceptions before and after the first
byte, failover between anthropic, bedrock and vertex deployments of one model, and credentials
that never leave the gateway (not in responses, headers, errors or logs)."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
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
    secrets_of,
    start_clouds,
    vertex_provider,
)
from tests.conformance.conftest import issue_key, usage_records
from tests.conformance.upstreams import Scripted
from tests.fakes.bedrock import StreamException
from tests.fakes.upstream import FakeUpstream, Fault, RecordedRequest, Reply
from tests.gateway.clients import anthropic_client, openai_client
from tests.gateway_server import GatewayServer, running_gateway
from tests.loop_thread import LoopThread
from tests.resilience.clients import Format, call
from tests.resilience.harness import (
    ENV as ANTHROPIC_ENV,
)
from tests.resilience.harness import (
    anthropic_provider,
    capture_logs,
)

MARKER = re.compile(rb"req-(\d{5})")
FAILOVER_MODEL = "aria-sonnet-4.6"
#: Distinct upstream ids, so the failover deployments share no health with the others.
FAILOVER_IDS = {
    "anthropic": "claude-failover",
    "bedrock": "anthropic.claude-failover-v1:0",
    "vertex": "claude-failover@1",
}
ROUTING = {
    "max_attempts": 3,
    "backoff_base": 0.001,
    "backoff_max": 0.005,
    "cooldown": 0.2,
    "retry_budget_min_per_second": 1000.0,
}


@dataclass
class Setup:
    gateway: GatewayServer
    clouds: Clouds
    anthropic: FakeUpstream
    anthropic_script: Scripted
    logs: list[str]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    directory = tmp_path_factory.mktemp("failures")
    with LoopThread("fake-upstreams") as fakes, capture_logs() as logs:
        clouds = start_clouds(fakes, directory)
        script = Scripted(default=Reply())
        ant = fakes.start(FakeUpstream(script))
        providers = [
            {"name": "simulator", "kind": "simulator"},
            anthropic_provider("anthropic", ant.base_url, timeouts={"first_byte": 15.0, "idle": 15.0}),
            bedrock_provider("bedrock", clouds.bedrock),
            vertex_provider("vertex", clouds.vertex, clouds.credential_files),
            azure_provider("azure", clouds.azure),
        ]
        deployments: dict[str, Any] = {
            FAILOVER_MODEL: [
                {"provider": kind, "upstream_model": model} for kind, model in FAILOVER_IDS.items()
            ],
            "aria-haiku-4.5": [{"provider": "bedrock", "upstream_model": BEDROCK_MODEL}],
            "nova-5.5": [{"provider": "bedrock", "upstream_model": BEDROCK_MODEL}],
            "aria-opus-4.8": [{"provider": "vertex", "upstream_model": VERTEX_MODEL}],
            "nova-5.6-sol": [{"provider": "vertex", "upstream_model": VERTEX_MODEL}],
            "aria-opus-4.7": [{"provider": "azure", "upstream_model": AZURE_DEPLOYMENT}],
            "nova-5.6-terra": [{"provider": "azure", "upstream_model": AZURE_DEPLOYMENT}],
        }
        with running_gateway(
            directory / "data",
            env={**ENV, **ANTHROPIC_ENV},
            providers=providers,
            deployments=deployments,
            routing=ROUTING,
        ) as gateway:
            yield Setup(gateway, clouds, ant, script, logs)


@pytest.fixture
def fresh(setup: Setup) -> Setup:
    setup.clouds.reset()
    setup.anthropic_script.reset()
    setup.anthropic._decide = setup.anthropic_script
    setup.anthropic.requests.clear()
    return setup


def _throttle_bedrock(request: RecordedRequest) -> Fault | StreamException:
    """Bedrock throttles a stream with a ``throttlingException`` as its first message."""
    return (
        StreamException("throttlingException", "Too many requests")
        if request.path.endswith("-stream")
        else Fault.status(429)
    )


# --- failover -----------------------------------------------------------------------------------


@pytest.mark.parametrize("failing", ["anthropic", "bedrock", "vertex"])
def test_one_throttled_cloud_costs_no_request(fresh: Setup, failing: str) -> None:
    fakes: dict[str, FakeUpstream] = {
        "anthropic": fresh.anthropic,
        "bedrock": fresh.clouds.bedrock,
        "vertex": fresh.clouds.vertex,
    }
    if failing == "bedrock":
        fresh.clouds.bedrock._decide = _throttle_bedrock  # type: ignore[assignment]  # Bedrock-only steps
    else:
        fakes[failing]._decide = lambda request: Fault.status(429)
    secret, _ = issue_key(fresh.gateway, "Pro")
    with (
        anthropic_client(fresh.gateway.base_url, secret) as ant,
        openai_client(fresh.gateway.base_url, secret) as oai,
    ):
        served = _ask_48(ant, oai)
    assert served == 48
    healthy = Counter[int]()
    for name, fake in fakes.items():
        marks = Counter(int(m.group(1)) for r in fake.requests if (m := MARKER.search(r.body)))
        if name == failing:
            assert marks and max(marks.values()) == 1  # really in the rotation, tried at most once each
        else:
            healthy += marks
            _until_ended(fake)
            assert all(r.finished for r in fake.requests)
    # Every request was answered exactly once by a healthy cloud: none re-sent after a byte.
    assert set(healthy) == set(range(48)) and max(healthy.values()) == 1


def _until_ended(fake: FakeUpstream) -> None:
    """Until every request the fake received ended either way: the fake marks a stream finished
    in its own thread just after its last write, which the client may have read already."""
    for _ in range(1000):
        if all(r.finished or r.disconnected_at is not None for r in fake.requests):
            return
        time.sleep(0.01)


def _ask_48(ant: anthropic.Anthropic, oai: openai.OpenAI) -> int:
    """48 requests with unique markers: Messages and Chat, whole and streamed; how many succeeded."""
    served = 0
    for i in range(48):
        prompt: Any = [{"role": "user", "content": f"req-{i:05d} hello"}]
        if i % 4 == 0:
            served += bool(ant.messages.create(model=FAILOVER_MODEL, max_tokens=32, messages=prompt).content)
        elif i % 4 == 1:
            with ant.messages.stream(model=FAILOVER_MODEL, max_tokens=32, messages=prompt) as events:
                served += events.get_final_message().stop_reason == "end_turn"
        elif i % 4 == 2:
            served += (
                oai.chat.completions.create(model=FAILOVER_MODEL, messages=prompt).choices[0].finish_reason
                == "stop"
            )
        else:
            with oai.chat.completions.stream(model=FAILOVER_MODEL, messages=prompt) as chunks:
                served += chunks.get_final_completion().choices[0].finish_reason == "stop"
    return served


# --- typed Bedrock exceptions -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "status", "attempts"),
    [
        ("throttlingException", 200, 2),
        ("serviceUnavailableException", 200, 2),
        ("internalServerException", 200, 2),
        ("modelStreamErrorException", 200, 2),
        ("validationException", 400, 1),
        ("modelTimeoutException", 504, 1),
    ],
)
def test_an_exception_before_the_first_byte_follows_the_retry_rules(
    fresh: Setup, code: str, status: int, attempts: int
) -> None:
    fresh.clouds.reset(bedrock=[StreamException(code, "fake problem"), Reply()])
    secret, key_id = issue_key(fresh.gateway, "Pro")
    outcome = call(fresh.gateway.base_url, secret, "messages", "aria-haiku-4.5", stream=True)
    assert outcome.status == status and not outcome.in_band
    assert len(fresh.clouds.bedrock.requests) == attempts
    if status == 200:
        assert outcome.text == "Hello from the fake upstream."
        assert usage_records(fresh.gateway, key_id)[0].output_tokens == 7
    else:
        assert usage_records(fresh.gateway, key_id)[0].charged_uc == 0


@pytest.mark.parametrize(
    ("fmt", "group", "model"),
    [
        ("messages", "Pro", "aria-haiku-4.5"),
        ("chat", "Pro", "aria-haiku-4.5"),
        ("responses", "Nova", "nova-5.5"),
    ],
)
def test_an_exception_mid_stream_is_an_in_band_error_and_is_billed(
    fresh: Setup, fmt: Format, group: str, model: str
) -> None:
    reply = Reply(text="one two three four five six seven eight", chunks=8, input_tokens=40)
    # After message_start, content_block_start, ping and three text deltas.
    fresh.clouds.reset(
        bedrock=[StreamException("modelStreamErrorException", "The model stream broke.", 6, reply)]
    )
    secret, key_id = issue_key(fresh.gateway, group)
    outcome = call(fresh.gateway.base_url, secret, fmt, model, stream=True)
    assert outcome.status == 200 and outcome.in_band
    assert "stream broke" in outcome.message
    assert outcome.text and outcome.text != reply.text  # some text arrived, not all of it
    assert len(fresh.clouds.bedrock.requests) == 1  # never retried after the first byte
    record = usage_records(fresh.gateway, key_id)[0]
    assert record.status == "upstream_error_in_band"
    assert record.input_tokens == 40 and record.output_tokens > 0  # the cloud's input, output relayed
    price = fresh.gateway.services.catalogue.models[model].price
    assert record.charged_uc == cost_uc(Usage(input_tokens=40, output_tokens=record.output_tokens), price) > 0


# --- secrets ------------------------------------------------------------------------------------

#: Per kind: its two models (Pro, Nova) and upstream answers that quote what they were sent.
SECRET_SCENARIOS: dict[str, tuple[tuple[str, str], list[Any]]] = {
    "bedrock": (
        ("aria-haiku-4.5", "nova-5.5"),
        [
            Fault.echo_key(403),
            Fault.status(429),
            StreamException("modelStreamErrorException", after=4),
            Reply(),
        ],
    ),
    "vertex": (
        ("aria-opus-4.8", "nova-5.6-sol"),
        [Fault.echo_key(401), Fault.echo_key(400), Fault.status(429), Reply()],
    ),
    "azure": (
        ("aria-opus-4.7", "nova-5.6-terra"),
        [Fault.echo_key(401), Fault.echo_key(400), Fault.status(429), Reply()],
    ),
}


def test_cloud_credentials_appear_in_no_response_header_body_or_log(fresh: Setup) -> None:
    keys = {group: issue_key(fresh.gateway, group)[0] for group in ("Pro", "Nova")}
    seen: list[str] = []
    for kind, ((aria, nova), steps) in SECRET_SCENARIOS.items():
        fake: FakeUpstream = getattr(fresh.clouds, kind)
        for step in steps:
            for fmt, group, model in (
                ("messages", "Pro", aria),
                ("chat", "Nova", nova),
                ("responses", "Nova", nova),
            ):
                for stream in (False, True):
                    fresh.clouds.reset(**{kind: [step]})
                    outcome = call(fresh.gateway.base_url, keys[group], fmt, model, stream=stream)  # type: ignore[arg-type]
                    assert fake.requests, "the cloud was called"
                    seen += [outcome.raw, outcome.message, str(outcome.headers)]
                    if isinstance(step, Fault) and step.kind == "echo_key":
                        assert outcome.status >= 400
    secrets = secrets_of(fresh.clouds)
    hosts = [
        f.base_url.removeprefix("http://")
        for f in (fresh.clouds.bedrock, fresh.clouds.vertex, fresh.clouds.azure)
    ]
    assert fresh.clouds.vertex.issued() and secrets  # tokens were issued, so there was something to leak
    for text in seen + fresh.logs:
        for secret in [*secrets, *hosts, "123456789012"]:
            assert secret not in text, f"{secret[:12]}... leaked: {text[:300]}"
