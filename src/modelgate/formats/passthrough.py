"""The base of the same-dialect stream taps (``formats.base.StreamTap``).

A tap forwards whole events only (``sse.EventBuffer``: a rewrite or a check never sees half an
event), parses each event's data exactly once, hands the parsed value to its format's ``_event``
to read usage, stop reasons, errors and delta text, and stops in front of an event whose data is
not JSON (``malformed``): forwarded, it would make the client's SSE parser fail before the
gateway's in-band error could explain the cut. Bytes go out as the upstream sent them (CRLF
framing included) unless an event is dropped or replaced, which is rare (once per stream at most).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from modelgate import ir
from modelgate.formats.base import TokenEstimator
from modelgate.formats.sse import EventBuffer, frame, model_rewrites

#: ``_event`` may return this to drop the event (the Chat usage chunk the client did not ask for).
DROP = b""
#: Characters of delta text a tap holds uncounted (``PassthroughTap._delta``).
DEFERRED_CHARS = 16_384


def event_data(block: bytes) -> bytes:
    """The data of one event block (LF line endings): its ``data:`` lines joined, each without the
    one optional space after the colon. One ``data:`` line that ends the block (every real
    upstream's framing) is sliced without splitting the block."""
    start = block.find(b"data:")
    if start < 0:
        return b""
    if block.find(b"\n", start) < 0 and (start == 0 or block[start - 1] == 0x0A):
        data = block[start + 5 :]
        return data[1:] if data[:1] == b" " else data
    return b"\n".join(line[5:].removeprefix(b" ") for line in block.split(b"\n") if line.startswith(b"data:"))


class PassthroughTap:
    """Subclasses implement ``_event`` (one parsed event; returns the block to forward, a
    replacement, or ``DROP``) and may override ``_done_marker`` (a ``data: [DONE]`` event) and
    ``_rewrite`` (the model-id rewrite of forwarded bytes)."""

    __slots__ = (
        "_counted",
        "_deltas",
        "_estimate",
        "_events",
        "_held",
        "_redact",
        "_rewrites",
        "completed",
        "error",
        "finished",
        "malformed",
        "stop_reason",
        "usage",
    )

    def __init__(
        self,
        upstream_model: str,
        client_model: str,
        estimate: TokenEstimator,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self._events = EventBuffer()
        self._rewrites = model_rewrites(upstream_model, client_model)
        self._estimate = estimate
        #: Removes secrets from upstream text; applied to error events after decoding them.
        self._redact = redact
        self.usage: ir.Usage | None = None
        self.stop_reason: ir.StopReason | None = None
        self.finished = False
        self.error: ir.StreamError | None = None
        self.malformed = False
        self.completed: Any = None
        self._counted = 0
        self._deltas: list[str] = []
        self._held = 0

    @property
    def output_tokens(self) -> int:
        """Output tokens relayed so far, estimated per delta (``formats.base.StreamTap``)."""
        if self._deltas:
            self._count_deltas()
        return self._counted

    def _delta(self, text: str) -> None:
        """One delta of generated text. It is counted only if the estimate is read (the stream
        ended without the upstream's usage: a disconnect, a cut) or once ``DEFERRED_CHARS`` wait:
        most streams end with the upstream's usage and never need it, so their deltas cost an
        append instead of a tokenizer pass each."""
        self._deltas.append(text)
        self._held += len(text)
        if self._held > DEFERRED_CHARS:
            self._count_deltas()

    def _count_deltas(self) -> None:
        estimate = self._estimate.text
        self._counted += sum(estimate(text) for text in self._deltas)
        self._deltas.clear()
        self._held = 0

    def feed(self, chunk: bytes) -> bytes:
        if self.malformed:
            return b""
        if chunk.endswith(b"\n\n") and not self._events.held:
            # The usual chunk of a paced stream (a chunk per event): one LF-framed event whose
            # data line is its last. Relayed without cutting the chunk into blocks and joining
            # them again, and checked with single-byte scans: per-chunk work runs on cold caches
            # between an upstream's tokens, where every call and scan costs several times what
            # a micro-benchmark shows.
            start = chunk.find(b"data:")
            if (
                start >= 0
                and chunk.find(b"\n", start) == len(chunk) - 2
                and (start == 0 or (chunk[start - 1] == 0x0A and chunk.find(b"\n\n", 0, start) < 0))
                and chunk.find(b"\r") < 0
            ):
                # The data is parsed with the space after ``data:`` and the line end after it
                # (JSON whitespace). What does not parse (``[DONE]``, an empty data line,
                # malformed JSON) goes the general way below, which decides as always.
                try:
                    value = orjson.loads(chunk[start + 5 :])
                except orjson.JSONDecodeError:
                    pass
                else:
                    block = chunk[:-2]
                    forward = self._event(block, value)
                    if forward is block:
                        return self._rewrite(chunk)
                    return self._rewrite(forward + b"\n\n") if forward else DROP
        out = self._events.take(chunk)
        return self._relay(out) if out else b""

    def finish(self) -> bytes:
        """The event the upstream ended without its blank line, terminated; nothing when the
        stream ended in the middle of one (its JSON is cut, so it counts as malformed)."""
        rest = self._events.rest()
        if self.malformed or not rest.strip():
            return b""
        return self._relay(rest.rstrip(b"\r\n") + b"\n\n")

    #: Forward CRLF framing as the upstream sent it (False: normalise line endings to LF).
    keep_line_endings = True

    def _relay(self, out: bytes) -> bytes:
        text = out.replace(b"\r\n", b"\n").replace(b"\r", b"\n") if b"\r" in out else out
        if not self.keep_line_endings:
            out = text
        blocks = text.split(b"\n\n")
        kept: list[bytes] | None = None
        for i, block in enumerate(blocks):
            if not block:
                continue
            data = event_data(block)
            forward = block
            if data == b"[DONE]":
                self._done_marker()
            elif data:
                try:
                    value = orjson.loads(data)
                except orjson.JSONDecodeError:
                    self.malformed = True
                    good = kept if kept is not None else [b for b in blocks[:i] if b]
                    return self._rewrite(b"".join(b + b"\n\n" for b in good))
                forward = self._event(block, value)
            if kept is None and forward is not block:
                kept = [b for b in blocks[:i] if b]
            if kept is not None and forward:
                kept.append(forward)
        if kept is not None:
            out = b"".join(b + b"\n\n" for b in kept)
        return self._rewrite(out)

    def _event(self, block: bytes, value: Any) -> bytes:
        raise NotImplementedError

    def _scrubbed(self, block: bytes, value: Any) -> bytes:
        """An error event with every string in its JSON redacted, re-encoded; the block itself
        when nothing changed. Decoding first means escapes (``\\u0073k-…``) cannot hide a secret."""
        if self._redact is None:
            return block
        clean = _scrub(value, self._redact)
        if clean == value:
            return block
        name = next((line[6:].strip() for line in block.split(b"\n") if line.startswith(b"event:")), None)
        return frame(orjson.dumps(clean), name.decode("utf-8", "replace") if name else None)[:-2]

    def _done_marker(self) -> None:
        """A ``data: [DONE]`` event (Chat's end of stream); other formats have none."""

    def _rewrite(self, out: bytes) -> bytes:
        """Show the client's model id in forwarded bytes (every event may carry it). An upstream
        writes its JSON one way, so the first spacing found is the one (one scan, not two)."""
        for old, new in self._rewrites:
            rewritten = out.replace(old, new)
            # Nothing matched: replace returns the same object, and the comparison stops at identity.
            if rewritten != out:
                return rewritten
        return out


def _scrub(value: Any, redact: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_scrub(v, redact) for v in value]
    if isinstance(value, dict):
        return {k: _scrub(v, redact) for k, v in value.items()}
    return value
