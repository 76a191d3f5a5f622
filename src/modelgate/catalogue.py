"""The model catalogue: canonical ids, families, published limits, prices and aliases.

The defaults live in ``catalogue.toml`` beside this module; the config file's ``[catalogue]``
section overrides or adds models and aliases. Prices are held as integer micro-credits per
million tokens so that every cost computation is exact integer arithmetic (see ``billing``).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from importlib import resources
from typing import Any, Literal

Family = Literal["aria", "nova"]
FAMILIES: tuple[Family, ...] = ("aria", "nova")

MICRO = 1_000_000


def credits_to_micro(value: float | int | str | Decimal, *, what: str) -> int:
    """Credits (a decimal number) to integer micro-credits; more than 6 decimals is an error."""
    micro = Decimal(str(value)) * MICRO
    if micro != micro.to_integral_value():
        raise ValueError(f"{what}: {value} has more than 6 decimal places of a credit")
    return int(micro)


#: Anthropic's and OpenAI's list price of a server-side web search: 10 credits per 1,000.
DEFAULT_WEB_SEARCH_PER_THOUSAND = 10


@dataclass(frozen=True, slots=True)
class Price:
    """Micro-credits per million tokens, per token kind; web searches in micro-credits per
    million requests, so every kind shares one divisor (``billing.pricing``)."""

    input: int
    output: int
    cache_write: int
    cache_read: int
    #: 1-hour cache writes (the catalogue default is twice the input price).
    cache_write_1h: int = 0
    #: Per server-side web search request, µc per MILLION requests (catalogue: credits per 1,000).
    web_search_request: int = 0


@dataclass(frozen=True, slots=True)
class Model:
    id: str
    family: Family
    display_name: str
    created: int
    price: Price
    #: Published in /v1/models only when the spec gives it.
    context_length: int | None
    max_output_tokens: int | None
    #: Clamp for ``max_tokens``: the published maximum or the catalogue default.
    output_limit: int
    #: Output tokens asked of the upstream when a Chat or Responses client omits its limit
    #: (``default_max_tokens`` in the catalogue entry; None: ``output_limit``). A deployment's own
    #: ``default_max_tokens`` wins for that deployment (``gateway.output_tokens``).
    default_max_tokens: int | None = None

    @property
    def omitted_max_tokens(self) -> int:
        """What a request without ``max_tokens`` gets: the model's default, at most its limit."""
        return min(self.default_max_tokens or self.output_limit, self.output_limit)

    def listing(self) -> dict[str, Any]:
        """The union item shape that satisfies both SDKs (docs/architecture.md §2, docs/reference/wire-formats.md §1.9)."""
        item: dict[str, Any] = {
            "id": self.id,
            "object": "model",
            "type": "model",
            "display_name": self.display_name,
            "created": self.created,
            "created_at": datetime.fromtimestamp(self.created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "owned_by": "modelgate",
        }
        if self.context_length is not None:
            item["context_length"] = self.context_length
        if self.max_output_tokens is not None:
            item["max_output_tokens"] = self.max_output_tokens
        return item


#: A Claude model id of any release: ``claude-<tier>-<version…>`` (``claude-opus-5-5``,
#: ``claude-haiku-4-5-20251001``), the older ``claude-<version>-<tier>-<date>``
#: (``claude-3-5-sonnet-20241022``), either with a bracketed suffix such as ``[1m]``. Group 1 is
#: the tier word.
_CLAUDE_ID = re.compile(r"claude-(?:\d+(?:[-.]\d+)*-)?([a-z]+)(?:-[0-9A-Za-z.]+)*(?:\[[0-9a-z]+\])?")


class Catalogue:
    """Models by canonical id, aliases, and the Claude tier rule.

    ``tiers`` maps a tier word (``opus``) to the canonical id that Claude model ids of that tier
    resolve to; exact ids and aliases are looked up first, so an operator's alias for one
    Claude id wins over the rule.
    """

    def __init__(
        self, models: dict[str, Model], aliases: dict[str, str], tiers: Mapping[str, str] | None = None
    ) -> None:
        for alias, target in aliases.items():
            if target not in models:
                raise ValueError(f"catalogue.aliases.{alias}: target {target!r} is not a catalogue model")
            if alias in models:
                raise ValueError(f"catalogue.aliases.{alias}: an alias cannot shadow a model id")
        self.models = models
        self.aliases = aliases
        self.tiers: dict[str, str] = {}
        for tier, target in (tiers or {}).items():
            canonical = aliases.get(target, target)
            if canonical not in models:
                raise ValueError(
                    f"catalogue.claude_tiers.{tier}: target {target!r} is not a catalogue model or alias"
                )
            self.tiers[tier] = canonical

    def resolve(self, name: str) -> Model | None:
        """Canonical model for an id, an alias or a Claude id of a mapped tier; None when unknown."""
        model = self.models.get(name)
        if model is None:
            target = self.aliases.get(name)
            if target is None and self.tiers:
                target = self.tier_target(name)
            if target is not None:
                model = self.models[target]
        return model

    def tier_target(self, name: str) -> str | None:
        """The canonical id a Claude model id resolves to by its tier, if the tier is mapped."""
        matched = _CLAUDE_ID.fullmatch(name)
        return self.tiers.get(matched.group(1)) if matched else None

    def restricted_to(self, model_ids: set[str]) -> Catalogue:
        """The same catalogue with only these models; aliases and tiers aimed elsewhere go too."""
        models = {m: model for m, model in self.models.items() if m in model_ids}
        aliases = {a: t for a, t in self.aliases.items() if t in models}
        return Catalogue(models, aliases, {tier: t for tier, t in self.tiers.items() if t in models})

    def in_family(self, family: Family) -> list[Model]:
        return [m for m in self.models.values() if m.family == family]


def _load_default() -> dict[str, Any]:
    text = resources.files("modelgate").joinpath("catalogue.toml").read_text("utf-8")
    return tomllib.loads(text)


def build_catalogue(overrides: dict[str, Any] | None = None) -> Catalogue:
    """The packaged catalogue with ``overrides`` (the config's ``[catalogue]`` table) applied.

    ``overrides`` may hold ``default_max_output_tokens``, ``aliases`` (merged), ``claude_tiers``
    (merged over the packaged tier map, or ``false``), ``alias_presets``
    (names of the packaged optional alias sets to add, e.g. ``["claude-code"]``; the operator's own
    ``aliases`` win over them) and ``models`` (each entry merged field by field into the default
    entry, or added when new).
    """
    data = _load_default()
    overrides = overrides or {}
    default_limit = int(overrides.get("default_max_output_tokens", data["default_max_output_tokens"]))
    raw_models: dict[str, dict[str, Any]] = {k: dict(v) for k, v in data["models"].items()}
    for model_id, fields in (overrides.get("models") or {}).items():
        merged = raw_models.setdefault(model_id, {})
        for field, value in fields.items():
            if field == "price" and isinstance(value, dict):
                merged["price"] = {**merged.get("price", {}), **value}
            else:
                merged[field] = value
    aliases = {
        **data["aliases"],
        **_preset_aliases(data, overrides.get("alias_presets")),
        **(overrides.get("aliases") or {}),
    }
    models = {mid: _model(mid, fields, default_limit) for mid, fields in raw_models.items()}
    return Catalogue(models, aliases, _claude_tiers(data, overrides.get("claude_tiers")))


def _claude_tiers(data: dict[str, Any], override: Any) -> dict[str, str]:
    """The packaged tier map with the operator's merged over it: ``false`` turns the rule off, a
    table points tiers elsewhere (``""`` turns one tier off)."""
    if override is False:
        return {}
    if override is not None and not isinstance(override, dict):
        raise ValueError(
            'catalogue.claude_tiers: false, or a table such as { opus = "aria-opus-5-5" } '
            '(a tier set to "" is off)'
        )
    tiers = {**data.get("claude_tiers", {}), **(override or {})}
    for tier, target in tiers.items():
        if not isinstance(target, str):
            raise ValueError(f"catalogue.claude_tiers.{tier}: a model id or alias, got {target!r}")
    return {tier: target for tier, target in tiers.items() if target}


def _preset_aliases(data: dict[str, Any], names: Any) -> dict[str, str]:
    presets: dict[str, dict[str, str]] = data.get("alias_presets", {})
    if names is None:
        return {}
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError('catalogue.alias_presets: a list of preset names, e.g. ["claude-code"]')
    merged: dict[str, str] = {}
    for name in names:
        if name not in presets:
            raise ValueError(
                f"catalogue.alias_presets: unknown preset {name!r} (known: {', '.join(sorted(presets))})"
            )
        merged.update(presets[name])
    return merged


def _cache_write_1h(price: dict[str, Any], where: str) -> int:
    """``cache_write_1h`` credits per million tokens; twice the input price when not given."""
    value = price.get("cache_write_1h")
    if value is None:
        return 2 * credits_to_micro(price["input"], what=f"{where}.price.input")
    return credits_to_micro(value, what=f"{where}.price.cache_write_1h")


def _web_search_request(price: dict[str, Any], where: str) -> int:
    """``web_search_request`` credits per 1,000 requests, held as µc per million requests (x1000,
    exact: a catalogue price has at most 6 decimals of a credit)."""
    value = price.get("web_search_request", DEFAULT_WEB_SEARCH_PER_THOUSAND)
    micro = credits_to_micro(value, what=f"{where}.price.web_search_request")
    if micro < 0:
        raise ValueError(f"{where}.price.web_search_request: must be >= 0, got {value}")
    return micro * 1000


def _model(model_id: str, fields: dict[str, Any], default_limit: int) -> Model:
    where = f"catalogue.models.{model_id}"
    family = fields.get("family") or model_id.split("-", 1)[0]
    if family not in FAMILIES:
        raise ValueError(f"{where}.family: must be one of {', '.join(FAMILIES)}, got {family!r}")
    if not model_id.startswith(f"{family}-"):
        raise ValueError(f"{where}: ids of family {family!r} start with '{family}-'")
    price = fields.get("price")
    if not isinstance(price, dict) or "input" not in price or "output" not in price:
        raise ValueError(f"{where}.price: needs at least input and output (credits per million tokens)")
    created_raw = fields.get("created", "2026-01-01")
    created = int(datetime.fromisoformat(str(created_raw)).replace(tzinfo=UTC).timestamp())
    max_output = fields.get("max_output_tokens")
    default_max = fields.get("default_max_tokens")
    if default_max is not None and (
        not isinstance(default_max, int) or isinstance(default_max, bool) or default_max < 1
    ):
        raise ValueError(
            f"{where}.default_max_tokens: a whole number of tokens, at least 1, got {default_max!r}"
        )
    return Model(
        id=model_id,
        family=family,
        display_name=str(fields.get("display_name") or model_id),
        created=created,
        price=Price(
            input=credits_to_micro(price["input"], what=f"{where}.price.input"),
            output=credits_to_micro(price["output"], what=f"{where}.price.output"),
            cache_write=credits_to_micro(
                price.get("cache_write") or price["input"], what=f"{where}.price.cache_write"
            ),
            cache_read=credits_to_micro(
                price.get("cache_read") or price["input"], what=f"{where}.price.cache_read"
            ),
            cache_write_1h=_cache_write_1h(price, where),
            web_search_request=_web_search_request(price, where),
        ),
        context_length=fields.get("context_length"),
        max_output_tokens=max_output,
        output_limit=int(max_output or default_limit),
        default_max_tokens=default_max,
    )
