"""Same-dialect passthrough of Responses streams: the upstream's bytes are relayed with only the
model id rewritten, and what billing needs is read on the way: the terminal event's usage and
status, in-band errors and an output-token estimate per delta. The tap also follows the stream's
``sequence_number`` and response id, so an in-band failure the gateway appends continues them
(SDK accumulators key on both)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from modelgate import ir
from modelgate.errors import GatewayError
from modelgate.formats.base import TokenEstimator
from modelgate.formats.jsonutil import as_object
from modelgate.formats.passthrough import PassthroughTap
from modelgate.formats.responses.response import stream_error_frame
from modelgate.formats.responses.wire import TERMINAL_TYPES, error_kind, response_usage, stop_reason_from

_DELTA_TYPES = ("response.output_text.delta", "response.function_call_arguments.delta")


class StreamTap(PassthroughTap):
    __slots__ = ("_client_model", "next_sequence_number", "response_id")

    keep_line_endings = False

    def __init__(
        self,
        upstream_model: str,
        client_model: str,
        estimate: TokenEstimator,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        super().__init__(upstream_model, client_model, estimate, redact)
        self._client_model = client_model
        #: The sequence number an in-band failure appended by the gateway should use.
        self.next_sequence_number = 0
        #: The upstream's response id (from the first event that carries the response).
        self.response_id: str | None = None

    def _event(self, block: bytes, value: Any) -> bytes:
        if not isinstance(value, dict):
            return block
        seq = value.get("sequence_number")
        if isinstance(seq, int):
            self.next_sequence_number = seq + 1
        kind = value.get("type")
        if kind in _DELTA_TYPES:
            delta = value.get("delta")
            if isinstance(delta, str):
                self._delta(delta)
            return block
        response = value.get("response")
        if self.response_id is None and isinstance(response, dict) and isinstance(response.get("id"), str):
            self.response_id = response["id"]
        if kind in TERMINAL_TYPES:
            response = as_object(response)
            self.finished = True
            self.usage = response_usage(response)
            if kind == "response.failed":
                self.error = ir.StreamError(*error_kind(response.get("error")))
                return self._scrubbed(block, value)
            else:
                output = response.get("output")
                has_call = isinstance(output, list) and any(
                    isinstance(i, dict) and i.get("type") == "function_call" for i in output
                )
                details = response.get("incomplete_details")
                self.stop_reason = stop_reason_from(response.get("status"), details, has_call)
                self.completed = response
        elif kind == "error":
            self.finished = True
            nested = value.get("error")
            self.error = ir.StreamError(*error_kind(nested if isinstance(nested, dict) else value))
            return self._scrubbed(block, value)
        return block

    def finish(self) -> bytes:
        """As the base; a stream that ended without its terminal event is also reported as an
        upstream error here (the gateway ends it with an in-band failure)."""
        out = super().finish()
        if not self.finished and self.error is None:
            self.error = ir.StreamError("upstream_error", "upstream stream ended early")
        return out

    def error_frame(self, err: GatewayError) -> bytes:
        return stream_error_frame(
            err, self.next_sequence_number, response_id=self.response_id, model=self._client_model
        )
