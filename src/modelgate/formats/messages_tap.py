"""Same-dialect passthrough of Messages streams (``StreamTap``): the upstream's bytes are relayed
with only the model id rewritten, and what billing needs (usage, stop reason, in-band errors,
an output-token estimate) is read on the way without decoding every event."""

from __future__ import annotations

import orjson

from modelgate.billing.estimate import escaped_tokens, json_string_body
from modelgate.formats.messages_stream import decode_usage, stop_reason_of, stream_error_from
from modelgate.formats.sse import PassthroughTap, data_of

_VALUE_KEYS = (b'"text":"', b'"partial_json":"', b'"thinking":"')


class StreamTap(PassthroughTap):
    """Relays upstream Messages SSE bytes unchanged except the model id, reading what billing needs.

    Only whole events are forwarded (a partial trailing event waits for the next chunk), so a
    rewrite never straddles a chunk boundary. Only ``message_start``, ``message_delta``,
    ``message_stop`` and ``error`` are parsed; deltas are measured by scanning bytes.
    """

    __slots__ = ()

    def _inspect(self, out: bytes) -> bytes:
        text = out.replace(b"\r\n", b"\n").replace(b"\r", b"\n") if b"\r" in out else out
        rewrite = False
        for block in text.split(b"\n\n"):
            if block.startswith(b"event: content_block_delta"):
                for key in _VALUE_KEYS:
                    at = block.find(key)
                    if at >= 0:
                        self.output_tokens += escaped_tokens(json_string_body(block, at + len(key)))
                        break
            elif block and not block.startswith((b"event: ping", b"event: content_block_")):
                rewrite = self._event(block) or rewrite
        if rewrite:
            for old, new in self._rewrites:
                out = out.replace(old, new)
        return out

    def _event(self, block: bytes) -> bool:
        """Parse one metadata event; True when it is ``message_start`` (the one naming the model)."""
        try:
            data = orjson.loads(data_of(block))
        except orjson.JSONDecodeError:
            return False  # relayed as is: the client sees exactly what the upstream sent
        if not isinstance(data, dict):
            return False
        kind = data.get("type")
        if kind == "message_start":
            message = data.get("message")
            self.usage = decode_usage(message.get("usage") if isinstance(message, dict) else None)
            return bool(self._rewrites)
        if kind == "message_delta":
            self.usage = decode_usage(data.get("usage"), self.usage)
            delta = data.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason") is not None:
                self.stop_reason = stop_reason_of(delta["stop_reason"])
        elif kind == "message_stop":
            self.finished = True
        elif kind == "error":
            self.error = stream_error_from(data.get("error"))
        return False
