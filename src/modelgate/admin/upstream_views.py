"""How the upstream endpoints show providers, deployments, prices and aliases.

A credential value is never shown: where a provider holds one, its view has the value's hint
(``…abcd``) and when it was set, in the field the value was given in (``api_key``; a ``bedrock``
identity's ``access_key_id``...). Environment variable names, which the file uses, are shown as
they are: they are names, not secrets.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from modelgate.admin.schemas import when
from modelgate.catalogue import Price
from modelgate.liveconfig.overlay import AWS_VALUE_FIELDS, STORED, PriceChange, StoredProvider
from modelgate.services import Services
from modelgate.upstream.kind import ProviderConfig


def _hint(credentials: Mapping[str, Mapping[str, Any]], ref: str) -> dict[str, Any]:
    meta = credentials.get(ref) or {}
    return {"hint": meta.get("hint", "…"), "set_at": when(meta.get("set_at"))}


def redacted_fields(stored: StoredProvider) -> dict[str, Any]:
    """The stored fields with each credential reference replaced by its hint."""
    fields = dict(stored.config)
    env = fields.get("api_key_env")
    if isinstance(env, str) and env.startswith(STORED):
        fields.pop("api_key_env")
        fields["api_key"] = _hint(stored.credentials, env)
    elif isinstance(env, list) and any(isinstance(n, str) and n.startswith(STORED) for n in env):
        fields.pop("api_key_env")
        fields["api_key"] = [_hint(stored.credentials, str(n)) for n in env]
    identities = fields.get("aws_credentials")
    if isinstance(identities, list):
        shown: list[Any] = []
        for identity in identities:
            if isinstance(identity, Mapping):
                identity = dict(identity)
                for key in AWS_VALUE_FIELDS:
                    ref = identity.get(f"{key}_env")
                    if isinstance(ref, str) and ref.startswith(STORED):
                        identity.pop(f"{key}_env")
                        identity[key] = _hint(stored.credentials, ref)
            shown.append(identity)
        fields["aws_credentials"] = shown
    return fields


def file_fields(config: ProviderConfig) -> dict[str, Any]:
    return config.model_dump(mode="json", by_alias=True, exclude_defaults=True)


def _counters(services: Services, name: str) -> dict[str, Any]:
    """This process's own counters for the provider since it started (attempts, errors, mean
    latency to the response head)."""
    metrics = services.telemetry.metrics
    attempts = sum(v for labels, v in metrics.upstream_attempts.values.items() if labels[0] == name)
    errors = sum(v for labels, v in metrics.upstream_errors.values.items() if labels[0] == name)
    count, total = 0, 0.0
    for labels, child in metrics.upstream_latency.children.items():
        if labels[0] == name:
            count += sum(child.counts)
            total += child.sum
    return {
        "attempts": int(attempts),
        "errors": int(errors),
        "error_rate": round(errors / attempts, 4) if attempts else None,
        "latency_ms": round(1000 * total / count, 1) if count else None,
    }


def provider_health(services: Services, name: str) -> dict[str, Any]:
    router = services.router
    deployments = [
        {
            "model": s.model,
            "upstream_model": s.upstream_model,
            "consecutive_failures": s.consecutive_failures,
            "cooling_for_seconds": round(s.cooling_for, 1),
        }
        for s in router.status()
        if s.provider == name
    ]
    credentials = [
        {
            "credential": c.credential,
            "status": c.status,
            "http_status": c.http_status,
            "back_in_seconds": round(c.back_in, 1),
        }
        for c in router.credential_status()
        if c.provider == name
    ]
    return {
        "cooling_down": any(s.cooling_for > 0 for s in router.status() if s.provider == name),
        "deployments": deployments,
        "credentials_out": credentials,
        **_counters(services, name),
    }


def routes_of(services: Services, name: str) -> list[dict[str, Any]]:
    """The served models this provider serves, with their weights."""
    router = services.router
    out = []
    for model_id in services.catalogue.models:
        for deployment in router.deployments_for(model_id):
            if deployment.provider == name:
                out.append(
                    {
                        "model": model_id,
                        "upstream_model": deployment.upstream_model,
                        "weight": deployment.weight,
                    }
                )
    return out


def credits(micro: int, per_thousand: bool = False) -> str:
    value = Decimal(micro) / (1000 if per_thousand else 1) / 1_000_000
    text = f"{value:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def price_view(price: Price) -> dict[str, Any]:
    return {
        "input": credits(price.input),
        "output": credits(price.output),
        "cache_write": credits(price.cache_write),
        "cache_write_1h": credits(price.cache_write_1h),
        "cache_read": credits(price.cache_read),
        "web_search_request": credits(price.web_search_request, per_thousand=True),
    }


def change_view(change: PriceChange) -> dict[str, Any]:
    return {
        "effective_from": when(change.effective_from),
        "effective_from_epoch": change.effective_from,
        **{key: credits(micro) for key, micro in change.micro.items()},
        "created_at": when(change.created_at),
    }
