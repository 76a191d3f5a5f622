"""Carrying the upstream reply back to the client, whole or streamed.

Whole replies: passthrough relays the upstream's bytes with only the model id rewritten and reads
their usage; otherwise the reply is decoded into the IR and encoded in the client's format.

Streams (``StreamResponse``): nothing is retried once a byte was sent. A failure mid-stream ends the
stream with the client format's in-band error event and is reported to the router through the
attempt's callback, so the deployment cools down. A client disconnect cancels the relay, which
closes (aborts) the upstream request at once. Whatever ends the stream, the stream's outcome is
settled exactly once (``streams.RelayStream.outcome``). A stream that ran to its end is settled
before its final byte: the charge is written, or kept durably to be written (``Hold.settle``,
``billing.settle_journal``), before the client holds the whole answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from modelgate import errors, ir
from modelgate.billing.ledger import UsageStatus
from modelgate.formats import CODECS, FORMATS, ClientRequest, Format
from modelgate.formats.jsonutil import Json
from modelgate.gateway.disconnect import ClientGone, DisconnectWatch, ShuttingDown
from modelgate.gateway.observe import stream_ended
from modelgate.gateway.streams import CutStream, RelayStream
from modelgate.lifecycle import Drain, nothing
from modelgate.telemetry import RequestRecord, Telemetry
from modelgate.upstream.router import Attempt


def _rewrite_model(data: bytes, fmt: Format, upstream: str, client: str) -> bytes:
    """The top-level model of a whole response (it precedes the content in every dialect)."""
    for old, new in fmt.model_rewrites(upstream, client):
        if old in data:
            return data.replace(old, new, 1)
    return data


async def relay_whole(
    attempt: Attempt, client: ClientRequest, record: RequestRecord
) -> tuple[bytes, ir.Usage]:
    """The client's body for a whole (non-streamed) reply, and the usage to bill."""
    reply = attempt.reply
    began = time.perf_counter()
    try:
        data = await reply.read()
    finally:
        record.upstream_seconds += time.perf_counter() - began
        await reply.close()
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise errors.UpstreamFailed("the upstream returned a malformed JSON body") from exc
    if not isinstance(parsed, dict):
        raise errors.UpstreamFailed("the upstream returned a JSON body that is not an object")
    codec = client.codec
    if attempt.dialect == codec.name:
        # Relayed as is: only the usage is read (the client's SDK judges the rest).
        body = _rewrite_model(data, FORMATS[attempt.dialect], attempt.deployment.upstream_model, client.model)
        return body, codec.usage_of(parsed)
    upstream = CODECS[attempt.dialect].decode_response(parsed)
    upstream.id = codec.new_response_id()
    upstream.model = client.model
    return orjson.dumps(codec.encode_response(upstream, client)), upstream.usage


def _body(data: bytes) -> Message:
    """A part of a streamed body (a plain call per chunk, not a coroutine)."""
    return {"type": "http.response.body", "body": data, "more_body": True}


SettleStream = Callable[[ir.Usage, UsageStatus], Awaitable[Any]]
#: The in-band error that ends streams still running when the shutdown grace is over.
SHUTTING_DOWN = errors.Unavailable("the gateway is shutting down; retry the request")


class StreamResponse(Response):
    """An SSE response that notices a client disconnect, even while the upstream is silent.

    The relay runs in the request's own task, armed under a ``DisconnectWatch``: a disconnect
    cancels it, which closes the upstream request at once. Settlement then runs shielded (the
    ledger's settlement runner), so a cancelled request still leaves exactly one usage record.

    Telemetry costs nothing per chunk: the time to the first event is taken once (the relay's
    first loop ends there), the rest is noted in the request's record when the stream ends.
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        stream: RelayStream,
        attempt: Attempt,
        *,
        headers: dict[str, str],
        settle: SettleStream,
        on_done: Callable[[], None],
        drain: Drain,
        record: RequestRecord,
        telemetry: Telemetry,
        keep: Callable[[Json], Awaitable[object]] | None = None,
    ) -> None:
        # Like Starlette's StreamingResponse: no body attribute, so no content-length header.
        self.status_code = 200
        self.background = None
        self.init_headers({**headers, "cache-control": "no-cache", "x-accel-buffering": "no"})
        self.stream = stream
        self.attempt = attempt
        self.settle = settle
        #: Called once the stream has ended and settled (the request's end).
        self.on_done = on_done
        self.drain = drain
        self.record = record
        self.telemetry = telemetry
        #: Stores the completed response (``gateway.state.keep``) before its final event is sent.
        self.keep = keep
        #: The stream's one settlement, once started (``_settle``).
        self._settling: asyncio.Future[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        watch = DisconnectWatch(receive, self.drain)
        self.record.status = 200
        self.telemetry.open_streams += 1
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            await watch.run(self._pump(send))
            await self._settle()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except ClientGone:
            self.stream.status = UsageStatus.CLIENT_DISCONNECTED
        except ShuttingDown:
            # The shutdown grace is over: end the stream in-band, so the client knows it was cut.
            self.stream.status = UsageStatus.SHUTDOWN
            with contextlib.suppress(OSError):
                await send(_body(self.stream.error_frame(SHUTTING_DOWN)))
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client's connection failed under a write: nobody left to tell
        finally:
            watch.close()
            try:
                await self._settle()
            finally:
                self.telemetry.open_streams -= 1
                # Dropped once called: the request's end holds this response (its answer), so
                # kept it would make a cycle of the whole request, left to the garbage collector.
                on_done, self.on_done = self.on_done, nothing
                on_done()

    async def _settle(self) -> None:
        """Settle the stream's outcome, once (after its end, or when it was cut). The settlement
        runs in its own task, started on the first call and awaited by every call: a request
        cancelled while it works out the outcome (an estimate) leaves it running, and the
        ``finally`` waits for it, so the hold is always settled and leaves ``Ledger.holds``."""
        if self._settling is None:
            self._settling = asyncio.ensure_future(self._settle_outcome())
        await asyncio.shield(self._settling)

    async def _settle_outcome(self) -> None:
        usage, status = await self.stream.outcome()
        stream_ended(self.record, status)
        await self.settle(usage, status)

    async def _pump(self, send: Send) -> None:
        """Relay the upstream stream to ``send``; ends with an in-band error on upstream failure."""
        stream = self.stream
        reply = self.attempt.reply
        try:
            chunks = aiter(reply.iter_chunks())
            if await self._first_event(chunks, send):
                async for chunk in chunks:
                    out = stream.feed(chunk)
                    if out:
                        if self.keep is not None:
                            await self._keep_completed()
                        await send(_body(out))
            out = stream.finish()
            if out:
                if self.keep is not None:
                    await self._keep_completed()
                await send(_body(out))
            if stream.status is UsageStatus.OK:
                self.attempt.report_success()
        except errors.GatewayError as exc:
            stream.status = UsageStatus.UPSTREAM_FAILED_MID_STREAM
            self.record.mid_stream_error = "mid_stream"
            self.attempt.report_failure()
            relayed = exc.relayed if isinstance(exc, CutStream) else b""
            await send(_body(relayed + stream.error_frame(exc)))
        except asyncio.CancelledError:
            stream.status = UsageStatus.CLIENT_DISCONNECTED
            raise
        finally:
            await reply.close()

    async def _first_event(self, chunks: AsyncIterator[bytes], send: Send) -> bool:
        """Relay up to the first event the client gets; note the time to it and the time spent
        waiting for the upstream before it. False when the upstream ended before any event."""
        record = self.record
        waited = 0.0
        while True:
            began = time.perf_counter()
            try:
                chunk = await anext(chunks)
            except StopAsyncIteration:
                return False
            waited += time.perf_counter() - began
            out = self.stream.feed(chunk)
            if out:
                if self.keep is not None:
                    await self._keep_completed()
                await send(_body(out))
                record.upstream_seconds += waited
                record.ttft = ttft = record.elapsed()
                record.added = max(0.0, ttft - record.upstream_seconds)
                return True

    async def _keep_completed(self) -> None:
        """Keep the response once the stream produced its final event, before that is sent: a
        client continuing from it the moment it has it finds it stored."""
        response = self.stream.completed()
        if response is None or self.keep is None:
            return
        keep, self.keep = self.keep, None
        await keep(response)
