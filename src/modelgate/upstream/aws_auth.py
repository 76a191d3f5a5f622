"""AWS identities for the ``bedrock`` kind and Signature Version 4 with botocore's signer.

An identity comes from the standard AWS chain (environment, shared config and credentials files,
SSO, container or instance role), a named profile of the shared files, or environment variables
named in the configuration. Refreshable identities (roles, SSO) are refreshed by botocore; a
refresh that has to call AWS runs in a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Protocol

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials, ReadOnlyCredentials, RefreshableCredentials
from botocore.exceptions import BotoCoreError
from botocore.session import Session

from modelgate.upstream.credentials import CredentialUnavailable, Outgoing, quiet_library_logs

#: The signing name of Bedrock Runtime (its endpoint prefix is ``bedrock-runtime``).
SIGNING_NAME = "bedrock"


class AwsCredential:
    """One AWS identity; ``authorize`` signs the final request (method, URL, headers, body)."""

    __slots__ = ("_credentials", "_last", "_region", "label")

    def __init__(self, label: str, credentials: Credentials, region: str) -> None:
        quiet_library_logs("botocore")
        self.label = label
        self._credentials = credentials
        self._region = region
        #: The identity last signed with: an upstream can only echo what it was sent.
        self._last: ReadOnlyCredentials | None = None

    async def authorize(self, request: Outgoing) -> None:
        frozen = await self._frozen()
        signed = AWSRequest(method="POST", url=request.url, data=request.body, headers=request.headers)
        SigV4Auth(frozen, SIGNING_NAME, self._region).add_auth(signed)
        request.headers = {name.lower(): value for name, value in signed.headers.items()}

    async def _frozen(self) -> ReadOnlyCredentials:
        credentials = self._credentials
        try:
            if isinstance(credentials, RefreshableCredentials) and credentials.refresh_needed():
                frozen = await asyncio.to_thread(credentials.get_frozen_credentials)
            else:
                frozen = credentials.get_frozen_credentials()
        except BotoCoreError as exc:
            raise CredentialUnavailable(
                f"AWS credentials {self.label} could not be refreshed: {exc}"
            ) from None
        self._last = frozen
        return frozen

    def secrets(self) -> tuple[str, ...]:
        last = self._last
        return tuple(s for s in (last.access_key, last.secret_key, last.token) if s) if last else ()

    def invalidate(self) -> None:
        return None  # botocore renews refreshable identities itself

    async def aclose(self) -> None:
        return None


class AwsIdentity(Protocol):
    """One configured identity (``upstream.kinds.bedrock.AwsCredentialConfig``)."""

    @property
    def profile(self) -> str | None: ...
    @property
    def access_key_id_env(self) -> str | None: ...
    @property
    def secret_access_key_env(self) -> str | None: ...
    @property
    def session_token_env(self) -> str | None: ...


def resolve_aws_credentials(
    region: str, entries: Sequence[AwsIdentity] | None, where: str, env: Mapping[str, str]
) -> list[AwsCredential]:
    """The provider's identities (``aws_credentials``; ``None`` = the standard AWS chain); raises
    ``ValueError`` naming the key when one does not resolve."""
    if entries is None:
        credentials = _from_session(None, f"{where}.aws_credentials")
        if credentials is None:
            raise ValueError(
                f"{where}.aws_credentials: not set, and the standard AWS chain (environment, shared "
                "files, SSO, container or instance role) found no credentials"
            )
        return [AwsCredential("aws default chain", credentials, region)]
    if not entries:
        raise ValueError(f"{where}.aws_credentials: an empty list names no credential")
    return [
        AwsCredential(f"aws_credentials[{i}]", _entry(entry, f"{where}.aws_credentials[{i}]", env), region)
        for i, entry in enumerate(entries)
    ]


def _entry(entry: AwsIdentity, key: str, env: Mapping[str, str]) -> Credentials:
    named = (entry.access_key_id_env, entry.secret_access_key_env, entry.session_token_env)
    if entry.profile is not None:
        if any(named):
            raise ValueError(f"{key}: give either profile or the *_env variable names, not both")
        credentials = _from_session(entry.profile, f"{key}.profile")
        if credentials is None:
            raise ValueError(f"{key}.profile: profile {entry.profile!r} holds no credentials")
        return credentials
    if entry.access_key_id_env is None or entry.secret_access_key_env is None:
        raise ValueError(f"{key}: needs profile, or access_key_id_env and secret_access_key_env")
    values: list[str | None] = []
    for field, name in zip(
        ("access_key_id_env", "secret_access_key_env", "session_token_env"), named, strict=True
    ):
        if name is None:
            values.append(None)
        elif not env.get(name):
            raise ValueError(f"{key}.{field}: environment variable {name!r} is not set")
        else:
            values.append(env[name])
    return Credentials(values[0] or "", values[1] or "", values[2])


def _from_session(profile: str | None, key: str) -> Credentials | None:
    try:
        return Session(profile=profile).get_credentials()
    except BotoCoreError as exc:  # ProfileNotFound, a broken shared file, a failed SSO lookup
        raise ValueError(f"{key}: {exc}") from None
