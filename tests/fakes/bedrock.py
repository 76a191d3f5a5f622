"""A fake Amazon Bedrock Runtime on loopback: SigV4-verified, answering like Bedrock.

``POST /model/{modelId}/invoke``, ``/invoke-with-response-stream`` and ``/count-tokens``. Every
request's signature is recomputed (``sigv4``); a bad one gets 403 ``InvalidSignatureException``,
an unknown (or revoked) access key 403 ``UnrecognizedClientException``. Bodies are checked the
way Bedrock checks them (no ``model``/``stream``, ``anthropic_version`` bedrock-2023-05-31).
Streams are real event streams (``eventstream``: framed, CRC-checked) whose ``chunk`` events
carry the Messages events, the last with ``amazon-bedrock-invocationMetrics``.

Steps are the ``FakeUpstream`` ones (``Reply``, ``Fault.status``, ``Fault.reset_after``) plus
``StreamException``: a typed exception message after ``after`` chunk events (0: the first
message of the stream). ``Fault.status(code)`` answers with the exception Bedrock uses for it.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import orjson
from aiohttp import web

from tests.fakes import eventstream
from tests.fakes.sigv4 import AwsKey, SignatureRejected, verify
from tests.fakes.upstream import FakeUpstream, Fault, RecordedRequest, Reply, _events_messages, _whole

VERSION = "bedrock-2023-05-31"
#: What Bedrock calls the model in its answers (not the modelId of the URL).
ANSWER_MODEL = "claude-sonnet-4-5-20250929"

_EXCEPTIONS = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}


@dataclass
class CloudRequest(RecordedRequest):
    #: Which credential the request carried (access key id, api key, token owner).
    credential: str = ""
    #: The model or deployment the URL named.
    model: str = ""


@dataclass(frozen=True)
class StreamException:
    code: str
    message: str = "fake exception"
    after: int = 0
    #: The answer whose first ``after`` events precede the exception.
    reply: Reply = field(default_factory=Reply)


Step = Reply | Fault | StreamException
Script = Sequence[Step] | Callable[[CloudRequest], Step]


def aws_error(status: int, code: str, message: str) -> web.Response:
    return web.Response(
        status=status,
        body=orjson.dumps({"message": message}),
        content_type="application/json",
        headers={"x-amzn-errortype": f"{code}:http://internal.amazon.com/coral/com.amazon.bedrock/"},
    )


class FakeBedrock(FakeUpstream):
    def __init__(self, keys: Sequence[AwsKey], script: Script = (), *, region: str = "us-east-1") -> None:
        super().__init__(script if callable(script) else list(script))  # type: ignore[arg-type]
        self.keys = {k.access_key_id: k for k in keys}
        self.region = region
        self.requests: list[CloudRequest] = []  # type: ignore[assignment]
        self._numbers = itertools.count(1)
        #: When set, a body ``anthropic_beta`` naming anything else is refused as Bedrock does.
        self.accepted_betas: frozenset[str] | None = None

    def revoke(self, access_key_id: str) -> None:
        del self.keys[access_key_id]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        raw_path = request.rel_url.raw_path
        rec = CloudRequest(request.method, raw_path, request.query_string, headers, body, time.monotonic())
        self.requests.append(rec)
        parts = raw_path.split("/")
        if request.method != "POST" or len(parts) != 4 or parts[1] != "model":
            return aws_error(404, "UnknownOperationException", "unknown operation")
        rec.model, operation = unquote(parts[2]), parts[3]
        claimed = re.search(r"Credential=([^/]+)/", headers.get("authorization", ""))
        rec.credential = claimed.group(1) if claimed else ""  # as claimed, verified below
        try:
            verify(
                method=request.method,
                raw_path=raw_path,
                raw_query=request.rel_url.raw_query_string,
                headers=headers,
                body=body,
                keys=self.keys,
                region=self.region,
                service="bedrock",
            )
        except SignatureRejected as exc:
            return aws_error(403, exc.code, exc.message)
        if operation == "count-tokens":
            try:
                inner = base64.b64decode(orjson.loads(body)["input"]["invokeModel"]["body"])
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                return aws_error(400, "ValidationException", "input.invokeModel.body is required")
            rec.body = inner
        problem = _check_body(rec.body)
        if problem:
            return aws_error(400, "ValidationException", problem)
        betas = orjson.loads(rec.body).get("anthropic_beta") or []
        if self.accepted_betas is not None and not set(betas) <= self.accepted_betas:
            return aws_error(400, "ValidationException", "invalid beta flag")
        step = self._next_step(rec)
        try:
            response = await self._bedrock_answer(request, rec, operation, step)
        except (asyncio.CancelledError, ConnectionError):
            rec.disconnected_at = time.monotonic()
            raise
        rec.finished = True
        return response

    async def _bedrock_answer(
        self, request: web.Request, rec: CloudRequest, operation: str, step: Step
    ) -> web.StreamResponse:
        if isinstance(step, Fault) and step.kind == "status":
            response = aws_error(
                step.code, _EXCEPTIONS.get(step.code, "InternalServerException"), step.message or "fake error"
            )
            if step.retry_after is not None:
                response.headers["retry-after"] = f"{step.retry_after:g}"
            return response
        if isinstance(step, Fault) and step.kind == "echo_key":  # an error quoting what it was sent
            return aws_error(
                step.code,
                "AccessDeniedException",
                f"User: arn:aws:iam::123456789012:user/gateway with {rec.headers.get('authorization')} is "
                f"not authorized to perform: bedrock:InvokeModel at {self.base_url} ({request.host})",
            )
        if isinstance(step, StreamException):
            reply = step.reply
        elif isinstance(step, Fault):
            reply = step.then if step.then is not None else Reply()
        else:
            reply = step
        n = next(self._numbers)
        ids = {"x-amzn-requestid": f"fake-bedrock-{n:06d}"}
        if operation == "count-tokens":
            return web.Response(
                body=orjson.dumps({"inputTokens": reply.input_tokens}),
                content_type="application/json",
                headers=ids,
            )
        if operation == "invoke":
            whole = _whole("messages", reply, ANSWER_MODEL, n)
            whole["id"] = f"msg_bdrk_{n:06d}"
            metrics = {
                "x-amzn-bedrock-input-token-count": str(reply.input_tokens),
                "x-amzn-bedrock-output-token-count": str(reply.output_tokens),
                "x-amzn-bedrock-invocation-latency": "321",
            }
            return web.Response(
                body=orjson.dumps(whole), content_type="application/json", headers={**ids, **metrics}
            )
        if operation != "invoke-with-response-stream":
            return aws_error(404, "UnknownOperationException", "unknown operation")
        stream = web.StreamResponse(
            status=200,
            headers={
                **ids,
                "content-type": "application/vnd.amazon.eventstream",
                "x-amzn-bedrock-content-type": "application/json",
            },
        )
        await stream.prepare(request)
        for i, frame in enumerate(_chunk_frames(reply, n)):
            if isinstance(step, StreamException) and i == step.after:
                await stream.write(eventstream.exception(step.code, step.message))
                await stream.write_eof()
                return stream
            if isinstance(step, Fault) and step.kind == "reset" and i == step.after:
                assert request.transport is not None
                request.transport.abort()
                return stream
            if reply.event_delay and i:
                await asyncio.sleep(reply.event_delay)
            await stream.write(frame)
        await stream.write_eof()
        return stream


def _check_body(body: bytes) -> str | None:
    try:
        data: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "Malformed input request: body is not JSON"
    if not isinstance(data, dict):
        return "Malformed input request: expected an object"
    if "model" in data or "stream" in data:
        return "Malformed input request: extraneous key [model or stream] is not permitted"
    if data.get("anthropic_version") != VERSION:
        return f"Malformed input request: anthropic_version must be {VERSION}"
    betas = data.get("anthropic_beta")
    if betas is not None and not (isinstance(betas, list) and all(isinstance(b, str) for b in betas)):
        return "Malformed input request: anthropic_beta must be an array of strings"
    if not isinstance(data.get("messages"), list) or not isinstance(data.get("max_tokens"), int):
        return "Malformed input request: messages and max_tokens are required"
    return None


def _chunk_frames(reply: Reply, n: int) -> list[bytes]:
    frames = []
    for event in _events_messages(reply, ANSWER_MODEL, n):
        data = orjson.loads(event.split(b"\ndata: ", 1)[1])
        if data["type"] == "message_start":
            data["message"]["id"] = f"msg_bdrk_{n:06d}"
        if data["type"] == "message_stop":
            data["amazon-bedrock-invocationMetrics"] = {
                "inputTokenCount": reply.input_tokens,
                "outputTokenCount": reply.output_tokens,
                "invocationLatency": 321,
                "firstByteLatency": 123,
            }
        frames.append(eventstream.chunk(orjson.dumps(data)))
    return frames
