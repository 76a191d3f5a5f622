"""The Messages format (``POST /v1/messages``, ``/v1/messages/count_tokens``) as a ``Codec``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from modelgate import errors, ir
from modelgate.formats import ids
from modelgate.formats.base import ClientRequest, Redact, TokenEstimator
from modelgate.formats.jsonutil import Json, check_messages, check_stream_flag, int_field
from modelgate.formats.messages import hosted, request, response
from modelgate.formats.messages.stream import StreamDecoder, StreamEncoder
from modelgate.formats.messages.tap import StreamTap
from modelgate.formats.messages.wire import decode_usage

#: The version header under the spec's name and the name real clients send.
VERSION_HEADERS = ("anthropic-version", "alpha-version")


class MessagesCodec:
    name = "messages"
    control_fields = frozenset({"model", "stream", "max_tokens"})
    echoes_request = False
    runs_hosted: frozenset[str] = frozenset({ir.WEB_SEARCH_NAME})

    def check_headers(self, headers: Mapping[str, str], versions: Sequence[str]) -> None:
        """A version header (either spelling) with an accepted value is required."""
        for header in VERSION_HEADERS:
            value = headers.get(header)
            if value is not None:
                if value.strip() not in versions:
                    raise errors.InvalidRequest(
                        f"{header}: unsupported version {value!r}; accepted: {', '.join(versions)}",
                        param=header,
                    )
                return
        raise errors.InvalidRequest(
            "anthropic-version: header required (alpha-version is also accepted); use one of "
            + ", ".join(versions),
            param="anthropic-version",
        )

    def validate(self, body: Json, *, counting: bool = False) -> None:
        check_stream_flag(body)
        check_messages(body, allow_empty=True)
        if not counting:
            if "max_tokens" not in body:
                raise errors.InvalidRequest("max_tokens: field required", param="max_tokens")
            int_field(body, "max_tokens")

    def requested_max_tokens(self, body: Json) -> int | None:
        return int_field(body, "max_tokens")

    def wants_stream_usage(self, body: Json) -> bool:
        return True  # message_start and message_delta always carry usage

    def offers_web_search(self, body: Json) -> bool:
        return hosted.offers_web_search(body)

    def decode_request(self, body: Json) -> ir.Request:
        return request.decode_request(body, require_max_tokens=False)

    def encode_request(self, req: ir.Request, upstream_model: str) -> Json:
        return request.encode_request(req, upstream_model)

    def passthrough_fields(
        self, body: Json, *, upstream_model: str, max_tokens: int, stream: bool, legacy_limit: bool
    ) -> Json:
        fields: Json = {}
        if body.get("model") != upstream_model:
            fields["model"] = upstream_model
        if body.get("max_tokens") != max_tokens:
            fields["max_tokens"] = max_tokens
        return fields

    def usage_of(self, body: Any) -> ir.Usage:
        return decode_usage(body.get("usage") if isinstance(body, dict) else None)

    def decode_response(self, body: Json) -> ir.Response:
        return response.decode_response(body)

    def encode_response(self, resp: ir.Response, client: ClientRequest) -> Json:
        return response.encode_response(resp)

    def new_response_id(self) -> str:
        return ids.new_message_id()

    def new_tool_call_id(self) -> str:
        return ids.new_tool_use_id()

    def stream_decoder(self) -> StreamDecoder:
        return StreamDecoder()

    def stream_encoder(self, client: ClientRequest) -> StreamEncoder:
        return StreamEncoder()

    def stream_tap(
        self, upstream_model: str, client: ClientRequest, estimate: TokenEstimator, redact: Redact | None
    ) -> StreamTap:
        return StreamTap(upstream_model, client.model, estimate, redact)

    def http_status(self, err: errors.GatewayError) -> int:
        return err.http_status()  # Anthropic's API answers an overload with 529

    def render_error(self, err: errors.GatewayError, request_id: str) -> bytes:
        return response.render_error(err, request_id)


CODEC = MessagesCodec()
