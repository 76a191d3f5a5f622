"""The ``[sso]`` section: OpenID Connect sign-in for the dashboard and admin API (docs/people.md).

Off while ``issuer`` is empty. A section of its own module (no imports from the project) so the
configuration and the admin layer both read it without touching each other.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


def is_loopback_host(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _https_or_loopback(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme == "https" or (parts.scheme == "http" and is_loopback_host(parts.hostname))


class SsoAccountRule(BaseModel):
    """People whose groups claim holds ``group`` get ``role`` in account ``account_id``."""

    model_config = ConfigDict(extra="forbid")

    group: str = Field(min_length=1, max_length=256)
    account_id: int = Field(ge=1)
    role: Literal["owner", "member"] = "member"


class SsoConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: The OpenID provider's issuer URL (its ``/.well-known/openid-configuration`` is read); "" = off.
    issuer: str = ""
    client_id: str = ""
    #: The NAME of the environment variable holding the client secret ("" = a public client,
    #: PKCE only). The secret itself never goes in the file.
    client_secret_env: str = ""
    #: This gateway's callback as registered at the provider: ``https://<host>/admin/api/sso/callback``.
    redirect_url: str = ""
    scopes: list[str] = Field(default_factory=lambda: ["openid", "email", "profile"])
    #: The ID token claim listing the person's groups (Keycloak: ``groups``; Entra: ``groups``
    #: or ``roles``).
    groups_claim: str = "groups"
    #: People in any of these groups sign in as operators.
    operator_groups: list[str] = Field(default_factory=list)
    #: Group -> account and role; people who match none and are no member of an account are refused.
    accounts: list[SsoAccountRule] = Field(default_factory=list)
    #: A session unused this long ends (seconds).
    session_idle_seconds: float = Field(3600.0, ge=60, le=30 * 86400)
    #: A session ends this long after sign-in, however much it is used (seconds).
    session_max_seconds: float = Field(12 * 3600.0, ge=60, le=90 * 86400)
    #: A session's id is replaced this often (seconds) while it is used; the old id keeps working
    #: for a few seconds, for requests already on their way.
    session_rotate_seconds: float = Field(900.0, ge=60, le=90 * 86400)
    #: A sign-in must come back from the provider within this many seconds.
    login_timeout_seconds: float = Field(600.0, ge=10, le=3600)
    #: Sign-ins started and not yet back from the provider, at most (each keeps a row for up to
    #: ``login_timeout_seconds``); past it a new sign-in is refused with 429 until some finish.
    max_pending_sign_ins: int = Field(10_000, ge=1, le=10_000_000)
    #: Timeout of each call to the provider (discovery, keys, token exchange).
    http_timeout_seconds: float = Field(10.0, gt=0, le=120)
    #: How long an invitation link stays usable (seconds).
    invite_ttl_seconds: float = Field(7 * 86400.0, ge=60, le=90 * 86400)

    @property
    def enabled(self) -> bool:
        return bool(self.issuer)

    @property
    def secure_cookies(self) -> bool:
        """Cookies are ``Secure`` unless the gateway itself is reached over loopback HTTP."""
        parts = urlsplit(self.redirect_url)
        return not (parts.scheme == "http" and is_loopback_host(parts.hostname))

    @field_validator("issuer")
    @classmethod
    def _check_issuer(cls, value: str) -> str:
        if value and not _https_or_loopback(value):
            raise ValueError(f"{value!r} must be an https:// URL (http only on loopback)")
        return value

    @field_validator("redirect_url")
    @classmethod
    def _check_redirect_url(cls, value: str) -> str:
        if value and not _https_or_loopback(value):
            raise ValueError(f"{value!r} must be an https:// URL (http only on loopback)")
        if value and not urlsplit(value).path.endswith("/admin/api/sso/callback"):
            raise ValueError("must end in /admin/api/sso/callback (register the same URL at the provider)")
        return value

    @field_validator("scopes")
    @classmethod
    def _check_scopes(cls, value: list[str]) -> list[str]:
        if "openid" not in value:
            raise ValueError('must include "openid"')
        return value

    @model_validator(mode="after")
    def _check(self) -> SsoConfig:
        if self.session_idle_seconds > self.session_max_seconds:
            raise ValueError("session_idle_seconds: must not exceed session_max_seconds")
        if not self.issuer:
            return self
        if not self.client_id:
            raise ValueError("client_id: required with sso.issuer (the client registered at the provider)")
        if not self.redirect_url:
            raise ValueError(
                "redirect_url: required with sso.issuer: https://<this gateway>/admin/api/sso/callback"
            )
        return self


def client_secret(config: SsoConfig, env: Mapping[str, str]) -> str | None:
    """The client secret, from the environment variable ``client_secret_env`` names (None: off, or
    a public client); ValueError when it names a variable that is not set. Checked at start and
    by every reload that changes ``[sso]``."""
    if not config.enabled or not config.client_secret_env:
        return None
    secret = env.get(config.client_secret_env)
    if not secret:
        raise ValueError(
            f"sso.client_secret_env: the environment variable {config.client_secret_env} is not set "
            "(it must hold the client secret registered at the provider)"
        )
    return secret
