"""Microsoft Entra ID tokens for the ``azure-openai`` kind (``entra_id = true``).

azure-identity's ``DefaultAzureCredential`` finds the identity the standard way (environment
service principal, workload identity, managed identity, Azure CLI, ...). Its asynchronous
flavour runs on the event loop. The token is replaced ``token_refresh_margin`` seconds before it
expires, one refresh at a time; it is never logged.
"""

from __future__ import annotations

import asyncio
import time

from azure.core.exceptions import AzureError, ClientAuthenticationError
from azure.identity.aio import DefaultAzureCredential

from modelgate.upstream.credentials import (
    CredentialRefused,
    CredentialUnavailable,
    Outgoing,
    quiet_library_logs,
)

#: The scope Azure OpenAI (Cognitive Services) tokens are issued for.
SCOPE = "https://cognitiveservices.azure.com/.default"


class EntraCredential:
    __slots__ = ("_credential", "_expires_on", "_lock", "_margin", "_previous", "_token", "label")

    def __init__(self, margin: float) -> None:
        quiet_library_logs("azure", "msal")
        self.label = "entra_id"
        self._margin = margin
        self._credential: DefaultAzureCredential | None = None
        self._lock = asyncio.Lock()
        self._token: str | None = None
        self._previous: str | None = None
        self._expires_on = 0.0

    async def authorize(self, request: Outgoing) -> None:
        if self._token is None or self._expires_on - time.time() <= self._margin:
            async with self._lock:
                if self._token is None or self._expires_on - time.time() <= self._margin:
                    await self._refresh()
        request.headers["authorization"] = f"Bearer {self._token}"

    async def _refresh(self) -> None:
        if self._credential is None:  # created in the running loop, on first use
            self._credential = DefaultAzureCredential()
        try:
            token = await self._credential.get_token(SCOPE)
        except ClientAuthenticationError as exc:
            raise CredentialRefused(f"Entra ID issued no token: {exc.message}") from None
        except AzureError as exc:
            raise CredentialUnavailable(f"Entra ID could not be asked for a token: {exc.message}") from None
        self._previous = self._token or self._previous
        self._token, self._expires_on = token.token, float(token.expires_on)

    def secrets(self) -> tuple[str, ...]:
        # The one before too: replies to requests that carried it may still be in flight.
        return tuple(t for t in (self._token, self._previous) if t)

    def invalidate(self) -> None:
        self._previous, self._token = self._token or self._previous, None

    async def aclose(self) -> None:
        if self._credential is not None:
            await self._credential.close()
