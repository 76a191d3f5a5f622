"""The two ways a stream is carried back to the client, behind one small interface.

``PassthroughStream`` (same dialect) relays the upstream's bytes through the client format's tap,
which rewrites only the model id and reads usage on the way. ``TranslatingStream`` decodes the
upstream's events into the IR and encodes them in the client's format. Both:

- ``feed``/``finish`` turn upstream bytes into client bytes; they raise ``CutStream`` when the
  upstream stream went bad in a way that must end it (malformed JSON, no final event), carrying
  the good bytes that preceded the fault;
- ``error_frame`` is the client format's in-band error that ends a stream already begun;
- ``outcome`` is what to settle: the upstream's usage report when it came, otherwise input from
  the stream's first event (or estimated from the prompt) and output estimated from what was
  relayed, with the ``UsageStatus`` that says how the stream ended.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from modelgate import errors, ir
from modelgate.billing.estimate import DELTA_ESTIMATOR, count_tokens, prompt_tokens, text_tokens
from modelgate.billing.ledger import UsageStatus
from modelgate.formats import ClientRequest, Codec, StreamDecoder, StreamEncoder, StreamTap
from modelgate.formats.jsonutil import Json

#: A provider's redaction of its own secrets (``upstream.base.Redacts``).
Redact = Callable[[str], str]
#: The input tokens of the request, estimated when the upstream never reported them.
EstimateInput = Callable[[], Awaitable[int]]


class CutStream(errors.UpstreamFailed):
    """The upstream stream went bad after bytes were sent; ``relayed`` holds the good events that
    preceded the fault, sent before the in-band error."""

    def __init__(self, message: str, relayed: bytes = b"") -> None:
        super().__init__(message)
        self.relayed = relayed


def estimate_input(client: ClientRequest, raw: bytes) -> int:
    """Input tokens of a request the upstream never reported: the prompt's text counted by the
    one estimator (``billing.estimate``), or the body's text when it cannot be decoded (inline
    bodies; a large one is estimated in a worker, ``bodies.prompt_tokens_in_worker``)."""
    try:
        return prompt_tokens(client.request())
    except (errors.GatewayError, ValueError, TypeError, KeyError, AttributeError):
        # Runs on the way to settlement: any decoding trouble falls back, never blocks it.
        return count_tokens(raw.decode("utf-8", "replace"))


class RelayStream:
    """What both stream kinds share: how the stream ended and what it is billed."""

    def __init__(self, client: ClientRequest, estimate: EstimateInput, redact: Redact | None) -> None:
        self._client = client
        self._estimate = estimate
        #: Removes the provider's secrets from upstream text before it reaches the client.
        self._redact = redact
        #: How the stream ended so far; the relay marks failures and disconnects.
        self.status = UsageStatus.UPSTREAM_INCOMPLETE
        self._usage: ir.Usage | None = None
        self._input_seen: int | None = None

    def feed(self, chunk: bytes) -> bytes:
        raise NotImplementedError

    def finish(self) -> bytes:
        raise NotImplementedError

    def error_frame(self, err: errors.GatewayError) -> bytes:
        raise NotImplementedError

    def _output_tokens(self) -> int:
        raise NotImplementedError

    def completed(self) -> Json | None:
        """The client-format response object the stream completed with, once its final event
        was produced (Responses only; ``formats.base.StreamEncoder.completed``)."""
        raise NotImplementedError

    async def outcome(self) -> tuple[ir.Usage, UsageStatus]:
        if self._usage is not None:
            return self._usage, self.status
        seen = self._input_seen
        input_tokens = seen if seen is not None else await self._estimate()
        return ir.Usage(input_tokens=input_tokens, output_tokens=self._output_tokens()), self.status


class PassthroughStream(RelayStream):
    def __init__(
        self, client: ClientRequest, estimate: EstimateInput, redact: Redact | None, upstream_model: str
    ) -> None:
        super().__init__(client, estimate, redact)
        self._tap: StreamTap = client.codec.stream_tap(upstream_model, client, DELTA_ESTIMATOR, redact)
        #: The upstream's own error event reached the client (so its stream needs no other end).
        self._error_relayed = False

    def feed(self, chunk: bytes) -> bytes:
        tap = self._tap
        out = tap.feed(chunk)
        # Most chunks are deltas that leave usage, error and malformed as they were: only a
        # chunk after one of them set needs ``_checked`` (per-chunk work is kept small).
        if tap.usage is None and tap.error is None and not tap.malformed:
            return out
        out = self._checked(out)
        self._error_relayed = self._error_relayed or tap.error is not None
        return out

    def finish(self) -> bytes:
        tap = self._tap
        out = self._checked(tap.finish())
        # Never a silent cut: a stream that ends without its final event (and without an upstream
        # error event the client already got) ends with our in-band error.
        if not (tap.finished or tap.stop_reason is not None or self._error_relayed):
            raise CutStream("upstream stream ended before its final event", out)
        if self.status is UsageStatus.UPSTREAM_INCOMPLETE and self._usage is not None:
            self.status = UsageStatus.OK
        return out

    def _checked(self, out: bytes) -> bytes:
        tap = self._tap
        usage = tap.usage
        if usage is not None:
            if self._input_seen is None and usage.total_input:
                self._input_seen = usage.total_input
            if tap.finished or tap.stop_reason is not None:
                self._usage = usage
        if tap.error is not None:
            self.status = UsageStatus.UPSTREAM_ERROR_IN_BAND
        if tap.malformed:
            raise CutStream("upstream sent malformed JSON in its stream", out)
        return out

    def error_frame(self, err: errors.GatewayError) -> bytes:
        return self._tap.error_frame(err)

    def _output_tokens(self) -> int:
        return self._tap.output_tokens

    def completed(self) -> Json | None:
        return self._tap.completed


class TranslatingStream(RelayStream):
    def __init__(
        self, client: ClientRequest, estimate: EstimateInput, redact: Redact | None, upstream: Codec
    ) -> None:
        super().__init__(client, estimate, redact)
        self._decoder: StreamDecoder = upstream.stream_decoder()
        self._encoder: StreamEncoder = client.codec.stream_encoder(client)
        self._new_id = client.codec.new_response_id
        self._output = 0

    def feed(self, chunk: bytes) -> bytes:
        return self._encode(self._decoder.feed(chunk))

    def finish(self) -> bytes:
        out = self._encode(self._decoder.finish())
        if self.status is UsageStatus.UPSTREAM_INCOMPLETE and self._usage is not None:
            self.status = UsageStatus.OK
        return out

    def _encode(self, events: list[ir.Event]) -> bytes:
        frames = []
        for event in events:
            if isinstance(event, ir.Start):
                event.id = self._new_id()
                event.model = self._client.model
                if event.usage.total_input:
                    self._input_seen = event.usage.total_input
            elif isinstance(event, ir.TextDelta):
                self._output += text_tokens(event.text)
            elif isinstance(event, ir.ThinkingDelta):
                self._output += text_tokens(event.thinking)
            elif isinstance(event, ir.ToolArgsDelta):
                self._output += text_tokens(event.partial_json)
            elif isinstance(event, ir.Finish):
                self._usage = event.usage
            elif isinstance(event, ir.StreamError):
                self.status = UsageStatus.UPSTREAM_ERROR_IN_BAND
                if self._redact is not None:
                    event.message = self._redact(event.message)
            frames.append(self._encoder.encode(event))
        return b"".join(frames)

    def error_frame(self, err: errors.GatewayError) -> bytes:
        return self._encoder.encode(ir.StreamError(err.kind, err.message))

    def _output_tokens(self) -> int:
        return self._output

    def completed(self) -> Json | None:
        return self._encoder.completed


def open_stream(
    client: ClientRequest,
    estimate: EstimateInput,
    *,
    dialect: Codec,
    upstream_model: str,
    redact: Redact | None,
) -> RelayStream:
    """The stream that carries an upstream reply in ``dialect`` back to ``client``."""
    if dialect is client.codec:
        return PassthroughStream(client, estimate, redact, upstream_model)
    return TranslatingStream(client, estimate, redact, dialect)
