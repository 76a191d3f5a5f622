"""The Responses format (``POST /v1/responses``) as a ``Codec``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from modelgate import errors, ir
from modelgate.formats import ids, openai_errors
from modelgate.formats.base import ClientRequest, Redact, TokenEstimator
from modelgate.formats.jsonutil import Json, check_stream_flag, int_field
from modelgate.formats.responses import hosted, request, response
from modelgate.formats.responses.decoder import StreamDecoder
from modelgate.formats.responses.encoder import StreamEncoder
from modelgate.formats.responses.state import STATE_FIELDS
from modelgate.formats.responses.tap import StreamTap
from modelgate.formats.responses.wire import response_usage


class ResponsesCodec:
    name = "responses"
    #: The stateful fields too: the gateway reads them before anything else (``gateway.state``),
    #: so a duplicate could be read two ways.
    control_fields = frozenset({"model", "stream", "max_output_tokens", *STATE_FIELDS})
    echoes_request = True
    runs_hosted: frozenset[str] = frozenset({ir.WEB_SEARCH_NAME})

    def check_headers(self, headers: Mapping[str, str], versions: Sequence[str]) -> None:
        return None

    def validate(self, body: Json, *, counting: bool = False) -> None:
        check_stream_flag(body)
        if not isinstance(body.get("input"), str | list):
            raise errors.InvalidRequest("input: a string or a list of input items is required", param="input")
        int_field(body, "max_output_tokens")

    def requested_max_tokens(self, body: Json) -> int | None:
        return int_field(body, "max_output_tokens")

    def wants_stream_usage(self, body: Json) -> bool:
        return True  # the terminal response object always carries usage

    def offers_web_search(self, body: Json) -> bool:
        return hosted.offers_web_search(body)

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
        if body.get("max_output_tokens") != max_tokens:
            fields["max_output_tokens"] = max_tokens
        return fields

    def usage_of(self, body: Any) -> ir.Usage:
        return response_usage(body)

    def decode_response(self, body: Json) -> ir.Response:
        return response.decode_response(body)

    def encode_response(self, resp: ir.Response, client: ClientRequest) -> Json:
        req = client.request()
        return response.encode_response(resp, req, namespaces=req.tool_namespaces)

    def new_response_id(self) -> str:
        return ids.new_response_id()

    def new_tool_call_id(self) -> str:
        return ids.new_call_id()

    def stream_decoder(self) -> StreamDecoder:
        return StreamDecoder()

    def stream_encoder(self, client: ClientRequest) -> StreamEncoder:
        req = client.request()
        return StreamEncoder(req, namespaces=req.tool_namespaces)

    def stream_tap(
        self, upstream_model: str, client: ClientRequest, estimate: TokenEstimator, redact: Redact | None
    ) -> StreamTap:
        return StreamTap(upstream_model, client.model, estimate, redact)

    def http_status(self, err: errors.GatewayError) -> int:
        return openai_errors.http_status(err)

    def render_error(self, err: errors.GatewayError, request_id: str) -> bytes:
        return response.render_error(err, request_id)


CODEC = ResponsesCodec()
