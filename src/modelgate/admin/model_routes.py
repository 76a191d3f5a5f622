"""A model's deployments and price, and aliases, through the admin API (operator only).

- ``GET/PUT/DELETE /admin/api/models/{model_id}/deployments``: the weighted list of provider and
  upstream model (``{"deployments": [{"provider", "upstream_model", "weight"}]}``); a stored list
  replaces the file's for that model, ``DELETE`` brings the file's back.
- ``GET/PUT/DELETE /admin/api/models/{model_id}/price``: prices in credits per million tokens
  (``web_search_request``: per 1,000 requests), as the catalogue gives them, from
  ``effective_from`` (default now; never in the past, so a price never reprices what was
  charged). Fields not given keep the model's current value. ``DELETE ?effective_from=`` drops a
  scheduled price.
- ``GET /admin/api/aliases``, ``PUT/DELETE /admin/api/aliases/{alias}``: ``{"target": model id}``.

A request is charged the price in force when it was admitted: its hold and its settle use the
same model entry, and its usage record keeps the charge.
"""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response

from modelgate.admin.auth import Principal
from modelgate.admin.http import bad_request, conflict, json_response, not_found, parse_body
from modelgate.admin.schemas import when
from modelgate.admin.upstream_changes import UpstreamChanges, checked_name
from modelgate.admin.upstream_views import change_view, price_view
from modelgate.catalogue import MICRO, Catalogue, build_catalogue
from modelgate.liveconfig.overlay import PRICE_FIELDS, Overlay, PriceChange
from modelgate.storage.upstream_entries import StoredEntry, StoredPrice
from modelgate.upstream.config import DeploymentConfig

#: Seconds of clock skew tolerated in an ``effective_from`` (a price is never set in the past).
PAST_TOLERANCE = 5.0
#: The largest price accepted, in credits (per million tokens or per 1,000 requests).
MAX_PRICE = Decimal(1_000_000)


class DeploymentsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    deployments: list[DeploymentConfig] = Field(min_length=1, max_length=64)


class PriceBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input: str | float | None = None
    output: str | float | None = None
    cache_write: str | float | None = None
    cache_write_1h: str | float | None = None
    cache_read: str | float | None = None
    web_search_request: str | float | None = None
    #: RFC 3339 time or seconds since the epoch; default now.
    effective_from: str | float | None = None


class AliasBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: str = Field(min_length=1, max_length=128)


def _micro(value: str | float, field: str) -> int:
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        raise bad_request(f"{field}: a number of credits, like 3 or 0.25") from None
    if not number.is_finite() or number < 0 or number > MAX_PRICE:
        raise bad_request(f"{field}: between 0 and {MAX_PRICE} credits")
    micro = number * MICRO
    if micro != micro.to_integral_value():
        raise bad_request(f"{field}: at most 6 decimal places of a credit")
    return int(micro)


def _moment(value: str | float | None, now: float) -> float:
    if value is None:
        return now
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise bad_request(
                "effective_from: an RFC 3339 time (2026-12-01T00:00:00Z) or epoch seconds"
            ) from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        moment = parsed.timestamp()
    else:
        moment = float(value)
    if not math.isfinite(moment) or moment > now + 10 * 366 * 86400:
        raise bad_request("effective_from: within the next ten years")
    if moment < now - PAST_TOLERANCE:
        raise bad_request(
            "effective_from: in the past; a price applies from now on, never to what was charged"
        )
    return max(moment, now)


class ModelRouteEndpoints:
    def __init__(self, changes: UpstreamChanges) -> None:
        self.changes = changes
        self.services = changes.services

    def _full_catalogue(self, overlay: Overlay | None = None) -> Catalogue:
        """Every catalogue model, served or hidden (``unrouted = "hide"``)."""
        return build_catalogue(self.changes.effective(overlay).catalogue)

    def _model(self, request: Request) -> str:
        model_id = str(request.path_params["model_id"])
        if model_id not in self._full_catalogue().models:
            raise not_found("model", model_id[:128])
        return model_id

    # deployments ---------------------------------------------------------------------------

    def _deployments_view(self, model_id: str, overlay: Overlay) -> dict[str, Any]:
        settings = self.changes.effective(overlay)
        if model_id in overlay.deployments:
            source = "api"
        elif model_id in self.services.settings.deployments:
            source = "file"
        else:
            source = "default_provider" if settings.default_provider else "none"
        listed = settings.deployments.get(model_id)
        deployments = (
            [d.model_dump(exclude_none=True) for d in listed]
            if listed is not None
            else (
                [{"provider": settings.default_provider, "upstream_model": model_id, "weight": 1}]
                if settings.default_provider
                else []
            )
        )
        return {"model": model_id, "source": source, "deployments": deployments}

    async def deployments_get(self, request: Request, principal: Principal) -> Response:
        principal.require_operator()
        return json_response(self._deployments_view(self._model(request), self.changes.live.overlay))

    async def deployments_put(self, request: Request, principal: Principal) -> Response:
        principal.require_operator()
        model_id = self._model(request)
        body = await parse_body(request, DeploymentsBody)
        overlay = await self.changes.stored()
        before = self._deployments_view(model_id, overlay)
        listed = [d.model_dump(exclude_none=True) for d in body.deployments]
        candidate = dataclasses.replace(overlay, deployments={**overlay.deployments, model_id: listed})
        live = self.changes.live
        entry = StoredEntry("deployments", model_id, orjson.dumps(listed).decode(), None, self.changes.now())
        await self.changes.commit(candidate, lambda: live.store.put_entry(entry))
        after = self._deployments_view(model_id, live.overlay)
        await self.changes.record_change(principal, "replace", f"deployments of {model_id}", before, after)
        return json_response(after)

    async def deployments_delete(self, request: Request, principal: Principal) -> Response:
        principal.require_operator()
        model_id = self._model(request)
        overlay = await self.changes.stored()
        if model_id not in overlay.deployments:
            raise not_found("stored deployments of model", model_id)
        before = self._deployments_view(model_id, overlay)
        candidate = dataclasses.replace(
            overlay, deployments={k: v for k, v in overlay.deployments.items() if k != model_id}
        )
        live = self.changes.live
        await self.changes.commit(candidate, lambda: live.store.delete_entry("deployments", model_id))
        after = self._deployments_view(model_id, live.overlay)
        await self.changes.record_change(principal, "delete", f"deployments of {model_id}", before, after)
        return json_response(after)

    # prices --------------------------------------------------------------------------------

    def _price_view(self, model_id: str, overlay: Overlay) -> dict[str, Any]:
        now = self.changes.now()
        # What this process charges now (a scheduled price is in force once it was applied here,
        # within admin.upstreams_refresh_seconds of its time); a hidden model: as it would be.
        served = self.services.catalogue.models.get(model_id)
        model = served if served is not None else self._full_catalogue(overlay).models[model_id]
        in_force = overlay.price_in_force(model_id, now)
        return {
            "model": model_id,
            "unit": "credits per million tokens; web_search_request per 1,000 requests",
            "current": {
                **price_view(model.price),
                "source": "api" if in_force is not None else "catalogue",
                "effective_from": when(in_force.effective_from) if in_force is not None else None,
            },
            "scheduled": [change_view(c) for c in overlay.prices.get(model_id, ()) if c.effective_from > now],
        }

    async def price_get(self, request: Request, principal: Principal) -> Response:
        principal.require_operator()
        return json_response(self._price_view(self._model(request), self.changes.live.overlay))

    async def price_put(self, request: Request, principal: Principal) -> Response:
        principal.require_operator()
        model_id = self._model(request)
        body = await parse_body(request, PriceBody)
        now = self.changes.now()
        micro = {key: _micro(value, key) for key in PRICE_FIELDS if (value := getattr(body, key)) is not None}
        if not micro:
            raise bad_request(f"body: give at least one of {', '.join(PRICE_FIELDS)}")
        start = _moment(body.effective_from, now)
        overlay = await self.changes.stored()
        before = self._price_view(model_id, overlay)
        change = PriceChange(model_id, start, micro, now)
        listed = [c for c in overlay.prices.get(model_id, ()) if c.effective_from != start]
        listed = sorted([*listed, change], key=lambda c: c.effective_from)
        candidate = dataclasses.replace(overlay, prices={**overlay.prices, model_id: listed})
        live = self.changes.live
        row = StoredPrice(model_id, start, orjson.dumps(micro).decode(), now)
        await self.changes.commit(candidate, lambda: live.store.put_price(row))
        after = self._price_view(model_id, live.overlay)
        await self.changes.record_change(principal, "price", f"price of {model_id}", before, after)
        return json_response(after)

    async def price_delete(self, request: Request, principal: Principal) -> Response:
        """Drops a scheduled price (``?effective_from=``, as the GET shows it)."""
        principal.require_operator()
        model_id = self._model(request)
        raw = request.query_params.get("effective_from")
        if raw is None:
            raise bad_request("effective_from: required (the scheduled price's, as GET shows it)")
        now = self.changes.now()
        overlay = await self.changes.stored()
        scheduled = [c for c in overlay.prices.get(model_id, ()) if c.effective_from > now]
        match = next((c for c in scheduled if raw in (when(c.effective_from), repr(c.effective_from))), None)
        if match is None:
            raise not_found("scheduled price of model", model_id)
        before = self._price_view(model_id, overlay)
        listed = [c for c in overlay.prices[model_id] if c is not match]
        candidate = dataclasses.replace(overlay, prices={**overlay.prices, model_id: listed})
        live = self.changes.live
        await self.changes.commit(candidate, lambda: live.store.delete_price(model_id, match.effective_from))
        after = self._price_view(model_id, live.overlay)
        await self.changes.record_change(principal, "delete", f"scheduled price of {model_id}", before, after)
        return json_response(after)

    # aliases -------------------------------------------------------------------------------

    def _aliases(self, overlay: Overlay) -> list[dict[str, Any]]:
        catalogue = self._full_catalogue(overlay)
        return [
            {"alias": alias, "target": target, "source": "api" if alias in overlay.aliases else "file"}
            for alias, target in sorted(catalogue.aliases.items())
        ]

    async def aliases_list(self, request: Request, principal: Principal) -> Response:
        principal.require_operator()
        return json_response({"data": self._aliases(self.changes.live.overlay)})

    async def alias_put(self, request: Request, principal: Principal) -> Response:
        principal.require_operator()
        alias = checked_name(str(request.path_params["alias"]), "alias")
        body = await parse_body(request, AliasBody)
        overlay = await self.changes.stored()
        catalogue = self._full_catalogue(overlay)
        if body.target not in catalogue.models:
            raise bad_request(f"target: {body.target[:128]!r} is not a catalogue model id")
        if alias in catalogue.models:
            raise conflict(f"alias {alias!r} is a model id; an alias cannot shadow a model")
        before = catalogue.aliases.get(alias)
        candidate = dataclasses.replace(overlay, aliases={**overlay.aliases, alias: body.target})
        live = self.changes.live
        entry = StoredEntry("alias", alias, orjson.dumps(body.target).decode(), None, self.changes.now())
        await self.changes.commit(candidate, lambda: live.store.put_entry(entry))
        view = {"alias": alias, "target": body.target, "source": "api"}
        await self.changes.record_change(
            principal, "replace", f"alias {alias}", {"target": before} if before else None, view
        )
        return json_response(view)

    async def alias_delete(self, request: Request, principal: Principal) -> Response:
        principal.require_operator()
        alias = str(request.path_params["alias"])
        overlay = await self.changes.stored()
        if alias not in overlay.aliases:
            if alias in self._full_catalogue(overlay).aliases:
                raise conflict(f"alias {alias!r} is defined in the configuration file or the catalogue")
            raise not_found("alias", alias[:128])
        candidate = dataclasses.replace(
            overlay, aliases={k: v for k, v in overlay.aliases.items() if k != alias}
        )
        live = self.changes.live
        await self.changes.commit(candidate, lambda: live.store.delete_entry("alias", alias))
        await self.changes.record_change(
            principal, "delete", f"alias {alias}", {"target": overlay.aliases[alias]}, None
        )
        return json_response({"deleted": alias})
