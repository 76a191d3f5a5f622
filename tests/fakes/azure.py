"""A fake Azure OpenAI resource on loopback, answering like Azure.

The v1 API (``/openai/v1/chat/completions``, ``/openai/v1/responses``; ``api-version`` optional)
and the deployment-style API (``/openai/deployments/{deployment}/chat/completions`` and
``/openai/responses``, ``api-version`` required and known). Requests carry an ``api-key`` from
``api_keys`` or a bearer token this fake issued from its managed-identity endpoint
(``GET /msi/token``, App Service style, checking ``X-IDENTITY-HEADER``). Answers name the
deployment's underlying model (as Azure does), and chat streams begin with Azure's
``prompt_filter_results`` chunk. Steps as for ``FakeUpstream``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.bedrock import CloudRequest
from tests.fakes.upstream import FakeUpstream, Fault, Reply, _events

API_VERSIONS = frozenset({"2024-10-21", "2025-04-01-preview"})
IDENTITY_HEADER = "fake-identity-header-secret"

Step = Reply | Fault
Script = Sequence[Step] | Callable[[CloudRequest], Step]

_FILTER = {
    "hate": {"filtered": False, "severity": "safe"},
    "self_harm": {"filtered": False, "severity": "safe"},
    "sexual": {"filtered": False, "severity": "safe"},
    "violence": {"filtered": False, "severity": "safe"},
}


def azure_error(status: int, code: str, message: str) -> web.Response:
    body = {"error": {"code": code, "message": message}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


class FakeAzure(FakeUpstream):
    def __init__(
        self, api_keys: Sequence[str], script: Script = (), *, deployments: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(script if callable(script) else list(script))  # type: ignore[arg-type]
        self.api_keys = set(api_keys)
        self.deployments = dict(deployments or {"gpt-deploy": "gpt-4o-2024-11-20"})
        self.tokens: dict[str, float] = {}
        self.token_requests = 0
        self.expires_in = 3600
        self._numbers = itertools.count(1)
        self.requests: list[CloudRequest] = []  # type: ignore[assignment]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.rel_url.path == "/msi/token":
            return self._identity(request)
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        rec = CloudRequest(
            request.method, request.rel_url.raw_path, request.query_string, headers, body, time.monotonic()
        )
        self.requests.append(rec)
        version = request.query.get("api-version")
        path = request.rel_url.path
        deployment: str | None = None
        if path in ("/openai/v1/chat/completions", "/openai/v1/responses"):
            dialect = path.rsplit("/", 1)[1].replace("completions", "chat")
            if version is not None and version not in ("preview", "latest"):
                return azure_error(400, "BadRequest", "API version not supported")
        elif path.startswith("/openai/deployments/") and path.endswith("/chat/completions"):
            dialect, deployment = "chat", path.split("/")[3]
        elif path == "/openai/responses":
            dialect = "responses"
        else:
            return azure_error(404, "404", "Resource not found")
        if dialect != "chat" and dialect != "responses":
            return azure_error(404, "404", "Resource not found")
        if deployment is not None or path == "/openai/responses":
            if version is None:
                return azure_error(404, "404", "Resource not found")  # Azure's answer without api-version
            if version not in API_VERSIONS:
                return azure_error(400, "BadRequest", "API version not supported")
        key = headers.get("api-key")
        bearer = headers.get("authorization", "").removeprefix("Bearer ")
        rec.credential = key if key is not None else "entra:" + bearer  # as presented, checked below
        if not ((key is not None and key in self.api_keys) or self.tokens.get(bearer, 0.0) > time.time()):
            return azure_error(
                401,
                "401",
                "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a "
                "valid key for an active subscription and use a correct regional API endpoint for your resource.",
            )
        try:
            data: Any = orjson.loads(body)
        except orjson.JSONDecodeError:
            return azure_error(400, "BadRequest", "body is not JSON")
        name = deployment or (data.get("model") if isinstance(data, dict) else None)
        if not isinstance(name, str) or name not in self.deployments:
            return azure_error(
                404, "DeploymentNotFound", "The API deployment for this resource does not exist."
            )
        rec.model = name
        step = self._next_step(rec)
        if isinstance(step, Fault) and step.kind == "status" and step.code == 429:
            throttled = azure_error(
                429, "429", "Requests to the ChatCompletions_Create Operation have exceeded token rate limit."
            )
            if step.retry_after is not None:
                throttled.headers["retry-after"] = f"{step.retry_after:g}"
            return throttled
        if isinstance(step, Fault) and step.kind == "echo_key":  # an error quoting what it was sent
            message = f"Access denied for key {key or bearer} at {self.base_url} ({request.host})"
            return azure_error(step.code, str(step.code), message)
        shadow_body = orjson.dumps({**data, "model": self.deployments[name]})
        shadow = CloudRequest(rec.method, rec.path, rec.query, rec.headers, shadow_body, rec.received_at)
        try:
            if isinstance(step, Reply) and dialect == "chat" and data.get("stream") is True:
                answer = await self._chat_stream(request, data, step, self.deployments[name])
            else:
                answer = await self._answer(request, shadow, dialect, step)
        except (asyncio.CancelledError, ConnectionError):
            rec.disconnected_at = time.monotonic()
            raise
        rec.finished = True
        return answer

    async def _chat_stream(
        self, request: web.Request, data: dict[str, Any], reply: Reply, model: str
    ) -> web.StreamResponse:
        n = next(self._numbers)
        include_usage = bool((data.get("stream_options") or {}).get("include_usage"))
        stream = web.StreamResponse(
            status=200, headers={"content-type": "text/event-stream", "apim-request-id": f"fake-{n}"}
        )
        await stream.prepare(request)
        prompt_filter = {
            "choices": [],
            "created": 0,
            "id": "",
            "model": "",
            "object": "",
            "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": _FILTER}],
        }
        await stream.write(b"data: " + orjson.dumps(prompt_filter) + b"\n\n")
        for event in _events("chat", reply, model, n, include_usage):
            await stream.write(event)
        await stream.write_eof()
        return stream

    def _identity(self, request: web.Request) -> web.Response:
        if request.headers.get("x-identity-header") != IDENTITY_HEADER:
            return web.json_response({"error": "invalid identity header"}, status=401)
        self.token_requests += 1
        token = f"eyJfake-entra-{next(self._numbers):04d}"
        expires_on = int(time.time()) + self.expires_in
        self.tokens[token] = float(expires_on)
        body = {
            "access_token": token,
            "expires_on": str(expires_on),
            "resource": request.query.get("resource", ""),
            "token_type": "Bearer",
            "client_id": "fake-client-id",
        }
        return web.json_response(body)
