"""The Gemini format (``POST /{version}/models/{model}:generateContent`` and its stream and
count siblings) as a ``formats.base.Codec``.

Inbound only. The request side the gateway needs from a client format (validation, the output
limit, decoding into the IR) and the answer side (responses, streams, errors) are here; the
upstream side (encoding a Gemini request, decoding a Gemini answer or stream, the same-dialect
passthrough) is not, because no upstream speaks Gemini to this gateway: every Gemini request is
translated. Those methods refuse with an internal error naming the reason instead of pretending.

The model and the stream flag live in the path (``paths``): ``decode_request`` takes them as
arguments, and ``ClientRequest`` sets the model the client is shown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import orjson

from modelgate import errors, ir
from modelgate.formats import ids
from modelgate.formats.base import ClientRequest, Redact, StreamDecoder, StreamTap, TokenEstimator
from modelgate.formats.gemini import request, response, wire
from modelgate.formats.gemini.stream import StreamEncoder
from modelgate.formats.jsonutil import Json


def _inbound_only(what: str) -> NoReturn:
    raise errors.InternalError(
        f"{what}: the Gemini format is inbound only here (no upstream speaks it; requests are translated)"
    )


def _check_contents(body: Json) -> None:
    contents = wire.get(body, "contents")
    if not isinstance(contents, list) or not contents:
        raise errors.InvalidRequest("contents: required non-empty list", param="contents")


class GeminiCodec:
    name = "gemini"
    #: The output limit lives in ``generationConfig``; a hosted web search in ``tools``.
    control_fields = frozenset({"generationConfig", "generation_config", "tools"})
    echoes_request = False
    #: Gemini is never an upstream here: it runs no hosted tool.
    runs_hosted: frozenset[str] = frozenset()
    #: Upstream dialects to translate to, best first (for the format registry's preference
    #: table): Messages keeps what Gemini has and Chat lacks (thoughts with their signatures,
    #: ``topK``, a hosted web search); then as for Messages clients. A request offering
    #: ``googleSearch`` is reordered by the dialects' ``runs_hosted``, as for every format.
    preferred_dialects: tuple[str, ...] = ("messages", "chat", "responses")

    def check_headers(self, headers: Mapping[str, str], versions: Sequence[str]) -> None:
        return None  # the API version is in the path

    def validate(self, body: Json, *, counting: bool = False) -> None:
        """The fields the gateway relies on before translating: the conversation, the output
        limit and the refusals that do not depend on the rest of the body."""
        if counting:
            inner = wire.obj_field(body, "generateContentRequest", "generateContentRequest")
            if inner is not None:
                body = inner
        _check_contents(body)
        request.refuse_cached_content(body)
        self.requested_max_tokens(body)
        config = wire.obj_field(body, "generationConfig", "generationConfig")
        count = (
            wire.int_field(config, "candidateCount", "generationConfig.candidateCount") if config else None
        )
        if count is not None and count != 1:
            raise errors.InvalidRequest(
                "generationConfig.candidateCount: only 1 candidate is supported",
                param="generationConfig.candidateCount",
            )

    def requested_max_tokens(self, body: Json) -> int | None:
        config = wire.obj_field(body, "generationConfig", "generationConfig")
        if config is None:
            return None
        return wire.int_field(config, "maxOutputTokens", "generationConfig.maxOutputTokens", minimum=1)

    def wants_stream_usage(self, body: Json) -> bool:
        return True  # the last chunk always carries usageMetadata

    def offers_web_search(self, body: Json) -> bool:
        tools = body.get("tools")
        return isinstance(tools, list) and any(
            isinstance(t, dict) and ("googleSearch" in t or "google_search" in t) for t in tools
        )

    def decode_request(self, body: Json, *, model: str = "", stream: bool = False) -> ir.Request:
        """A ``generateContent`` body, or a ``countTokens`` one wrapping it in
        ``generateContentRequest`` (what the gateway decodes to estimate a count). The route
        gives the model and the stream flag; the gateway sets both on the IR request
        (``ClientRequest`` and the translation), as for every format."""
        if wire.get(body, "generateContentRequest") is not None:
            return request.decode_count_request(body, model=model)
        return request.decode_request(body, model=model, stream=stream)

    def decode_count_request(self, body: Json, *, model: str = "") -> ir.Request:
        return request.decode_count_request(body, model=model)

    def encode_request(self, req: ir.Request, upstream_model: str) -> Json:
        _inbound_only("encode_request")

    def passthrough_fields(
        self, body: Json, *, upstream_model: str, max_tokens: int, stream: bool, legacy_limit: bool
    ) -> Json:
        _inbound_only("passthrough_fields")

    def usage_of(self, body: Any) -> ir.Usage:
        return wire.decode_usage(body.get("usageMetadata") if isinstance(body, dict) else None)

    def decode_response(self, body: Json) -> ir.Response:
        _inbound_only("decode_response")

    def encode_response(self, resp: ir.Response, client: ClientRequest) -> Json:
        return response.encode_response(resp, show_thoughts=request.shows_thoughts(client.body))

    def new_response_id(self) -> str:
        return wire.new_response_id()

    def new_tool_call_id(self) -> str:
        return ids.new_call_id()

    def stream_decoder(self) -> StreamDecoder:
        _inbound_only("stream_decoder")

    def stream_encoder(self, client: ClientRequest) -> StreamEncoder:
        return StreamEncoder(show_thoughts=request.shows_thoughts(client.body))

    def stream_tap(
        self, upstream_model: str, client: ClientRequest, estimate: TokenEstimator, redact: Redact | None
    ) -> StreamTap:
        _inbound_only("stream_tap")

    def http_status(self, err: errors.GatewayError) -> int:
        return wire.http_status(err)

    def render_error(self, err: errors.GatewayError, request_id: str) -> bytes:
        """Google's error body; ``request_id`` travels in the headers, as for the OpenAI formats.
        A ``retry-after`` the error carries is repeated as a ``RetryInfo`` detail, where Google's
        clients look for it."""
        body = wire.error_object(wire.http_status(err), err.message)
        details: list[dict[str, Any]] = []
        retry = err.headers.get("retry-after")
        if retry is not None and retry.isdigit():
            details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{retry}s"})
        if isinstance(err, errors.BillingRefused) and err.code:
            # Which limit refused (insufficient_balance, monthly_cap_reached, cap_day_reached, ...):
            # Google's clients read a machine-readable reason from an ErrorInfo detail.
            details.append(
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": err.code.upper(),
                    "domain": "modelgate",
                    "metadata": {"error_code": err.code},
                }
            )
        if details:
            body["error"]["details"] = details
        return orjson.dumps(body)


CODEC = GeminiCodec()
