"""A fake Google Vertex AI (Anthropic publisher models) with its own OAuth2 token endpoint.

``POST /token`` is the service accounts' ``token_uri``: it verifies the RS256 JWT assertion
google-auth signs with the account's key (issuer, audience, scope, expiry) and issues bearer
tokens that expire after ``expires_in`` seconds. ``POST /v1/projects/{p}/locations/{r}/publishers/
anthropic/models/{model}:rawPredict`` (``:streamRawPredict``, ``count-tokens:rawPredict``) checks
the bearer, the project and location, and the body (no ``model`` except when counting,
``anthropic_version`` vertex-2023-10-16), then answers with the Anthropic API's JSON and SSE.

``revoked`` accounts get ``invalid_grant`` from the token endpoint; ``forbidden`` ones get 403
``PERMISSION_DENIED`` on predictions (an IAM role removed). Steps as for ``FakeUpstream``.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import orjson
from aiohttp import web
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests.fakes.bedrock import CloudRequest
from tests.fakes.upstream import FakeUpstream, Fault, Reply

VERSION = "vertex-2023-10-16"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
ANSWER_MODEL = "claude-sonnet-4-5-20250929"

Step = Reply | Fault
Script = Sequence[Step] | Callable[[CloudRequest], Step]


@dataclass
class ServiceAccount:
    email: str
    key: rsa.RSAPrivateKey

    @classmethod
    def make(cls, name: str, project: str) -> ServiceAccount:
        return cls(
            f"{name}@{project}.iam.gserviceaccount.com",
            rsa.generate_private_key(public_exponent=65537, key_size=2048),
        )

    def info(self, project: str, token_uri: str) -> dict[str, str]:
        pem = self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
        return {
            "type": "service_account",
            "project_id": project,
            "private_key_id": "fake" + self.email.split("@")[0],
            "private_key": pem,
            "client_email": self.email,
            "client_id": "1234567890",
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": token_uri,
        }


def google_error(status: int, state: str, message: str) -> web.Response:
    body = {"error": {"code": status, "message": message, "status": state}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


def _b64(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


class FakeVertex(FakeUpstream):
    def __init__(
        self,
        accounts: Sequence[ServiceAccount],
        script: Script = (),
        *,
        project: str = "proj-1",
        region: str = "us-east5",
    ) -> None:
        super().__init__(script if callable(script) else list(script))  # type: ignore[arg-type]
        self.accounts = {a.email: a for a in accounts}
        self.project = project
        self.region = region
        self.expires_in = 3600
        self.revoked: set[str] = set()
        self.forbidden: set[str] = set()
        #: Token requests per service account.
        self.token_requests: Counter[str] = Counter()
        self._tokens: dict[str, tuple[str, float]] = {}
        self._numbers = itertools.count(1)
        self.requests: list[CloudRequest] = []  # type: ignore[assignment]
        #: When set, an ``anthropic-beta`` header naming anything else is refused as Vertex does.
        self.accepted_betas: frozenset[str] | None = None

    def write_credentials(self, directory: Path) -> list[Path]:
        """One service-account JSON file per account, their ``token_uri`` pointing here."""
        paths = []
        for i, account in enumerate(self.accounts.values()):
            path = directory / f"sa-{i}.json"
            path.write_bytes(orjson.dumps(account.info(self.project, f"{self.base_url}/token")))
            paths.append(path)
        return paths

    def issued(self) -> list[str]:
        return list(self._tokens)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        raw_path = request.rel_url.raw_path
        if raw_path == "/token":
            return self._token(await request.post())
        rec = CloudRequest(request.method, raw_path, request.query_string, headers, body, time.monotonic())
        self.requests.append(rec)
        prefix = f"/v1/projects/{self.project}/locations/{self.region}/publishers/anthropic/models/"
        if request.method != "POST" or not raw_path.startswith(prefix) or ":" not in raw_path[len(prefix) :]:
            return google_error(
                404, "NOT_FOUND", f"The requested URL {raw_path} was not found on this server."
            )
        model, method = unquote(raw_path[len(prefix) :]).rsplit(":", 1)
        rec.model = model
        grant = self._tokens.get(headers.get("authorization", "").removeprefix("Bearer "))
        if grant is None or grant[1] < time.time():
            return google_error(
                401,
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials. Expected OAuth 2 access token.",
            )
        rec.credential = grant[0]
        if grant[0] in self.forbidden:
            return google_error(
                403,
                "PERMISSION_DENIED",
                f"Permission 'aiplatform.endpoints.predict' denied on resource '{raw_path}'.",
            )
        counting = model == "count-tokens" and method == "rawPredict"
        problem = _check_body(body, counting)
        if problem:
            return google_error(400, "INVALID_ARGUMENT", problem)
        betas = {b.strip() for b in headers.get("anthropic-beta", "").split(",") if b.strip()}
        if self.accepted_betas is not None and not betas <= self.accepted_betas:
            return google_error(400, "INVALID_ARGUMENT", "invalid beta flag")
        if method not in ("rawPredict", "streamRawPredict"):
            return google_error(404, "NOT_FOUND", f"unknown method {method}")
        data: dict[str, Any] = orjson.loads(body)
        if method == "streamRawPredict" and data.get("stream") is not True:
            return google_error(400, "INVALID_ARGUMENT", "streamRawPredict needs stream: true")
        step = self._next_step(rec)
        if isinstance(step, Fault) and step.kind == "status" and step.code in (429, 503):
            response = google_error(
                step.code,
                "RESOURCE_EXHAUSTED" if step.code == 429 else "UNAVAILABLE",
                step.message or "Quota exceeded.",
            )
            if step.retry_after is not None:
                response.headers["retry-after"] = f"{step.retry_after:g}"
            return response
        # Answer as the Anthropic API would, naming the model the way Vertex does.
        shadow = CloudRequest(
            rec.method,
            rec.path,
            rec.query,
            rec.headers,
            orjson.dumps({**data, "model": ANSWER_MODEL}),
            rec.received_at,
        )
        try:
            answer = await self._answer(
                request, shadow, "messages/count_tokens" if counting else "messages", step
            )
        except (asyncio.CancelledError, ConnectionError):
            rec.disconnected_at = time.monotonic()
            raise
        rec.finished = True
        return answer

    def _token(self, form: Any) -> web.Response:
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        try:
            head, claims_b64, signature = str(form.get("assertion", "")).split(".")
            claims = orjson.loads(_b64(claims_b64))
            account = self.accounts[claims["iss"]]
            account.key.public_key().verify(
                _b64(signature), f"{head}.{claims_b64}".encode(), padding.PKCS1v15(), hashes.SHA256()
            )
        except (ValueError, KeyError, InvalidSignature, orjson.JSONDecodeError):
            return web.json_response(
                {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}, status=400
            )
        # google-auth names Google's token endpoint as the audience whatever the token_uri.
        if (
            claims.get("aud") != "https://oauth2.googleapis.com/token"
            or SCOPE not in str(claims.get("scope", "")).split()
        ):
            return web.json_response(
                {"error": "invalid_scope", "error_description": "bad audience or scope"}, status=400
            )
        if not claims.get("exp", 0) > time.time() - 60:
            return web.json_response(
                {"error": "invalid_grant", "error_description": "JWT has expired."}, status=400
            )
        self.token_requests[account.email] += 1
        if account.email in self.revoked:
            return web.json_response(
                {"error": "invalid_grant", "error_description": "Invalid grant: account not found"},
                status=400,
            )
        token = f"ya29.fake-{next(self._numbers):04d}-{account.email.split('@')[0]}"
        self._tokens[token] = (account.email, time.time() + self.expires_in)
        return web.json_response(
            {"access_token": token, "expires_in": self.expires_in, "token_type": "Bearer"}
        )


def _check_body(body: bytes, counting: bool) -> str | None:
    try:
        data: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "Invalid JSON payload received."
    if not isinstance(data, dict):
        return "Invalid JSON payload received: not an object."
    if ("model" in data) != counting:
        return "model: counting names it in the body, predictions in the URL"
    if data.get("anthropic_version") != VERSION:
        return f"anthropic_version: must be {VERSION}"
    if not isinstance(data.get("messages"), list):
        return "messages: field required"
    return None
