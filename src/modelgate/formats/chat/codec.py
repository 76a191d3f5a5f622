"""The Chat Completions format (``POST /v1/chat/completions``) as a ``Codec``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from modelgate import errors, ir
from modelgate.formats import ids, openai_errors
from modelgate.formats.base import ClientRequest, Redact, TokenEstimator
from modelgate.formats.chat import request, response
from modelgate.formats.chat.stream import StreamDecoder, StreamEncoder
from modelgate.formats.chat.tap import StreamTap
from modelgate.formats.chat.wire import decode_usage
from modelgate.formats.jsonutil import Json, check_messages, check_stream_flag, int_field


def _limit_field(body: Json, legacy_limit: bool) -> str:
    """The output-limit field to send: the one the client used, else the current name, unless the
    upstream only knows ``max_tokens`` (compatible servers)."""
    if "max_completion_tokens" in body:
        return "max_completion_tokens"
    if "max_tokens" in body or legacy_limit:
        return "max_tokens"
    return "max_completion_tokens"


class ChatCodec:
    name = "chat"
    control_fields = frozenset(
        {"model", "stream", "max_tokens", "max_completion_tokens", "stream_options", "n"}
    )
    echoes_request = False
    runs_hosted: frozenset[str] = frozenset()

    def check_headers(self, headers: Mapping[str, str], versions: Sequence[str]) -> None:
        return None

    def validate(self, body: Json, *, counting: bool = False) -> None:
        check_stream_flag(body)
        check_messages(body, allow_empty=False)
        int_field(body, "max_tokens")
        int_field(body, "max_completion_tokens")
        n = body.get("n")
        if n is not None and n != 1:
            raise errors.InvalidRequest("n: only n=1 is supported", param="n")

    def requested_max_tokens(self, body: Json) -> int | None:
        explicit = int_field(body, "max_completion_tokens")
        return explicit if explicit is not None else int_field(body, "max_tokens")

    def wants_stream_usage(self, body: Json) -> bool:
        options = body.get("stream_options")
        return isinstance(options, dict) and options.get("include_usage") is True

    def offers_web_search(self, body: Json) -> bool:
        return False  # Chat has no hosted tools in its tool list

    def decode_request(self, body: Json) -> ir.Request:
        return request.decode_request(body)

    def encode_request(self, req: ir.Request, upstream_model: str) -> Json:
        return request.encode_request(req, upstream_model)

    def passthrough_fields(
        self, body: Json, *, upstream_model: str, max_tokens: int, stream: bool, legacy_limit: bool
    ) -> Json:
        fields: Json = {}
        if body.get("model") != upstream_model:
            fields["model"] = upstream_model
        limit = _limit_field(body, legacy_limit)
        if body.get(limit) != max_tokens:
            fields[limit] = max_tokens
        if stream and not self.wants_stream_usage(body):
            # The gateway always needs the usage chunk; the tap strips it again for the client.
            options = body.get("stream_options")
            fields["stream_options"] = {
                **(options if isinstance(options, dict) else {}),
                "include_usage": True,
            }
        return fields

    def usage_of(self, body: Any) -> ir.Usage:
        return decode_usage(body.get("usage") if isinstance(body, dict) else None)

    def decode_response(self, body: Json) -> ir.Response:
        return response.decode_response(body)

    def encode_response(self, resp: ir.Response, client: ClientRequest) -> Json:
        return response.encode_response(resp)

    def new_response_id(self) -> str:
        return ids.new_chat_id()

    def new_tool_call_id(self) -> str:
        return ids.new_call_id()

    def stream_decoder(self) -> StreamDecoder:
        return StreamDecoder()

    def stream_encoder(self, client: ClientRequest) -> StreamEncoder:
        return StreamEncoder(include_usage=self.wants_stream_usage(client.body))

    def stream_tap(
        self, upstream_model: str, client: ClientRequest, estimate: TokenEstimator, redact: Redact | None
    ) -> StreamTap:
        strip = not self.wants_stream_usage(client.body)
        return StreamTap(upstream_model, client.model, estimate, redact, strip_usage=strip)

    def http_status(self, err: errors.GatewayError) -> int:
        return openai_errors.http_status(err)

    def render_error(self, err: errors.GatewayError, request_id: str) -> bytes:
        return response.render_error(err, request_id)


CODEC = ChatCodec()
