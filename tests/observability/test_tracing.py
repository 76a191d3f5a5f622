"""OpenTelemetry traces exported over OTLP/HTTP to a receiver on loopback (issue 12): the span
tree and its GenAI attributes per endpoint, whole and streamed; the client's ``traceparent``
continued and each attempt's sent upstream; a failover as two attempt spans; nothing imported
when tracing is off."""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from modelgate.clock import month_of
from modelgate.storage.base import UsageRecord
from tests.fakes import FakeUpstream, Fault, Reply
from tests.gateway.clients import SdkClients
from tests.gateway_server import GatewayServer, running_gateway
from tests.loop_thread import LoopThread
from tests.observability.otlp import CLIENT, ERROR, INTERNAL, SERVER, OtlpReceiver, ReceivedSpan
from tests.polling import wait_until
from tests.resilience.harness import ENV, anthropic_provider, openai_provider

HELLO: Any = [{"role": "user", "content": "Hello there traces"}]


@dataclass
class World:
    gateway: GatewayServer
    receiver: OtlpReceiver
    good: FakeUpstream
    bad: FakeUpstream
    pro: str
    nova: str

    def spans(self, trace_id: str) -> list[ReceivedSpan]:
        """The trace's spans once its server span arrived (a stream's ends after its last byte
        reached the client: when it has settled)."""
        tracing = self.gateway.services.telemetry.tracing
        assert tracing is not None

        def complete() -> list[ReceivedSpan]:
            assert tracing.flush()
            spans = self.receiver.trace(trace_id)
            return spans if any(s.kind == SERVER for s in spans) else []

        return wait_until(complete, f"the server span of trace {trace_id}")

    def usage(self, request_id: str) -> UsageRecord:
        month = month_of(self.gateway.services.clock.time())
        records = self.gateway.call(self.gateway.services.usage.usage_records(month, limit=1000))
        return next(r for r in records if r.request_id == request_id)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with LoopThread("fakes") as loop:
        receiver = loop.start(OtlpReceiver())
        good = loop.start(FakeUpstream(default=Reply(text="traced answer", input_tokens=21, output_tokens=9)))
        bad = loop.start(FakeUpstream(default=Fault.status(503)))
        providers = [
            anthropic_provider("ant", good.base_url),
            openai_provider("oai", good.base_url),
            anthropic_provider("ant-bad", bad.base_url),
        ]
        deployments = {
            "aria-sonnet-4.6": [{"provider": "ant", "upstream_model": "claude-up"}],
            "nova-5.5": [{"provider": "oai", "upstream_model": "gpt-up"}],
            "aria-opus-4.8": [
                {"provider": "ant-bad", "upstream_model": "claude-bad", "weight": 1_000_000},
                {"provider": "ant", "upstream_model": "claude-up", "weight": 1},
            ],
        }
        routing = {"max_attempts": 2, "backoff_base": 0.001, "backoff_max": 0.002}
        with running_gateway(
            tmp_path / "data",
            env=ENV,
            providers=providers,
            deployments=deployments,
            default_provider="",
            unrouted="hide",
            routing=routing,
            otel={"endpoint": receiver.endpoint, "service_name": "modelgate-test"},
        ) as gateway:
            account = gateway.account("traced")
            yield World(
                gateway,
                receiver,
                good,
                bad,
                gateway.key(account, "Pro").secret,
                gateway.key(account, "Nova").secret,
            )


def traceparent() -> tuple[str, str, str]:
    trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{parent_id}-01", trace_id, parent_id


def call(world: World, sdk: SdkClients, endpoint: str, stream: bool, header: str) -> str:
    """One request through an official SDK with the client's ``traceparent``; its request id."""
    url, extra = world.gateway.base_url, {"traceparent": header}
    if endpoint == "messages":
        ant = sdk.anthropic(url, world.pro)
        if stream:
            with ant.messages.stream(
                model="aria-sonnet-4.6", max_tokens=64, messages=HELLO, extra_headers=extra
            ) as events:
                events.get_final_message()
                return str(events.response.headers["request-id"])
        raw = ant.messages.with_raw_response.create(
            model="aria-sonnet-4.6", max_tokens=64, messages=HELLO, extra_headers=extra
        )
        return str(raw.headers["request-id"])
    oai = sdk.openai(url, world.nova)
    if endpoint == "chat":
        raw_chat = oai.chat.completions.with_raw_response.create(
            model="nova-5.5", messages=HELLO, stream=stream, extra_headers=extra
        )
        if stream:
            list(raw_chat.parse())
        return str(raw_chat.headers["x-request-id"])
    raw_responses = oai.responses.with_raw_response.create(
        model="nova-5.5", input="Hello there traces", stream=stream, extra_headers=extra
    )
    if stream:
        list(raw_responses.parse())
    return str(raw_responses.headers["x-request-id"])


def one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("endpoint", ["messages", "chat", "responses"])
def test_each_request_is_a_span_tree_with_genai_attributes(
    world: World, sdk: SdkClients, endpoint: str, stream: bool
) -> None:
    header, trace_id, parent_id = traceparent()
    request_id = call(world, sdk, endpoint, stream, header)
    spans = world.spans(trace_id)
    path = {"messages": "/v1/messages", "chat": "/v1/chat/completions", "responses": "/v1/responses"}[
        endpoint
    ]
    server = one(spans, f"POST {path}")
    # The server span continues the client's trace, as its child.
    assert (server.kind, server.parent_span_id, server.service) == (SERVER, parent_id, "modelgate-test")
    upstream_model = "claude-up" if endpoint == "messages" else "gpt-up"
    attempt = one(spans, f"chat {upstream_model}")
    children = {s.name: s for s in spans if s.parent_span_id == server.span_id}
    assert set(children) == {"authenticate", "reserve", attempt.name, "settle"}
    assert {children[n].kind for n in ("authenticate", "reserve", "settle")} == {INTERNAL}
    assert attempt.kind == CLIENT and attempt.status != ERROR
    # Phases in order: authenticate, reserve, the attempt, settle.
    order = sorted(children.values(), key=lambda s: s.start_ns)
    assert [s.name for s in order] == ["authenticate", "reserve", attempt.name, "settle"]
    assert all(server.start_ns <= s.start_ns and s.end_ns <= server.end_ns for s in order)

    provider = "anthropic" if endpoint == "messages" else "openai"
    record = world.usage(request_id)
    assert record.input_tokens == 21 and record.output_tokens == 9
    attrs = server.attributes
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.request.model"] == ("aria-sonnet-4.6" if endpoint == "messages" else "nova-5.5")
    assert attrs["gen_ai.response.model"] == upstream_model
    assert attrs["gen_ai.provider.name"] == provider
    assert (attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"]) == (21, 9)
    assert attrs["modelgate.charged_microcredits"] == record.charged_uc > 0
    assert attrs["http.response.status_code"] == 200 and attrs["modelgate.outcome"] == "ok"
    assert attrs["modelgate.request_id"] == request_id and attrs["modelgate.stream"] is stream
    assert attempt.attributes["gen_ai.request.model"] == upstream_model
    assert attempt.attributes["gen_ai.provider.name"] == provider

    # The upstream got the attempt span's context: same trace, the attempt as parent.
    sent = world.good.requests[-1].headers["traceparent"]
    assert sent == f"00-{trace_id}-{attempt.span_id}-01"


def test_a_failover_is_two_attempt_spans_the_first_an_error(world: World, sdk: SdkClients) -> None:
    header, trace_id, _ = traceparent()
    message = sdk.anthropic(world.gateway.base_url, world.pro).messages.create(
        model="aria-opus-4.8", max_tokens=32, messages=HELLO, extra_headers={"traceparent": header}
    )
    assert message.content[0].text == "traced answer"  # type: ignore[union-attr]
    spans = world.spans(trace_id)
    server = one(spans, "POST /v1/messages")
    attempts = sorted((s for s in spans if s.kind == CLIENT), key=lambda s: s.start_ns)
    assert [s.name for s in attempts] == ["chat claude-bad", "chat claude-up"]
    assert all(s.parent_span_id == server.span_id for s in attempts)
    failed, served = attempts
    assert failed.status == ERROR and failed.attributes["error.type"] == "server_error"
    assert failed.attributes["http.response.status_code"] == 503
    assert served.status != ERROR and served.attributes["modelgate.attempt"] == 2
    assert server.attributes["modelgate.upstream_attempts"] == 2
    # Each attempt sent its own span as the upstream's parent.
    assert world.bad.requests[-1].headers["traceparent"].split("-")[2] == failed.span_id
    assert world.good.requests[-1].headers["traceparent"].split("-")[2] == served.span_id


def test_a_refused_request_is_a_server_span_with_its_error(world: World, sdk: SdkClients) -> None:
    header, trace_id, _ = traceparent()
    oai = sdk.openai(world.gateway.base_url, world.pro)  # a Pro key does not see nova models
    with pytest.raises(openai.NotFoundError):
        oai.chat.completions.create(model="nova-5.5", messages=HELLO, extra_headers={"traceparent": header})
    spans = world.spans(trace_id)
    server = one(spans, "POST /v1/chat/completions")
    # A client's error: recorded, but not an error of the server span (GenAI/HTTP conventions).
    assert server.attributes["http.response.status_code"] == 404 and server.status != ERROR
    assert server.attributes["modelgate.outcome"] == "refused_not_found"
    assert server.attributes["error.type"] == "model_not_found"
    assert [s.name for s in spans if s.parent_span_id == server.span_id] == ["authenticate"]
    assert one(spans, "authenticate").status == ERROR


def test_tracing_off_builds_no_tracer_and_loads_no_exporter(tmp_path: Path) -> None:
    # (redis-py itself imports the OpenTelemetry API when it is installed; the SDK's tracer and
    # the exporter are what tracing would load.)
    program = (
        "import sys\n"
        "from modelgate.config import load_settings\n"
        "from modelgate.server.app import create_app\n"
        f"settings = load_settings(None, environ={{}}, data_dir={str(tmp_path)!r}, secret='s' * 40)\n"
        "app = create_app(settings)\n"
        "assert app.services.telemetry.tracing is None\n"
        "loaded = ('opentelemetry.sdk.trace', 'opentelemetry.exporter')\n"
        "print(sorted(m for m in sys.modules if m.startswith(loaded)))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_tracing_the_client_traceparent_reaches_the_upstream(tmp_path: Path, sdk: SdkClients) -> None:
    header, _, _ = traceparent()
    with LoopThread("fakes") as loop:
        fake = loop.start(FakeUpstream(default=Reply(text="hi")))
        with running_gateway(
            tmp_path / "data",
            env=ENV,
            providers=[openai_provider("oai", fake.base_url)],
            deployments={"nova-5.5": [{"provider": "oai", "upstream_model": "gpt-up"}]},
            default_provider="",
            unrouted="hide",
        ) as gateway:
            nova = gateway.key(gateway.account("acme"), "Nova").secret
            oai = sdk.openai(gateway.base_url, nova)
            oai.chat.completions.create(
                model="nova-5.5", messages=HELLO, extra_headers={"traceparent": header}
            )
            # A malformed one is not passed on.
            oai.chat.completions.create(
                model="nova-5.5", messages=HELLO, extra_headers={"traceparent": "00-zz"}
            )
    assert fake.requests[0].headers["traceparent"] == header
    assert "traceparent" not in fake.requests[1].headers
