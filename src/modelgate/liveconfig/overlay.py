"""The entries stored through the admin API, and the configuration they make with the file's.

Precedence: an entry stored through the API replaces the file's entry of the same name (a
provider by ``name``, a model's whole deployment list, an alias); a stored price is merged field
by field over the file's and the packaged catalogue's price of its model, from its
``effective_from`` on. Names found only in the file are kept as the file says.

Credential values never appear in a stored body: the API's ``api_key`` (and a ``bedrock``
identity's ``access_key_id``, ``secret_access_key``, ``session_token``) become references
``stored:<provider>:…`` in the fields where the file names environment variables, and the values
live sealed beside the body. The references resolve through ``Overlay.secrets``, laid over the
process environment, so every kind's own checks and constructors read them unchanged.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import orjson

from modelgate.config import Settings
from modelgate.storage.upstream_entries import StoredEntry, StoredPrice, UpstreamSnapshot
from modelgate.upstream.config import DeploymentConfig, parse_provider
from modelgate.upstream.kind import ProviderConfig

#: Prefix of the references to sealed credential values (never an environment variable's name).
STORED = "stored:"
#: The credential value fields of a ``bedrock`` identity, each replacing ``<field>_env``.
AWS_VALUE_FIELDS = ("access_key_id", "secret_access_key", "session_token")
#: Price fields, as the catalogue spells them (credits per million tokens; web searches per 1,000).
PRICE_FIELDS = ("input", "output", "cache_write", "cache_write_1h", "cache_read", "web_search_request")


def hint(value: str) -> str:
    """What a GET shows of a credential: its last four characters, when it is long enough that
    they say little about it."""
    return "…" + value[-4:] if len(value) >= 12 else "…"


def _reference(provider: str, *path: object) -> str:
    return STORED + provider + ":" + ":".join(str(p) for p in path)


def _value(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 16_384 or value != value.strip():
        raise ValueError(f"{where}: a non-empty string without surrounding spaces")
    return value


def split_credentials(name: str, body: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """An API body's provider fields, with credential values replaced by references, and the
    values by reference. ValueError naming the field for a malformed value."""
    config = dict(body)
    values: dict[str, str] = {}
    for key, given in config.items():
        if isinstance(given, str) and given.startswith(STORED):
            raise ValueError(f"{key}: names starting with {STORED!r} are reserved")
    env = config.get("api_key_env")
    for listed_name in env if isinstance(env, list) else [env]:
        if isinstance(listed_name, str) and listed_name.startswith(STORED):
            raise ValueError(f"api_key_env: names starting with {STORED!r} are reserved")
    if "api_key" in config:
        if config.get("api_key_env") is not None:
            raise ValueError("api_key: give api_key (the value) or api_key_env (a variable's name), not both")
        given = config.pop("api_key")
        listed = isinstance(given, list)
        keys = given if listed else [given]
        if listed and not 1 <= len(keys) <= 64:
            raise ValueError("api_key: a list of 1 to 64 keys")
        names = []
        for i, key in enumerate(keys):
            names.append(_reference(name, "api_key", i))
            values[names[-1]] = _value(key, f"api_key[{i}]" if listed else "api_key")
        if len(set(values.values())) != len(values):
            raise ValueError("api_key: a key is listed twice")
        config["api_key_env"] = names if listed else names[0]
    identities = config.get("aws_credentials")
    if isinstance(identities, list):
        replaced: list[Any] = []
        for i, identity in enumerate(identities):
            if isinstance(identity, Mapping):
                identity = dict(identity)
                for key in AWS_VALUE_FIELDS:
                    if key not in identity:
                        continue
                    if identity.get(f"{key}_env") is not None:
                        raise ValueError(f"aws_credentials[{i}].{key}: give {key} or {key}_env, not both")
                    ref = _reference(name, "aws", i, key)
                    values[ref] = _value(identity.pop(key), f"aws_credentials[{i}].{key}")
                    identity[f"{key}_env"] = ref
            replaced.append(identity)
        config["aws_credentials"] = replaced
    return config, values


def references(config: Mapping[str, Any]) -> list[str]:
    """The stored references a provider's fields use."""
    found: list[str] = []
    env = config.get("api_key_env")
    for name in env if isinstance(env, list) else [env]:
        if isinstance(name, str) and name.startswith(STORED):
            found.append(name)
    for identity in config.get("aws_credentials") or []:
        if isinstance(identity, Mapping):
            for key in AWS_VALUE_FIELDS:
                ref = identity.get(f"{key}_env")
                if isinstance(ref, str) and ref.startswith(STORED):
                    found.append(ref)
    return found


@dataclass(frozen=True)
class StoredProvider:
    name: str
    #: The ``[[providers]]`` fields, credential values as references.
    config: dict[str, Any]
    #: Reference -> {"hint", "set_at"} for every credential value held.
    credentials: dict[str, dict[str, Any]]
    updated_at: float

    def body(self) -> str:
        return orjson.dumps({"config": self.config, "credentials": self.credentials}).decode()


@dataclass(frozen=True)
class PriceChange:
    model_id: str
    effective_from: float
    #: Price fields given, in micro-credits per million tokens (``web_search_request``: per
    #: 1,000 requests), as the catalogue gives them in credits.
    micro: dict[str, int]
    created_at: float


@dataclass(frozen=True)
class Overlay:
    """Everything stored, read together (``from_snapshot``); empty when nothing is."""

    generation: int = 0
    providers: dict[str, StoredProvider] = field(default_factory=dict)
    deployments: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    prices: dict[str, list[PriceChange]] = field(default_factory=dict)
    #: Reference -> credential value (opened), laid over the environment.
    secrets: dict[str, str] = field(default_factory=dict)
    #: Providers whose sealed credentials did not open (their references stay unresolved).
    unopened: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.providers or self.deployments or self.aliases or self.prices)

    def price_in_force(self, model_id: str, now: float) -> PriceChange | None:
        current = None
        for change in self.prices.get(model_id, ()):
            if change.effective_from <= now:
                current = change
        return current

    def next_price_change(self, now: float) -> float:
        """When the next scheduled price takes effect (infinity: none is scheduled)."""
        later = [c.effective_from for cs in self.prices.values() for c in cs if c.effective_from > now]
        return min(later, default=math.inf)

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        return {**base, **self.secrets}


def provider_from_entry(entry: StoredEntry) -> StoredProvider:
    data = orjson.loads(entry.body)
    return StoredProvider(
        entry.name, dict(data["config"]), dict(data.get("credentials") or {}), entry.updated_at
    )


def price_from_row(row: StoredPrice) -> PriceChange:
    micro = {k: int(v) for k, v in orjson.loads(row.body).items() if k in PRICE_FIELDS}
    return PriceChange(row.model_id, row.effective_from, micro, row.created_at)


def overlay_from_snapshot(snapshot: UpstreamSnapshot, open_sealed: Any, on_unopened: Any = None) -> Overlay:
    """``open_sealed(name, blob) -> dict`` opens a provider's credentials (``Sealer.open``); a
    provider whose credentials do not open is kept without them (it then fails validation, and
    the message says why), ``on_unopened(message)`` is told."""
    providers: dict[str, StoredProvider] = {}
    deployments: dict[str, list[dict[str, Any]]] = {}
    aliases: dict[str, str] = {}
    secrets: dict[str, str] = {}
    unopened: list[str] = []
    for entry in snapshot.entries:
        if entry.kind == "provider":
            providers[entry.name] = provider_from_entry(entry)
            if entry.sealed is not None:
                try:
                    secrets.update(open_sealed(entry.name, entry.sealed))
                except ValueError as exc:
                    unopened.append(entry.name)
                    if on_unopened is not None:
                        on_unopened(str(exc))
        elif entry.kind == "deployments":
            deployments[entry.name] = list(orjson.loads(entry.body))
        else:
            aliases[entry.name] = str(orjson.loads(entry.body))
    prices: dict[str, list[PriceChange]] = {}
    for row in snapshot.prices:
        prices.setdefault(row.model_id, []).append(price_from_row(row))
    for changes in prices.values():
        changes.sort(key=lambda c: c.effective_from)
    return Overlay(snapshot.generation, providers, deployments, aliases, prices, secrets, tuple(unopened))


def _credits(micro: int) -> str:
    """Micro-credits back to the catalogue's credits (as the stored price was given)."""
    value = Decimal(micro) / 1_000_000
    return f"{value:f}"


def effective_settings(file: Settings, overlay: Overlay, now: float) -> Settings:
    """The file's settings with the stored entries laid over them (the module docstring)."""
    if overlay.empty:
        return file
    providers: list[ProviderConfig] = []
    for provider in file.providers:
        stored = overlay.providers.get(provider.name)
        providers.append(parse_provider(stored.config) if stored is not None else provider)
    known = {p.name for p in file.providers}
    providers.extend(parse_provider(p.config) for name, p in overlay.providers.items() if name not in known)
    deployments = dict(file.deployments)
    for model_id, listed in overlay.deployments.items():
        deployments[model_id] = [DeploymentConfig.model_validate(d) for d in listed]
    catalogue = copy.deepcopy(file.catalogue)
    if overlay.aliases:
        catalogue["aliases"] = {**(catalogue.get("aliases") or {}), **overlay.aliases}
    for model_id in overlay.prices:
        change = overlay.price_in_force(model_id, now)
        if change is None:
            continue
        models = catalogue.setdefault("models", {})
        entry = dict(models.get(model_id) or {})
        price = dict(entry.get("price") or {})
        price.update({k: _credits(v) for k, v in change.micro.items()})
        entry["price"] = price
        models[model_id] = entry
    return file.model_copy(
        update={"providers": providers, "deployments": deployments, "catalogue": catalogue}
    )
