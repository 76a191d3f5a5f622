"""Carrying the upstream reply back to the client, whole or streamed, and learning its usage.

Passthrough (same dialect) relays the upstream's bytes with the model id rewritten, reading only
the events that carry usage and stop reasons (the format's ``StreamTap``). Translation decodes
upstream events into the IR and encodes them in the client's format.

Streams: nothing is retried once a byte was sent. A failure mid-stream ends the stream with the
client format's in-band error event. A client disconnect cancels the relay, which closes (aborts)
the upstream request at once. Whatever ends the stream, the usage learned so far is settled: the
upstream's report when it came, otherwise input from the stream start (or estimated from the
body) and output estimated from what was relayed.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from modelgate import errors, ir
from modelgate.billing.estimate import text_tokens
from modelgate.formats import CODECS, ids
from modelgate.formats.sse import data_of, model_rewrites
from modelgate.gateway.disconnect import ClientGone, DisconnectWatch
from modelgate.upstream.base import Redacts
from modelgate.upstream.router import Attempt
from modelgate.upstream.simulator import prompt_text

if TYPE_CHECKING:
    from modelgate.gateway.pipeline import Call
    from modelgate.gateway.services import Services
    from modelgate.gateway.translate import Translation

_NEW_ID = {"messages": ids.new_message_id, "chat": ids.new_chat_id, "responses": ids.new_response_id}
_WORDS = re.compile(r"\w+|[^\w\s]")


def estimate_tokens(text_chars: int) -> int:
    """Tokens in text of this many characters when nobody counted them (about 4 per token)."""
    return math.ceil(text_chars / 4)


class _CutStream(errors.UpstreamFailed):
    """The upstream stream went bad in a way the taps relay as is (garbled JSON, no final event).
    ``relayed`` holds the good events that preceded the fault, sent before the in-band error."""

    def __init__(self, message: str, relayed: bytes = b"") -> None:
        super().__init__(message)
        self.relayed = relayed


def _malformed_at(out: bytes) -> int:
    """Offset of the first event in ``out`` (whole SSE events) whose data is not JSON, or -1.

    A garbled event would make the client's SSE parser raise before it could learn why, so
    passthrough stops in front of it. This runs on every relayed chunk: an event whose single
    ``data:`` line is its last line (every real upstream's framing) is located with ``bytes.find``
    alone; anything else takes the general parse. CRLF-framed output is checked as a whole (rare).
    """
    if b"\r" in out:
        return 0 if _malformed_block_at(out.replace(b"\r\n", b"\n").replace(b"\r", b"\n")) >= 0 else -1
    at = 0
    size = len(out)
    while at < size:
        end = out.find(b"\n\n", at)
        if end < 0:
            end = size
        start = out.find(b"data:", at, end)
        if start >= 0:
            if out.find(b"\n", start, end) < 0:
                data = out[start + 5 : end]
                if data[:1] == b" ":
                    data = data[1:]
            else:
                data = data_of(out[at:end])
            if data and data != b"[DONE]":
                try:
                    orjson.loads(data)
                except orjson.JSONDecodeError:
                    return at
        at = end + 2
    return -1


def _malformed_block_at(text: bytes) -> int:
    at = 0
    for block in text.split(b"\n\n"):
        data = data_of(block)
        if data and data != b"[DONE]":
            try:
                orjson.loads(data)
            except orjson.JSONDecodeError:
                return at
        at += len(block) + 2
    return -1


def _rewrite_model(data: bytes, upstream: str, client: str) -> bytes:
    """The top-level model of a whole response (it precedes the content in every dialect)."""
    for old, new in model_rewrites(upstream, client):
        if old in data:
            return data.replace(old, new, 1)
    return data


class Relay:
    def __init__(self, call: Call, translation: Translation, attempt: Attempt, services: Services) -> None:
        self.call = call
        self.translation = translation
        self.attempt = attempt
        self.services = services
        self.passthrough = attempt.dialect == call.fmt
        if not self.passthrough and call.fmt == "responses" and call.model is not None:
            # The Responses encoders echo the request's model: show the canonical id, not an alias.
            translation.request().model = call.model.id
        self.usage: ir.Usage | None = None
        self.status = "incomplete"
        # Streaming state: what was relayed, for estimates when the upstream never reports usage.
        self._input_seen: int | None = None
        self._output_tokens = 0

    @property
    def client_model(self) -> str:
        assert self.call.model is not None
        return self.call.model.id

    # whole responses ------------------------------------------------------------------------

    async def whole(self) -> tuple[bytes, ir.Usage, str]:
        reply = self.attempt.reply
        try:
            data = await reply.read()
        finally:
            await reply.close()
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise errors.UpstreamFailed("the upstream returned a malformed JSON body") from exc
        if self.passthrough:
            # Relayed as is: only the usage is read (the client's SDK judges the rest).
            usage = CODECS[self.call.fmt].decode_usage(
                parsed.get("usage") if isinstance(parsed, dict) else None
            )
            body = _rewrite_model(data, self.attempt.deployment.upstream_model, self.client_model)
            return body, usage, "ok"
        upstream = CODECS[self.attempt.dialect].decode_response(parsed)
        upstream.id = _NEW_ID[self.call.fmt]()
        upstream.model = self.client_model
        if self.call.fmt == "responses":
            encoded = CODECS["responses"].encode_response(
                upstream, self.translation.request(), namespaces=self.translation.namespaces
            )
        else:
            encoded = CODECS[self.call.fmt].encode_response(upstream)
        return orjson.dumps(encoded), upstream.usage, "ok"

    # streams --------------------------------------------------------------------------------

    async def pump(self, send: Callable[[bytes], Awaitable[None]]) -> None:
        """Relay the upstream stream to ``send``; ends with an in-band error on upstream failure."""
        convert, flush, error_frame = self._stream_codec()
        reply = self.attempt.reply
        try:
            async for chunk in reply.iter_chunks():
                out = convert(chunk)
                if out:
                    await send(out)
            out = flush()
            if out:
                await send(out)
            if self.status == "incomplete":
                self.status = "ok" if self.usage is not None else "upstream_incomplete"
        except errors.GatewayError as exc:
            self.status = "upstream_failed_mid_stream"
            # The router saw a 2xx and counted a success; a deployment that breaks its streams
            # must still cool down, so the failure is reported to its health too.
            self.services.router.health.failed(self.attempt.deployment)
            relayed = exc.relayed if isinstance(exc, _CutStream) else b""
            await send(relayed + error_frame(exc))
        except asyncio.CancelledError:
            self.status = "client_disconnected"
            raise
        finally:
            await reply.close()

    def _stream_codec(
        self,
    ) -> tuple[Callable[[bytes], bytes], Callable[[], bytes], Callable[[errors.GatewayError], bytes]]:
        client = CODECS[self.call.fmt]
        provider = self.attempt.provider
        redact = provider.redact if isinstance(provider, Redacts) else None
        if self.passthrough:
            tap = client.StreamTap(
                self.attempt.deployment.upstream_model,
                self.client_model,
                strip_usage_chunk=self.call.fmt == "chat" and not self.translation.client_wants_usage,
            )

            def observe(out: bytes) -> bytes:
                self._output_tokens = tap.output_tokens
                if tap.usage is not None:
                    if self._input_seen is None and tap.usage.total_input:
                        self._input_seen = tap.usage.total_input
                    if tap.finished or tap.stop_reason is not None:
                        self.usage = tap.usage
                if tap.error is not None and self.status == "incomplete":
                    self.status = "upstream_error_in_band"
                return out

            def passthrough_error(exc: errors.GatewayError) -> bytes:
                if self.call.fmt != "responses":
                    return bytes(client.stream_error_frame(exc))
                # Continue the upstream's numbering and response id: sequence numbers must rise
                # by one across the whole stream, and SDK accumulators key on the response id.
                return bytes(
                    client.stream_error_frame(
                        exc, tap.next_sequence_number, response_id=tap.response_id, model=self.client_model
                    )
                )

            upstream_error_relayed = False

            def checked(out: bytes) -> bytes:
                nonlocal upstream_error_relayed
                cut = _malformed_at(out)
                if cut >= 0:
                    raise _CutStream("upstream sent malformed JSON in its stream", out[:cut])
                upstream_error_relayed = upstream_error_relayed or tap.error is not None
                if redact is not None and b'"error"' in out:
                    # An upstream's in-band error may quote our credential or address.
                    out = redact(out.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
                return out

            def finish() -> bytes:
                out = observe(tap.finish())
                out = checked(out) if out.strip() else out
                # Never a silent cut: a stream that ends without its final event (and without an
                # upstream error event the client already got) ends with our in-band error.
                if not (tap.finished or tap.stop_reason is not None or upstream_error_relayed):
                    raise _CutStream("upstream stream ended before its final event", out)
                return out

            return (
                (lambda chunk: checked(observe(tap.feed(chunk)))),
                finish,
                passthrough_error,
            )

        decoder = CODECS[self.attempt.dialect].StreamDecoder()
        if self.call.fmt == "responses":
            encoder = client.StreamEncoder(
                request=self.translation.request(), include_usage=True, namespaces=self.translation.namespaces
            )
        else:
            encoder = client.StreamEncoder(include_usage=self.translation.client_wants_usage)

        def encode(events: list[ir.Event]) -> bytes:
            frames = []
            for event in events:
                if isinstance(event, ir.Start):
                    event.id = _NEW_ID[self.call.fmt]()
                    event.model = self.client_model
                    if event.usage.total_input:
                        self._input_seen = event.usage.total_input
                elif isinstance(event, ir.TextDelta | ir.ThinkingDelta):
                    text = event.text if isinstance(event, ir.TextDelta) else event.thinking
                    self._output_tokens += text_tokens(text)
                elif isinstance(event, ir.ToolArgsDelta):
                    self._output_tokens += text_tokens(event.partial_json)
                elif isinstance(event, ir.Finish):
                    self.usage = event.usage
                elif isinstance(event, ir.StreamError):
                    self.status = "upstream_error_in_band"
                    if redact is not None:
                        event.message = redact(event.message)
                frames.append(encoder.encode(event))
            return b"".join(frames)

        def error_frame(exc: errors.GatewayError) -> bytes:
            return bytes(encoder.encode(ir.StreamError(exc.kind, exc.message)))

        return (lambda chunk: encode(decoder.feed(chunk))), (lambda: encode(decoder.finish())), error_frame

    def outcome(self) -> tuple[ir.Usage, str]:
        """Usage to settle: reported, or estimated from what was relayed when the stream was cut."""
        if self.usage is not None:
            return self.usage, self.status
        input_tokens = self._input_seen if self._input_seen is not None else self.estimate_input()
        # Output relayed so far, estimated per delta (billing.estimate: exact for the simulator).
        return ir.Usage(input_tokens=input_tokens, output_tokens=self._output_tokens), self.status

    def estimate_input(self) -> int:
        """Input of a stream cut before the upstream reported it: the prompt's text counted like
        output (billing.estimate), or a quarter of the body's bytes if it cannot be decoded."""
        try:
            text = prompt_text(self.translation.request())
        except (errors.GatewayError, ValueError, TypeError, KeyError, AttributeError):
            # Runs on the way to settlement: any decoding trouble falls back, never blocks it.
            return estimate_tokens(len(self.call.raw))
        return len(_WORDS.findall(text))


SettleStream = Callable[[ir.Usage, str], Awaitable[Any]]


class StreamResponse(Response):
    """An SSE response that notices a client disconnect, even while the upstream is silent.

    The relay runs in the request's own task, armed under a ``DisconnectWatch``: a disconnect
    cancels it, which closes the upstream request at once. Settlement then runs on the gateway's
    settlement runner, shielded, so a cancelled request still leaves exactly one usage record.
    """

    media_type = "text/event-stream"

    def __init__(
        self, relay: Relay, *, headers: dict[str, str], settle: SettleStream, on_done: Callable[[], None]
    ) -> None:
        # Like Starlette's StreamingResponse: no body attribute, so no content-length header.
        self.status_code = 200
        self.background = None
        self.init_headers({**headers, "cache-control": "no-cache", "x-accel-buffering": "no"})
        self.relay = relay
        self.settle = settle
        self.on_done = on_done

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_body(chunk: bytes) -> None:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})

        watch = DisconnectWatch(receive)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            await watch.run(self.relay.pump(send_body))
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except ClientGone:
            self.relay.status = "client_disconnected"
        except OSError:
            pass  # the client's connection failed under a write: nobody left to tell
        finally:
            watch.close()
            try:
                usage, status = self.relay.outcome()
                await self.settle(usage, status)
            finally:
                self.on_done()
