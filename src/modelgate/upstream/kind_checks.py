"""Start-up checks specific to each provider kind: keys that belong to other kinds, the optional
extra a cloud kind needs, whether its credentials resolve, and whether its region is well formed.

Cloud libraries are imported here only for providers of their kind, so a gateway without cloud
providers never imports them. Each problem raises ``ValueError`` naming the offending key.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from modelgate.upstream.config import ProviderConfig

#: Keys that only some kinds understand (a key set on another kind is a mistake worth naming).
_KIND_KEYS: Mapping[str, frozenset[str]] = {
    "region": frozenset({"bedrock", "vertex"}),
    "aws_credentials": frozenset({"bedrock"}),
    "project": frozenset({"vertex"}),
    "credentials_file": frozenset({"vertex"}),
    "anthropic_version": frozenset({"bedrock", "vertex"}),
    "betas": frozenset({"anthropic", "bedrock", "vertex"}),
    "azure_api": frozenset({"azure-openai"}),
    "api_version": frozenset({"azure-openai"}),
    "entra_id": frozenset({"azure-openai"}),
    "token_refresh_margin": frozenset({"vertex", "azure-openai"}),
}

#: The optional extra (``pip install 'modelgate[extra]'``) and the module it provides.
EXTRAS: Mapping[str, tuple[str, str]] = {
    "bedrock": ("bedrock", "botocore"),
    "vertex": ("vertex", "google.auth"),
    "azure-openai": ("azure", "azure.identity"),
}

#: Vertex AI locations: ``global``, the multi-regions ``us``/``eu``, or ``<area>-<place><n>``.
_VERTEX_REGION = re.compile(r"^(global|us|eu|[a-z]+-[a-z]+[0-9]+)$")


def check_provider(provider: ProviderConfig, where: str, env: Mapping[str, str]) -> None:
    for key, kinds in _KIND_KEYS.items():
        if key in provider.model_fields_set and provider.kind not in kinds:
            raise ValueError(f"{where}.{key}: only for kind(s) {', '.join(sorted(kinds))}")
    if provider.kind == "bedrock":
        _check_bedrock(provider, where, env)
    elif provider.kind == "vertex":
        _check_vertex(provider, where)
    elif provider.kind == "azure-openai":
        _check_azure(provider, where)


def require_extra(provider: ProviderConfig, where: str) -> ModuleType:
    """Import the library a cloud kind needs, or say which extra installs it."""
    extra, module = EXTRAS[provider.kind]
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ValueError(
            f"{where}.kind: kind {provider.kind!r} needs the optional extra: "
            f"pip install 'modelgate[{extra}]' ({module} is not installed)"
        ) from None


def _check_bedrock(provider: ProviderConfig, where: str, env: Mapping[str, str]) -> None:
    if provider.api_key_env is not None:
        raise ValueError(f"{where}.api_key_env: bedrock signs with AWS credentials; use aws_credentials")
    if not provider.region:
        raise ValueError(f"{where}.region: required for kind 'bedrock' (for example 'us-east-1')")
    require_extra(provider, where)
    from botocore.loaders import create_loader

    partitions = create_loader().load_data("endpoints")["partitions"]
    if not any(re.match(p["regionRegex"], provider.region) for p in partitions):
        raise ValueError(f"{where}.region: {provider.region!r} is not an AWS region name (like 'us-east-1')")
    from modelgate.upstream.aws_auth import resolve_aws_credentials

    resolve_aws_credentials(provider, where, env)


def _check_vertex(provider: ProviderConfig, where: str) -> None:
    if provider.api_key_env is not None:
        raise ValueError(f"{where}.api_key_env: vertex uses Google credentials; use credentials_file")
    if not provider.region:
        raise ValueError(f"{where}.region: required for kind 'vertex' (for example 'us-east5' or 'global')")
    if not _VERTEX_REGION.match(provider.region):
        raise ValueError(
            f"{where}.region: {provider.region!r} is not a Vertex AI location (like 'us-east5' or 'global')"
        )
    if not provider.project:
        raise ValueError(f"{where}.project: required for kind 'vertex' (the Google Cloud project id)")
    require_extra(provider, where)
    for i, name in enumerate(provider.credentials_files):
        key = f"{where}.credentials_file" + (f"[{i}]" if isinstance(provider.credentials_file, list) else "")
        if not Path(name).is_file():
            raise ValueError(f"{key}: file {name!r} does not exist")
    from modelgate.upstream.google_auth import load_google_credentials

    load_google_credentials(provider, where)


def _check_azure(provider: ProviderConfig, where: str) -> None:
    if provider.entra_id and provider.api_key_env is not None:
        raise ValueError(f"{where}.entra_id: use either api_key_env or entra_id, not both")
    if not provider.entra_id and provider.api_key_env is None:
        raise ValueError(f"{where}.api_key_env: required for kind 'azure-openai' (or set entra_id = true)")
    if provider.azure_api == "deployments" and not provider.api_version:
        raise ValueError(f"{where}.api_version: required with azure_api = 'deployments' (like '2024-10-21')")
    if provider.entra_id:
        require_extra(provider, where)
