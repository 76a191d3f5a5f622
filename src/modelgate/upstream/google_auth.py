"""Google credentials for the ``vertex`` kind: OAuth2 access tokens through google-auth.

A credential is a credentials file (a service account's JSON key, or gcloud's authorized-user
file) or the application default credentials (which also cover workload identity federation
and the metadata server). google-auth refreshes over blocking HTTP, so a refresh runs in a worker thread, one
at a time per credential, and starts ``token_refresh_margin`` seconds before the token expires:
no request is sent with a token about to lapse. Tokens are never logged; ``secrets`` lets the
provider scrub the current one from upstream text.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import google.auth
import orjson
from google.auth.credentials import Credentials
from google.auth.exceptions import DefaultCredentialsError, GoogleAuthError, RefreshError
from google.auth.transport.requests import Request
from google.oauth2 import credentials as user_credentials
from google.oauth2 import service_account

from modelgate.upstream.credentials import (
    CredentialRefused,
    CredentialUnavailable,
    Outgoing,
    quiet_library_logs,
)

SCOPE = "https://www.googleapis.com/auth/cloud-platform"


class GoogleCredential:
    __slots__ = ("_credentials", "_lock", "_margin", "_previous", "_request", "_token", "label")

    def __init__(self, label: str, credentials: Credentials, margin: float) -> None:
        quiet_library_logs("google.auth", "urllib3")
        self.label = label
        self._credentials = credentials
        self._margin = timedelta(seconds=margin)
        self._lock = asyncio.Lock()
        self._request = Request()
        #: The token requests carry now, and the one before (what an upstream could echo).
        self._token: str | None = None
        self._previous: str | None = None

    async def authorize(self, request: Outgoing) -> None:
        request.headers["authorization"] = f"Bearer {await self._current()}"

    def _fresh(self) -> bool:
        expiry = self._credentials.expiry  # naive UTC, as google-auth keeps it
        if self._token is None or self._credentials.token != self._token:
            return False
        return expiry is None or expiry - datetime.now(UTC).replace(tzinfo=None) > self._margin

    async def _current(self) -> str:
        if not self._fresh():
            async with self._lock:
                if not self._fresh():
                    await self._refresh()
        assert self._token is not None
        return self._token

    async def _refresh(self) -> None:
        try:
            await asyncio.to_thread(self._credentials.refresh, self._request)
        except RefreshError as exc:
            if getattr(exc, "retryable", False):
                raise CredentialUnavailable(f"Google token refresh for {self.label} failed: {exc}") from None
            raise CredentialRefused(f"Google refused credential {self.label}: {exc}") from None
        except GoogleAuthError as exc:  # the token endpoint could not be reached
            raise CredentialUnavailable(f"Google token refresh for {self.label} failed: {exc}") from None
        token = self._credentials.token
        if not isinstance(token, str) or not token:
            raise CredentialUnavailable(f"Google token refresh for {self.label} returned no token")
        self._previous, self._token = self._token or self._previous, token

    def secrets(self) -> tuple[str, ...]:
        # The one before too: replies to requests that carried it may still be in flight.
        return tuple(t for t in (self._token, self._previous) if t)

    def invalidate(self) -> None:
        self._previous, self._token = self._token or self._previous, None

    async def aclose(self) -> None:
        self._request.session.close()


def load_google_credentials(
    files: Sequence[str], listed: bool, margin: float, where: str
) -> list[GoogleCredential]:
    """The provider's credentials; raises ``ValueError`` naming the key when one cannot load.
    Loading reads files (and, for application default credentials, the environment); no token
    is fetched until the first request."""
    if not files:
        try:
            credentials, _ = google.auth.default(scopes=[SCOPE])
        except DefaultCredentialsError as exc:
            raise ValueError(
                f"{where}.credentials_file: not set, and no application default credentials were found ({exc})"
            ) from None
        return [GoogleCredential("application default credentials", credentials, margin)]
    out: list[GoogleCredential] = []
    for i, path in enumerate(files):
        label = f"credentials_file[{i}]" if listed else "credentials_file"
        try:
            out.append(GoogleCredential(label, _from_file(path), margin))
        except (OSError, ValueError, GoogleAuthError) as exc:
            raise ValueError(f"{where}.{label}: {path!r} is not a usable credentials file ({exc})") from None
    return out


def _from_file(path: str) -> Credentials:
    """A service account's JSON key, or an ``authorized_user`` file (gcloud's user login). Other
    types are refused: a credentials file can make google-auth run commands or call arbitrary
    URLs (external accounts), which a gateway's configuration should not be able to do."""
    with open(path, "rb") as handle:
        info = orjson.loads(handle.read())
    kind = info.get("type") if isinstance(info, dict) else None
    loaded: Credentials  # google-auth's loaders are not annotated
    if kind == "service_account":
        loaded = service_account.Credentials.from_service_account_info(info, scopes=[SCOPE])  # type: ignore[no-untyped-call]
    elif kind == "authorized_user":
        loaded = user_credentials.Credentials.from_authorized_user_info(info, scopes=[SCOPE])  # type: ignore[no-untyped-call]
    else:
        raise ValueError(f"type {kind!r} is not supported (service_account or authorized_user)")
    return loaded
