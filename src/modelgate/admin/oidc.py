"""The OpenID Connect relying party: discovery, the authorization request, the code exchange and
the ID token's verification (docs/people.md).

- Discovery reads ``<issuer>/.well-known/openid-configuration`` and refuses a document naming
  another issuer; it and the provider's keys (JWKS) are cached per process, the keys fetched anew
  once when a token names a key id not seen yet (the provider rotated its keys).
- The authorization request carries ``state``, ``nonce`` and a PKCE challenge (S256); the
  verifier never leaves this process except to the token endpoint.
- The ID token's signature is verified with ``joserfc`` against the provider's keys, asymmetric
  algorithms only (never ``none`` or an HMAC under the client secret), then ``iss``, ``aud``
  (and ``azp`` with several audiences), ``exp``, ``iat`` and ``nonce``.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote, urlencode

import aiohttp
import orjson
from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet

from modelgate.clock import Clock
from modelgate.sso_config import SsoConfig

log = logging.getLogger("modelgate.admin.sso")

#: Signature algorithms an ID token may use: asymmetric ones only.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
DISCOVERY_TTL_SECONDS = 3600.0
#: Responses from the provider larger than this are refused (discovery, keys, tokens).
MAX_PROVIDER_BYTES = 1024 * 1024
#: Clock skew tolerated on ``exp`` and ``iat``.
LEEWAY_SECONDS = 60


#: What an ``OidcError`` of each status means, for the sign-in metrics (``admin.sign_in_metrics``).
REASONS: dict[int, Literal["code_refused", "invalid_id_token", "unverified_email"]] = {
    400: "code_refused",
    401: "invalid_id_token",
    403: "unverified_email",
}


class OidcError(Exception):
    """The sign-in cannot go on; ``status`` is what the browser is answered (the message is safe to
    show: it never carries a token, code or secret): 400 the provider refused the code, 401 the ID
    token failed verification, 403 the email address is not verified, 502 the provider could not
    be used."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    @property
    def reason(
        self,
    ) -> Literal["code_refused", "invalid_id_token", "unverified_email", "provider_unavailable"]:
        return REASONS.get(self.status, "provider_unavailable")


@dataclass(frozen=True, slots=True)
class Provider:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    token_auth_methods: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Identity:
    issuer: str
    subject: str
    email: str
    name: str
    groups: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AuthorizationRequest:
    url: str
    state: str
    nonce: str
    verifier: str


def s256_challenge(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _basic(client_id: str, secret: str) -> str:
    """``client_secret_basic`` (RFC 6749 §2.3.1): both parts form-encoded before base64."""
    pair = f"{quote(client_id, safe='')}:{quote(secret, safe='')}".encode()
    return "Basic " + base64.b64encode(pair).decode("ascii")


def _string_list(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list):
        return tuple(v for v in value if isinstance(v, str))
    return ()


class RelyingParty:
    def __init__(self, config: SsoConfig, client_secret: str | None, clock: Clock) -> None:
        self.config = config
        self.client_secret = client_secret
        self.clock = clock
        self._provider: tuple[float, Provider] | None = None
        self._keys: KeySet | None = None

    async def _get_json(
        self, url: str, *, form: dict[str, str] | None = None, headers: dict[str, str] | None = None
    ) -> Any:
        timeout = aiohttp.ClientTimeout(total=self.config.http_timeout_seconds)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as http:
                method = "POST" if form is not None else "GET"
                sent = {"accept": "application/json", **(headers or {})}
                async with http.request(method, url, data=form, headers=sent) as response:
                    status = response.status
                    parts: list[bytes] = []
                    size = 0
                    async for chunk in response.content.iter_chunked(64 * 1024):
                        parts.append(chunk)
                        size += len(chunk)
                        if size > MAX_PROVIDER_BYTES:
                            break
                    body = b"".join(parts)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("OpenID provider unreachable at %s: %s", url, type(exc).__name__)
            raise OidcError(502, "the sign-in provider could not be reached") from None
        if len(body) > MAX_PROVIDER_BYTES:
            raise OidcError(502, "the sign-in provider answered too much")
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            data = None
        if form is not None and status == 400 and isinstance(data, dict):
            # The token endpoint refusing the code (used, expired, wrong verifier): the browser's fault.
            raise OidcError(400, f"the sign-in provider refused the code: {str(data.get('error', ''))[:80]}")
        if status != 200 or not isinstance(data, dict):
            log.warning("OpenID provider answered %s at %s", status, url)
            raise OidcError(502, "the sign-in provider gave an unusable answer")
        return data

    async def provider(self) -> Provider:
        now = time.monotonic()
        if self._provider is not None and now - self._provider[0] < DISCOVERY_TTL_SECONDS:
            return self._provider[1]
        issuer = self.config.issuer
        doc = await self._get_json(issuer.rstrip("/") + "/.well-known/openid-configuration")
        fields = ("authorization_endpoint", "token_endpoint", "jwks_uri")
        if doc.get("issuer") != issuer or not all(isinstance(doc.get(f), str) for f in fields):
            log.warning("the discovery document of %s names another issuer or lacks endpoints", issuer)
            raise OidcError(502, "the sign-in provider's discovery document does not match sso.issuer")
        methods = _string_list(doc.get("token_endpoint_auth_methods_supported")) or ("client_secret_basic",)
        provider = Provider(
            issuer, doc["authorization_endpoint"], doc["token_endpoint"], doc["jwks_uri"], methods
        )
        self._provider = (now, provider)
        return provider

    async def _key_set(self, provider: Provider, *, fresh: bool) -> KeySet:
        if self._keys is None or fresh:
            data = await self._get_json(provider.jwks_uri)
            try:
                self._keys = KeySet.import_key_set(data)
            except (JoseError, ValueError, TypeError, KeyError):
                raise OidcError(502, "the sign-in provider's keys could not be read") from None
        return self._keys

    async def authorization_request(self) -> AuthorizationRequest:
        provider = await self.provider()
        state = secrets.token_urlsafe(32)
        nonce = secrets.token_urlsafe(32)
        verifier = secrets.token_urlsafe(48)
        query = {
            "response_type": "code",
            "client_id": self.config.client_id,
            "redirect_uri": self.config.redirect_url,
            "scope": " ".join(self.config.scopes),
            "state": state,
            "nonce": nonce,
            "code_challenge": s256_challenge(verifier),
            "code_challenge_method": "S256",
        }
        separator = "&" if "?" in provider.authorization_endpoint else "?"
        return AuthorizationRequest(
            provider.authorization_endpoint + separator + urlencode(query), state, nonce, verifier
        )

    async def exchange(self, code: str, verifier: str, nonce: str) -> Identity:
        """The code for tokens, and the verified ID token's identity."""
        provider = await self.provider()
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.config.redirect_url,
            "code_verifier": verifier,
            "client_id": self.config.client_id,
        }
        headers: dict[str, str] = {}
        if self.client_secret:
            if "client_secret_basic" in provider.token_auth_methods:
                headers["authorization"] = _basic(self.config.client_id, self.client_secret)
            else:
                form["client_secret"] = self.client_secret
        tokens = await self._get_json(provider.token_endpoint, form=form, headers=headers)
        id_token = tokens.get("id_token")
        if not isinstance(id_token, str):
            raise OidcError(502, "the sign-in provider sent no ID token")
        return await self.verify(provider, id_token, nonce)

    async def verify(self, provider: Provider, id_token: str, nonce: str) -> Identity:
        keys = await self._key_set(provider, fresh=False)
        try:
            try:
                token = jwt.decode(id_token, keys, algorithms=list(ALGORITHMS))
            except InvalidKeyIdError:
                keys = await self._key_set(provider, fresh=True)  # the provider rotated its keys
                token = jwt.decode(id_token, keys, algorithms=list(ALGORITHMS))
            claims = token.claims
            jwt.JWTClaimsRegistry(
                now=lambda: int(self.clock.time()),
                leeway=LEEWAY_SECONDS,
                iss={"essential": True, "value": provider.issuer},
                aud={"essential": True, "value": self.config.client_id},
                sub={"essential": True},
                exp={"essential": True},
                iat={"essential": True},
                nonce={"essential": True, "value": nonce},
            ).validate(claims)
        except (JoseError, ValueError) as exc:
            log.warning("an ID token was refused: %s", type(exc).__name__)
            raise OidcError(401, "the ID token could not be verified") from None
        audiences = _string_list(claims.get("aud"))
        if len(audiences) > 1 and claims.get("azp") != self.config.client_id:
            raise OidcError(401, "the ID token could not be verified")
        email = claims.get("email")
        if email is not None and (not isinstance(email, str) or claims.get("email_verified") is not True):
            raise OidcError(403, "the provider has not verified this person's email address")
        name = next(
            (v for k in ("name", "preferred_username") if isinstance(v := claims.get(k), str) and v), ""
        )
        groups = _string_list(claims.get(self.config.groups_claim))
        return Identity(provider.issuer, str(claims["sub"]), email or "", name[:200], groups)
