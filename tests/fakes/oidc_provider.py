"""A real OpenID provider on loopback for the single sign-on tests: Authlib's authorization server
(authorization code grant, its OpenID Connect extension signing ID tokens, PKCE) in a Flask app
served by Werkzeug in a thread.

What is ours is only what any deployment of that library supplies: the registered client, the
people who can sign in (a username form stands in for the provider's own login page), where codes
are kept, the signing key, and the discovery and JWKS documents listing them. The protocol (the
authorization request's checks, one-time codes, the PKCE check, client authentication, the ID
token's claims and signature) is the library's.

Policy beyond the library's defaults, as a strict provider has it: PKCE with S256 is required on
every authorization request, and a nonce too.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from html import escape
from typing import Any

from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import ClientMixin, InvalidRequestError, grants
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oidc.core import UserInfo
from authlib.oidc.core.grants import OpenIDCode
from authlib.oidc.core.models import AuthorizationCodeMixin
from flask import Flask, Response, jsonify, request
from joserfc.jwk import RSAKey
from werkzeug.serving import BaseWSGIServer, make_server

from tests.gateway_server import free_port


@dataclass(frozen=True)
class User:
    sub: str
    email: str
    name: str
    email_verified: bool = True
    groups: tuple[str, ...] = ()


@dataclass
class Client(ClientMixin):  # type: ignore[misc]
    client_id: str
    client_secret: str
    redirect_uris: list[str]
    id_token_signed_response_alg: str = "RS256"

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str:
        return self.redirect_uris[0]

    def get_allowed_scope(self, scope: str) -> str:
        allowed = {"openid", "email", "profile", "groups"}
        return " ".join(s for s in scope.split() if s in allowed)

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.redirect_uris

    def check_client_secret(self, client_secret: str) -> bool:
        return secrets.compare_digest(client_secret, self.client_secret)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == "client_secret_basic"

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type == "authorization_code"


@dataclass
class Code(AuthorizationCodeMixin):  # type: ignore[misc]
    code: str
    client_id: str
    redirect_uri: str
    scope: str
    user: User
    nonce: str | None
    code_challenge: str | None
    code_challenge_method: str | None
    auth_time: int = field(default_factory=lambda: int(time.time()))

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope

    def get_nonce(self) -> str | None:
        return self.nonce

    def get_auth_time(self) -> int:
        return self.auth_time

    def get_acr(self) -> str:
        return "0"

    def get_amr(self) -> list[str]:
        return ["pwd"]


class StrictCodeChallenge(CodeChallenge):  # type: ignore[misc]
    """PKCE on every authorization request, and only S256."""

    def validate_code_challenge(self, grant: Any, redirect_uri: str) -> None:
        data = grant.request.payload.data
        if not data.get("code_challenge") or data.get("code_challenge_method") != "S256":
            raise InvalidRequestError("PKCE with code_challenge_method=S256 is required")
        super().validate_code_challenge(grant, redirect_uri)


class OpenIDProvider:
    def __init__(self, client_id: str = "modelgate", client_secret: str | None = None) -> None:
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.client = Client(client_id, client_secret or secrets.token_urlsafe(24), [])
        self.users: dict[str, User] = {}
        self.codes: dict[str, Code] = {}
        #: Every code the token endpoint was asked to redeem, in order (redeemed or not).
        self.redemptions: list[str] = []
        self.key = RSAKey.generate_key(2048, parameters={"kid": "test-key-1", "use": "sig", "alg": "RS256"})
        self.app = self._build_app()
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    def add_user(self, user: User) -> User:
        self.users[user.sub] = user
        return user

    # the library's server, with what a deployment supplies --------------------------------------

    def _build_app(self) -> Flask:
        provider = self
        app = Flask("test-openid-provider")

        class CodeGrant(grants.AuthorizationCodeGrant):  # type: ignore[misc]
            TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic"]

            def save_authorization_code(self, code: str, req: Any) -> None:
                data = req.payload.data
                provider.codes[code] = Code(
                    code,
                    req.client.client_id,
                    req.payload.redirect_uri,
                    req.payload.scope,
                    req.user,
                    data.get("nonce"),
                    data.get("code_challenge"),
                    data.get("code_challenge_method"),
                )

            def query_authorization_code(self, code: str, client: Client) -> Code | None:
                provider.redemptions.append(code)
                found = provider.codes.get(code)
                return found if found is not None and found.client_id == client.client_id else None

            def delete_authorization_code(self, authorization_code: Code) -> None:
                provider.codes.pop(authorization_code.code, None)

            def authenticate_user(self, authorization_code: Code) -> User:
                return authorization_code.user

        class IdToken(OpenIDCode):  # type: ignore[misc]
            def resolve_client_private_key(self, client: Client) -> RSAKey:
                return provider.key

            def get_client_claims(self, client: Client) -> dict[str, Any]:
                return {"iss": provider.issuer, "aud": [client.client_id]}

            def exists_nonce(self, nonce: str, req: Any) -> bool:
                return any(c.nonce == nonce for c in provider.codes.values())

            def generate_user_info(self, user: User, scope: str) -> UserInfo:
                info = UserInfo(sub=user.sub, name=user.name, groups=list(user.groups))
                if "email" in scope.split():
                    info["email"] = user.email
                    info["email_verified"] = user.email_verified
                return info

        server = AuthorizationServer(app, query_client=self._query_client, save_token=lambda token, req: None)
        server.register_grant(CodeGrant, [IdToken(require_nonce=True), StrictCodeChallenge(required=True)])

        @app.get("/.well-known/openid-configuration")
        def discovery() -> Response:
            return jsonify(
                issuer=provider.issuer,
                authorization_endpoint=f"{provider.issuer}/authorize",
                token_endpoint=f"{provider.issuer}/token",
                jwks_uri=f"{provider.issuer}/jwks",
                response_types_supported=["code"],
                subject_types_supported=["public"],
                id_token_signing_alg_values_supported=["RS256"],
                code_challenge_methods_supported=["S256"],
                token_endpoint_auth_methods_supported=["client_secret_basic"],
                scopes_supported=["openid", "email", "profile", "groups"],
            )

        @app.get("/jwks")
        def jwks() -> Response:
            return jsonify(keys=[provider.key.as_dict(private=False)])

        @app.get("/authorize")
        def authorize_form() -> Any:
            # The library validates the request first (client, redirect URI, scope, PKCE, nonce).
            server.get_consent_grant(end_user=None)
            hidden = "".join(
                f'<input type="hidden" name="{escape(k)}" value="{escape(v)}">'
                for k, v in request.args.items()
            )
            return (
                "<!doctype html><title>Test provider</title><form method=post action=/authorize>"
                f"{hidden}<input id=username name=username><button id=signin type=submit>Sign in</button></form>"
            )

        @app.post("/authorize")
        def authorize() -> Any:
            user = provider.users.get(request.form.get("username", ""))
            grant = server.get_consent_grant(end_user=user)
            return server.create_authorization_response(grant=grant, grant_user=user)

        @app.post("/token")
        def token() -> Any:
            return server.create_token_response()

        return app

    def _query_client(self, client_id: str) -> Client | None:
        return self.client if client_id == self.client.client_id else None

    # lifecycle ---------------------------------------------------------------------------------

    def start(self) -> OpenIDProvider:
        self._server = make_server("127.0.0.1", self.port, self.app, threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever, name="oidc-provider", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
