"""The ``bedrock`` provider kind: Anthropic models on Amazon Bedrock Runtime (Messages dialect).

``POST {endpoint}/model/{modelId}/invoke`` (whole), ``/invoke-with-response-stream`` (streamed)
and ``/count-tokens``, signed with AWS Signature V4 (``aws_auth``). The body is the Messages
request without ``model`` and ``stream``, with ``anthropic_version`` (default
``bedrock-2023-05-31``) and the betas Bedrock takes (``upstream.betas``) as the body array
``anthropic_beta``. Streamed
answers are event streams, relayed as Messages SSE (``bedrock_stream``), so a Messages client is
a near-passthrough and the other formats are translated from Messages as for ``anthropic``.

Errors come as ``{"message": ...}`` with the exception named in ``x-amzn-errortype``; they are
reshaped to ``{"error": {"type", "message"}}`` with the status our retry rules expect
(``ERROR_STATUS``). Every 403 from AWS concerns the gateway's identity (signature, token, IAM),
never the client's request: it refuses the credential.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Self
from urllib.parse import quote, unquote

import orjson

from modelgate import errors
from modelgate.upstream.aws_auth import resolve_aws_credentials
from modelgate.upstream.base import BufferedReply, Dialect, UpstreamReply
from modelgate.upstream.bedrock_stream import BedrockStream, EventStreamDecoder, response_stream_shape
from modelgate.upstream.cloud_claude import WholeRenamed, cloud_betas, cloud_body
from modelgate.upstream.credentials import Credential, Outgoing
from modelgate.upstream.error_mapping import UpstreamError
from modelgate.upstream.http_provider import HttpProvider
from modelgate.upstream.kind import ProviderConfig
from modelgate.upstream.kinds.bedrock import BedrockConfig
from modelgate.upstream.pool import read_error_body
from modelgate.upstream.transport import HttpReply

DEFAULT_VERSION = "bedrock-2023-05-31"
_ARN = re.compile(r"arn:aws[a-z-]*:[^\s'\"]+")

#: ``x-amzn-errortype`` -> the status the router acts on, where it differs from AWS's own.
#: A model error (424) is the upstream's fault, not the request's; a spent quota is throttling.
ERROR_STATUS: Mapping[str, int] = {
    "ModelErrorException": 502,
    "ModelStreamErrorException": 502,
    "ServiceQuotaExceededException": 429,
    "ModelNotReadyException": 503,
}


class BedrockProvider(HttpProvider):
    dialects: frozenset[Dialect] = frozenset({"messages"})
    _paths: Mapping[Dialect, str] = {"messages": "/model"}
    _suffixes: Mapping[Dialect, frozenset[str]] = {"messages": frozenset({"/count_tokens"})}

    _config: BedrockConfig

    def __init__(
        self,
        config: BedrockConfig,
        credentials: str | Sequence[Credential] | None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(config, credentials, clock=clock)
        self._version = config.anthropic_version or DEFAULT_VERSION
        self._shape = response_stream_shape()

    @classmethod
    def from_config(cls, config: ProviderConfig, env: Mapping[str, str]) -> Self:
        assert isinstance(config, BedrockConfig)  # the kind's model names this class
        where = f"provider {config.name!r}"
        return cls(config, resolve_aws_credentials(config.region or "", config.aws_credentials, where, env))

    def _prepare(
        self, dialect: Dialect, body: bytes, stream: bool, client_headers: Mapping[str, str], path_suffix: str
    ) -> Outgoing:
        model, data = cloud_body(body, version=self._version)
        data.pop("stream", None)
        counting = path_suffix == "/count_tokens"
        plan = cloud_betas(self.kind, self._config, data, client_headers, counting=counting)
        if plan.send:
            data["anthropic_beta"] = list(plan.send)
        # The model id is one path segment: ARNs and ids with ':' are percent-encoded, and the
        # request is sent (and signed) with exactly that encoding.
        path = f"/model/{quote(model, safe='')}"
        headers = self._headers(stream, client_headers)
        headers["x-amzn-bedrock-accept"] = "application/json"
        if counting:
            data.setdefault("max_tokens", 1)  # an InvokeModel body needs one; it counts nothing
            invoke = base64.b64encode(orjson.dumps(data)).decode()
            payload = orjson.dumps({"input": {"invokeModel": {"body": invoke}}})
            return Outgoing(f"{self._base_url}{path}/count-tokens", headers, payload, encoded=True)
        if stream:
            headers["accept"] = "application/vnd.amazon.eventstream"
            return Outgoing(
                f"{self._base_url}{path}/invoke-with-response-stream", headers, orjson.dumps(data), True
            )
        return Outgoing(f"{self._base_url}{path}/invoke", headers, orjson.dumps(data), encoded=True)

    async def _adapt(self, reply: HttpReply, request: Outgoing, stream: bool) -> UpstreamReply:
        model = _model_of(request.url)
        if not 200 <= reply.status < 300:
            return await _error_reply(reply)
        if request.url.endswith("/count-tokens"):
            try:
                counted = orjson.loads(await reply.read())["inputTokens"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                raise errors.UpstreamFailed(
                    "upstream bedrock answered count-tokens without inputTokens"
                ) from None
            finally:
                await reply.close()
            return BufferedReply(reply.status, reply.headers, orjson.dumps({"input_tokens": counted}))
        if not stream:
            return WholeRenamed(reply, model)
        return await BedrockStream.open(reply, EventStreamDecoder(self._shape, model))

    def credentials_rejected(self, status: int, detail: UpstreamError) -> bool:
        return status in (401, 403)

    def redact(self, text: str) -> str:
        # AWS messages name the identity and resources (account id inside ARNs): not for clients.
        return _ARN.sub("[redacted]", super().redact(text))


def _model_of(url: str) -> str:
    """The model id from a Bedrock URL (``.../model/{id}/invoke``), decoded."""
    return unquote(url.rsplit("/model/", 1)[1].split("/", 1)[0])


async def _error_reply(reply: HttpReply) -> UpstreamReply:
    body = await read_error_body(reply)
    exception = reply.headers.get("x-amzn-errortype", "").split(":", 1)[0]
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    message = None
    if isinstance(data, dict):
        exception = exception or str(data.get("__type", "")).rsplit("#", 1)[-1]
        found = data.get("message", data.get("Message"))
        message = found if isinstance(found, str) else None
    status = ERROR_STATUS.get(exception, reply.status)
    error = {"error": {"type": exception or None, "message": message}}
    return BufferedReply(status, reply.headers, orjson.dumps(error))
