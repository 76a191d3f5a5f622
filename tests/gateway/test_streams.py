"""``gateway.streams`` and ``gateway.relay.StreamResponse`` without sockets: what a stream is billed
and with which usage status, for every way it can end, and how the relay ends a stream that
breaks after its first byte. The upstream is a scripted in-process provider
(``tests.fakes.scripted``), so each ending is exact and needs no timing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from starlette.types import Message

from modelgate import ir
from modelgate.billing.ledger import UsageStatus
from modelgate.formats import CODECS, ClientRequest
from modelgate.gateway.relay import StreamResponse
from modelgate.gateway.streams import CutStream, RelayStream, open_stream
from modelgate.lifecycle import Drain
from modelgate.telemetry import RequestRecord, Telemetry
from modelgate.upstream.base import Deployment, StreamBroken
from modelgate.upstream.router import Attempt
from tests.fakes.scripted import Respond, ScriptedProvider

CLIENT_MODEL = "aria-haiku-4.5"
UPSTREAM_MODEL = "llama-up"
#: What the prompt is estimated at when the upstream never reported its input.
ESTIMATED_INPUT = 17


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    body = {
        "id": "chatcmpl-up",
        "object": "chat.completion.chunk",
        "model": UPSTREAM_MODEL,
        "choices": [choice],
    }
    return b"data: " + orjson.dumps({**body, **extra}) + b"\n\n"


USAGE_CHUNK = (
    b"data: "
    + orjson.dumps(
        {
            "id": "chatcmpl-up",
            "object": "chat.completion.chunk",
            "model": UPSTREAM_MODEL,
            "choices": [],
            "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
        }
    )
    + b"\n\n"
)
OPENING = chunk({"role": "assistant", "content": ""})
TEXT = chunk({"content": "Hello there"})
STOP = chunk({}, "stop")
DONE = b"data: [DONE]\n\n"
UPSTREAM_ERROR = b'data: {"error":{"message":"backend exploded","type":"server_error","code":null}}\n\n'


async def estimate() -> int:
    return ESTIMATED_INPUT


def client_request(fmt: str = "chat") -> ClientRequest:
    codec = CODECS["chat"] if fmt == "chat" else CODECS["messages"]
    body = {
        "model": CLIENT_MODEL,
        "max_tokens": 50,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    return ClientRequest(codec, body, CLIENT_MODEL)


def chat_stream(client: ClientRequest) -> RelayStream:
    """An upstream speaking Chat: passthrough for a Chat client, translated for the others."""
    return open_stream(client, estimate, dialect=CODECS["chat"], upstream_model=UPSTREAM_MODEL, redact=None)


def relay(stream: RelayStream, *events: bytes) -> bytes:
    return b"".join(stream.feed(event) for event in events) + stream.finish()


@pytest.mark.parametrize("fmt", ["chat", "messages"], ids=["passthrough", "translated"])
async def test_a_complete_stream_is_billed_the_upstreams_usage_as_ok(fmt: str) -> None:
    stream = chat_stream(client_request(fmt))
    out = relay(stream, OPENING, TEXT, STOP, USAGE_CHUNK, DONE)
    assert await stream.outcome() == (ir.Usage(input_tokens=12, output_tokens=7), UsageStatus.OK)
    assert UPSTREAM_MODEL.encode() not in out and CLIENT_MODEL.encode() in out


async def test_a_passthrough_stream_without_its_final_event_is_cut_and_estimated() -> None:
    stream = chat_stream(client_request("chat"))
    relayed = stream.feed(OPENING) + stream.feed(TEXT)
    with pytest.raises(CutStream):
        stream.finish()
    usage, status = await stream.outcome()
    assert status is UsageStatus.UPSTREAM_INCOMPLETE
    # No usage report came: input from the prompt's estimate, output from what was relayed.
    assert usage.input_tokens == ESTIMATED_INPUT and usage.output_tokens == 2  # "Hello", "there"
    assert b"Hello there" in relayed


async def test_a_passthrough_stream_with_malformed_json_is_cut_after_the_good_events() -> None:
    stream = chat_stream(client_request("chat"))
    with pytest.raises(CutStream) as cut:
        stream.feed(OPENING + TEXT + b"data: {broken\n\n")
    assert b"Hello there" in cut.value.relayed and b"broken" not in cut.value.relayed


@pytest.mark.parametrize("fmt", ["chat", "messages"], ids=["passthrough", "translated"])
async def test_an_upstream_error_event_is_recorded_as_in_band(fmt: str) -> None:
    stream = chat_stream(client_request(fmt))
    out = relay(stream, OPENING, TEXT, UPSTREAM_ERROR)
    assert b"backend exploded" in out
    _, status = await stream.outcome()
    assert status is UsageStatus.UPSTREAM_ERROR_IN_BAND


# --- StreamResponse over a scripted attempt ------------------------------------------------------


class Client:
    """The ASGI side of one streamed response: what was sent, and a receive that never
    disconnects."""

    def __init__(self) -> None:
        self.sent: list[Message] = []
        self._never = asyncio.Event()

    async def receive(self) -> Message:
        await self._never.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")


async def respond(
    step: Respond, failures: list[str], record: RequestRecord | None = None
) -> tuple[Client, list[tuple[ir.Usage, UsageStatus]], Any]:
    provider = ScriptedProvider("up", [step], dialects=("chat",))
    reply = await provider.send("chat", b"{}", stream=True, client_headers={})
    report: Callable[[], None] = lambda: failures.append("reported")  # noqa: E731
    whole: Callable[[], None] = lambda: failures.append("ran to its end")  # noqa: E731
    attempt = Attempt(Deployment("up", UPSTREAM_MODEL), provider, "chat", reply, 1, report, whole)
    settled: list[tuple[ir.Usage, UsageStatus]] = []

    async def settle(usage: ir.Usage, status: UsageStatus) -> None:
        settled.append((usage, status))

    done: list[bool] = []
    telemetry = Telemetry()
    response = StreamResponse(
        chat_stream(client_request("chat")),
        attempt,
        headers={},
        settle=settle,
        on_done=lambda: done.append(telemetry.open_streams == 0),
        drain=Drain(),
        record=record or RequestRecord("req_1", "chat"),
        telemetry=telemetry,
    )
    client = Client()
    await response({"type": "http"}, client.receive, client.send)
    assert done == [True]  # called once, after the stream was no longer counted as open
    return client, settled, reply


async def test_the_relay_settles_a_complete_stream_once_and_reports_no_failure() -> None:
    failures: list[str] = []
    record = RequestRecord("req_1", "chat")
    events = Respond.events(OPENING, TEXT, STOP, USAGE_CHUNK, DONE)
    client, settled, reply = await respond(events, failures, record)
    assert settled == [(ir.Usage(input_tokens=12, output_tokens=7), UsageStatus.OK)]
    # No failure reported; the router hears the stream ran to its end (its failures are cleared).
    assert failures == ["ran to its end"] and reply.closed and not reply.aborted
    assert client.body.endswith(DONE)
    # The record the metrics and the request log read: a 200 that ended well, with a first event.
    assert (record.status, record.outcome, record.mid_stream_error) == (200, "ok", None)
    assert record.ttft is not None and record.added is not None and record.added <= record.ttft


async def test_a_stream_broken_after_its_first_byte_ends_in_band_and_cools_its_deployment() -> None:
    failures: list[str] = []
    broken = Respond.events(OPENING, TEXT, fail=StreamBroken("upstream 'up': connection reset"))
    record = RequestRecord("req_1", "chat")
    client, settled, reply = await respond(broken, failures, record)
    assert (record.outcome, record.mid_stream_error) == ("upstream_error", "mid_stream")
    # The client got what came, then the Chat format's in-band error: never a silent cut.
    body = client.body
    assert b"Hello there" in body
    last = orjson.loads(body.rstrip(b"\n").rsplit(b"data: ", 1)[1])
    assert last["error"]["type"] == "server_error" and "connection reset" in last["error"]["message"]
    # Reported to the router once (the deployment cools), settled once as a mid-stream failure.
    assert failures == ["reported"]
    ((usage, status),) = settled
    assert status is UsageStatus.UPSTREAM_FAILED_MID_STREAM
    assert usage == ir.Usage(input_tokens=ESTIMATED_INPUT, output_tokens=2)
    assert reply.closed and reply.aborted


async def test_a_stream_cancelled_while_its_outcome_is_estimated_is_still_settled_once() -> None:
    """The estimate of a stream without a usage report takes time (a worker); a cancellation of
    the request then (a forced shutdown) must not leave its hold unsettled."""
    entered, finish = asyncio.Event(), asyncio.Event()

    async def slow_estimate() -> int:
        entered.set()
        await finish.wait()
        return ESTIMATED_INPUT

    provider = ScriptedProvider("up", [Respond.events(OPENING, TEXT, STOP, DONE)], dialects=("chat",))
    reply = await provider.send("chat", b"{}", stream=True, client_headers={})
    attempt = Attempt(
        Deployment("up", UPSTREAM_MODEL), provider, "chat", reply, 1, lambda: None, lambda: None
    )
    settled: list[tuple[ir.Usage, UsageStatus]] = []

    async def settle(usage: ir.Usage, status: UsageStatus) -> None:
        settled.append((usage, status))

    done: list[bool] = []
    stream = open_stream(
        client_request("chat"),
        slow_estimate,
        dialect=CODECS["chat"],
        upstream_model=UPSTREAM_MODEL,
        redact=None,
    )
    response = StreamResponse(
        stream,
        attempt,
        headers={},
        settle=settle,
        on_done=lambda: done.append(True),
        drain=Drain(),
        record=RequestRecord("req_1", "chat"),
        telemetry=Telemetry(),
    )
    client = Client()
    serving = asyncio.ensure_future(response({"type": "http"}, client.receive, client.send))
    await entered.wait()
    serving.cancel()
    await asyncio.sleep(0)
    finish.set()  # the estimate ends: the settlement goes on, and the request's end waits for it
    with pytest.raises(asyncio.CancelledError):
        await serving
    # No usage report came: billed as estimated, once, as an incomplete stream.
    expected = (ir.Usage(input_tokens=ESTIMATED_INPUT, output_tokens=2), UsageStatus.UPSTREAM_INCOMPLETE)
    assert settled == [expected]
    assert done == [True]
