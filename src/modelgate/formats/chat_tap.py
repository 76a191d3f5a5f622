"""Same-dialect passthrough of Chat Completions streams (``StreamTap``): the upstream's bytes are relayed
with only the model id rewritten, and what billing needs (usage, stop reason, in-band errors,
an output-token estimate) is read on the way without decoding every event."""

from __future__ import annotations

import re

import orjson

from modelgate.billing.estimate import escaped_tokens, json_string_body
from modelgate.formats.chat_stream import decode_usage, stop_reason_of, stream_error_from
from modelgate.formats.sse import PassthroughTap, data_of

_VALUE_KEYS = (b'"content":"', b'"arguments":"', b'"reasoning_content":"', b'"refusal":"')
#: A chunk that may carry a finish reason, usage or an error (the only ones parsed).
_META = re.compile(rb'"finish_reason": ?"|"usage": ?\{|"error" ?:')


class StreamTap(PassthroughTap):
    """Relays upstream Chat SSE bytes, rewriting only the model id, reading what billing needs.

    Only whole events are forwarded. Only chunks that can carry a finish reason, usage or an
    error are parsed; text, argument and reasoning lengths are measured by scanning bytes. With
    ``strip_usage_chunk`` the ``"choices":[]`` usage chunk the gateway forced is recorded but not
    forwarded, and so are the ``"usage":null`` fields the client did not ask for.
    """

    __slots__ = ("_strip",)

    def __init__(self, upstream_model: str, client_model: str, strip_usage_chunk: bool = False) -> None:
        super().__init__(upstream_model, client_model)
        self._strip = strip_usage_chunk

    def _inspect(self, out: bytes) -> bytes:
        crlf = b"\r" in out
        text = out.replace(b"\r\n", b"\n").replace(b"\r", b"\n") if crlf else out
        dropped = False
        for block in text.split(b"\n\n"):
            if not block:
                continue
            for key in _VALUE_KEYS:
                at = block.find(key)
                if at >= 0:
                    self.output_tokens += escaped_tokens(json_string_body(block, at + len(key)))
            if block.startswith(b"data: [DONE]") or block.startswith(b"data:[DONE]"):
                self.finished = True
            elif _META.search(block) is not None and self._chunk(block) and self._strip:
                dropped = True
        if dropped:
            # Rare path (once per stream): rebuild the output without the usage chunk.
            kept = [b for b in text.split(b"\n\n") if b and not (b'"choices":[]' in b and b'"usage":{' in b)]
            out = b"".join(b + b"\n\n" for b in kept)
        if self._strip:
            out = out.replace(b',"usage":null', b"")
        for old, new in self._rewrites:
            out = out.replace(old, new)
        return out

    def _chunk(self, block: bytes) -> bool:
        """Read one metadata chunk; True when it is the ``choices:[]`` usage chunk."""
        data = data_of(block)
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return False
        if not isinstance(chunk, dict):
            return False
        if chunk.get("error"):
            self.error = stream_error_from(chunk["error"])
            return False
        choices = chunk.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            reason = choices[0].get("finish_reason")
            if isinstance(reason, str):
                self.stop_reason = stop_reason_of(reason)
        if chunk.get("usage"):
            self.usage = decode_usage(chunk["usage"])
            return choices == []
        return False
