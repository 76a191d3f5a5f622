"""Same-dialect passthrough of Chat Completions streams: the upstream's bytes are relayed with only
the model id rewritten, and what billing needs is read on the way: the finish reason, usage,
``[DONE]``, in-band errors and an output-token estimate per delta.

The gateway always asks a Chat upstream for the usage chunk (docs/reference/wire-formats.md §2.5): when the client did
not, ``strip_usage`` drops that ``choices: []`` chunk and the ``"usage": null`` fields that come with
it, however the upstream spaced its JSON.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from modelgate.errors import GatewayError
from modelgate.formats.base import TokenEstimator
from modelgate.formats.chat.response import stream_error_frame
from modelgate.formats.chat.wire import decode_usage, stop_reason_of, stream_error_from
from modelgate.formats.passthrough import DROP, PassthroughTap

#: Delta fields holding generated text (tool arguments included).
_TEXT_FIELDS = frozenset(("content", "reasoning_content", "refusal"))
#: A top-level ``"usage": null`` member, with the comma that separates it, in any JSON spacing.
#: Inside a JSON string the quotes would be escaped, so generated text never matches.
_USAGE_NULL = re.compile(rb',\s*"usage"\s*:\s*null(?=\s*[,}])|"usage"\s*:\s*null\s*,')


class StreamTap(PassthroughTap):
    __slots__ = ("_strip_usage",)

    def __init__(
        self,
        upstream_model: str,
        client_model: str,
        estimate: TokenEstimator,
        redact: Callable[[str], str] | None = None,
        *,
        strip_usage: bool = False,
    ) -> None:
        super().__init__(upstream_model, client_model, estimate, redact)
        self._strip_usage = strip_usage

    def _event(self, block: bytes, value: Any) -> bytes:
        if not isinstance(value, dict):
            return block
        if value.get("error"):
            self.error = stream_error_from(value["error"])
            return self._scrubbed(block, value)
        choices = value.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            choice = choices[0]
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._count(delta)
            reason = choice.get("finish_reason")
            if isinstance(reason, str):
                self.stop_reason = stop_reason_of(reason)
        usage = value.get("usage")
        if usage:
            self.usage = decode_usage(usage)
            if self._strip_usage and choices == []:
                return DROP
        return block

    def _count(self, delta: dict[str, Any]) -> None:
        # One pass over the delta's own fields (usually one or two) rather than a lookup per
        # field it might have.
        for name, text in delta.items():
            if name in _TEXT_FIELDS:
                if isinstance(text, str) and text:
                    self._delta(text)
            elif name == "tool_calls" and isinstance(text, list):
                for call in text:
                    function = call.get("function") if isinstance(call, dict) else None
                    arguments = function.get("arguments") if isinstance(function, dict) else None
                    if isinstance(arguments, str) and arguments:
                        self._delta(arguments)

    def _done_marker(self) -> None:
        self.finished = True

    def _rewrite(self, out: bytes) -> bytes:
        if self._strip_usage:
            # The compact form every known upstream writes, by plain replacement (valid JSON has
            # only ``,`` ``}`` or space after ``null``, and quotes inside strings are escaped);
            # any other spacing or place by the pattern, searched only when the compact form
            # was not there (an upstream writes its JSON one way).
            stripped = out.replace(b',"usage":null', b"")
            if len(stripped) == len(out) and b'"usage"' in out:
                stripped = _USAGE_NULL.sub(b"", out)
            out = stripped
        return super()._rewrite(out)

    def error_frame(self, err: GatewayError) -> bytes:
        return stream_error_frame(err)
