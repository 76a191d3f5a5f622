"""Same-dialect passthrough of Messages streams: the upstream's bytes are relayed with only the
model id rewritten (in ``message_start``, the one event that names it), and what billing needs is
read on the way: usage (``message_start`` and the cumulative ``message_delta``), the stop reason,
``message_stop``, in-band errors and an output-token estimate per delta."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from modelgate.errors import GatewayError
from modelgate.formats.base import TokenEstimator
from modelgate.formats.messages.response import stream_error_frame
from modelgate.formats.messages.wire import decode_usage, stop_reason_of, stream_error_from
from modelgate.formats.passthrough import PassthroughTap

#: The delta field holding generated text, per ``content_block_delta`` type.
_DELTA_TEXT = {"text_delta": "text", "input_json_delta": "partial_json", "thinking_delta": "thinking"}


class StreamTap(PassthroughTap):
    __slots__ = ("_started",)

    def __init__(
        self,
        upstream_model: str,
        client_model: str,
        estimate: TokenEstimator,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        super().__init__(upstream_model, client_model, estimate, redact)
        #: ``message_start`` was forwarded in the output being built (it needs the model rewrite).
        self._started = False

    def _event(self, block: bytes, value: Any) -> bytes:
        if not isinstance(value, dict):
            return block
        kind = value.get("type")
        if kind == "content_block_delta":
            delta = value.get("delta")
            if isinstance(delta, dict):
                field = _DELTA_TEXT.get(str(delta.get("type")))
                text = delta.get(field) if field is not None else None
                if isinstance(text, str):
                    self._delta(text)
        elif kind == "message_start":
            message = value.get("message")
            self.usage = decode_usage(message.get("usage") if isinstance(message, dict) else None)
            self._started = True
        elif kind == "message_delta":
            self.usage = decode_usage(value.get("usage"), self.usage)
            delta = value.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason") is not None:
                self.stop_reason = stop_reason_of(delta["stop_reason"])
        elif kind == "message_stop":
            self.finished = True
        elif kind == "error":
            self.error = stream_error_from(value.get("error"))
            return self._scrubbed(block, value)
        return block

    def _rewrite(self, out: bytes) -> bytes:
        if not self._started:
            return out
        self._started = False
        return super()._rewrite(out)

    def error_frame(self, err: GatewayError) -> bytes:
        return stream_error_frame(err)
