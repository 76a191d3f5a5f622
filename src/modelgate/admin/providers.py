"""Upstream providers through the admin API (operator only): list, create, read, replace or
amend, delete, and test.

Bodies take the fields of the configuration file's ``[[providers]]`` tables, validated by the
same per-kind models, plus credential values where the file names environment variables:
``api_key`` (a string, or a list for a pool) instead of ``api_key_env``, and a ``bedrock``
identity's ``access_key_id``, ``secret_access_key``, ``session_token`` instead of their ``*_env``
names. Values are write-only: stored sealed (``liveconfig.sealing``), shown as a hint; a ``PUT``
or ``PATCH`` that gives none keeps the ones stored. An entry stored here wins over the file's of
the same name; deleting it brings the file's back. A provider that a model still routes to is
not deleted (409).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import RootModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from modelgate.admin.auth import Principal
from modelgate.admin.http import AdminError, bad_request, conflict, json_response, not_found, parse_body
from modelgate.admin.provider_test import try_provider
from modelgate.admin.schemas import when
from modelgate.admin.upstream_changes import UpstreamChanges, checked_name
from modelgate.admin.upstream_views import file_fields, provider_health, redacted_fields, routes_of
from modelgate.liveconfig.overlay import (
    STORED,
    Overlay,
    StoredProvider,
    hint,
    references,
    split_credentials,
)
from modelgate.storage.upstream_entries import StoredEntry
from modelgate.upstream.config import parse_provider
from modelgate.upstream.kind import ProviderConfig
from modelgate.upstream.kinds import KINDS


class JsonObject(RootModel[dict[str, Any]]):
    """Any JSON object (its fields are checked by the provider kind's model)."""


class ProviderTrial(RootModel[dict[str, str]]):
    """``{"model": "<upstream model id>"}``, optional."""


def _invalid(exc: ValidationError) -> AdminError:
    first = exc.errors(include_url=False, include_input=False)[0]
    loc = [str(p) for p in first["loc"]]
    if loc and loc[0] in KINDS:  # the union's tag, not a field
        loc = loc[1:]
    return bad_request(f"{'.'.join(loc) or 'body'}: {first['msg']}")


def _public(stored: StoredProvider) -> dict[str, Any]:
    """Stored fields an amendment starts from: credential references left out of api_key_env
    (they are carried over by ``_prepare`` unless a new value or name is given)."""
    fields = dict(stored.config)
    env = fields.get("api_key_env")
    names = env if isinstance(env, list) else [env]
    if any(isinstance(n, str) and n.startswith(STORED) for n in names):
        fields.pop("api_key_env")
    return fields


class ProviderEndpoints:
    def __init__(self, changes: UpstreamChanges) -> None:
        self.changes = changes
        self.services = changes.services

    # views ----------------------------------------------------------------------------------

    def _view(self, config: ProviderConfig, overlay: Overlay) -> dict[str, Any]:
        stored = overlay.providers.get(config.name)
        in_file = any(p.name == config.name for p in self.services.settings.providers)
        source = ("api, over the file" if in_file else "api") if stored is not None else "file"
        fields = redacted_fields(stored) if stored is not None else file_fields(config)
        return {
            "name": config.name,
            "kind": config.kind,
            "source": source,
            "config": fields,
            "updated_at": when(stored.updated_at) if stored is not None else None,
            "routes": routes_of(self.services, config.name),
            "health": provider_health(self.services, config.name),
        }

    def _find(self, name: str) -> ProviderConfig:
        for config in self.changes.effective().providers:
            if config.name == name:
                return config
        raise not_found("provider", name[:128])

    async def list(self, request: Request, principal: Principal) -> Response:
        principal.require_operator()
        overlay = self.changes.live.overlay
        providers = self.changes.effective().providers
        return json_response(
            {"data": [self._view(p, overlay) for p in providers], "generation": overlay.generation}
        )

    async def get(self, request: Request, principal: Principal) -> Response:
        principal.require_operator()
        return json_response(self._view(self._find(request.path_params["name"]), self.changes.live.overlay))

    # changes --------------------------------------------------------------------------------

    def _prepare(
        self, name: str, body: dict[str, Any], overlay: Overlay
    ) -> tuple[StoredProvider, dict[str, str], Overlay]:
        """The stored form of ``body`` for provider ``name``, its credential values, and the
        stored entries with it (400 naming the field when it is malformed)."""
        if "name" in body and body["name"] != name:
            raise bad_request(f"name: the body names {str(body['name'])[:128]!r}, the path {name!r}")
        body = {**body, "name": name}
        previous = overlay.providers.get(name)
        try:
            config, values = split_credentials(name, body)
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        own = f"{STORED}{name}:"
        if previous is not None and "api_key_env" not in config and "api_key" not in body:
            env = previous.config.get("api_key_env")
            if env is not None and all(
                isinstance(n, str) and n.startswith(own) for n in (env if isinstance(env, list) else [env])
            ):
                config["api_key_env"] = env  # the stored key(s) are kept
        for ref in references(config):
            if ref not in values and ref.startswith(own) and ref in overlay.secrets:
                values[ref] = overlay.secrets[ref]
        try:
            parse_provider(config)
        except ValidationError as exc:
            raise _invalid(exc) from None
        now = self.changes.now()
        kept = previous.credentials if previous is not None else {}
        credentials = {
            ref: kept[ref]
            if ref in kept and overlay.secrets.get(ref) == value
            else {"hint": hint(value), "set_at": now}
            for ref, value in values.items()
        }
        stored = StoredProvider(name, config, credentials, now)
        secrets = {k: v for k, v in overlay.secrets.items() if not k.startswith(own)}
        candidate = dataclasses.replace(
            overlay, providers={**overlay.providers, name: stored}, secrets={**secrets, **values}
        )
        return stored, values, candidate

    async def _store(
        self, principal: Principal, action: str, name: str, body: dict[str, Any], overlay: Overlay
    ) -> dict[str, Any]:
        before = self._view(self._find(name), overlay) if action != "create" else None
        stored, values, candidate = self._prepare(name, body, overlay)
        live = self.changes.live
        sealed = live.sealer.seal(name, values) if values else None
        entry = StoredEntry("provider", name, stored.body(), sealed, stored.updated_at)
        await self.changes.commit(candidate, lambda: live.store.put_entry(entry))
        after = self._view(self._find(name), live.overlay)
        await self.changes.record_change(principal, action, f"provider:{name}", before, after)
        return after

    async def create(self, request: Request, principal: Principal) -> Response:
        principal.require_operator()
        body = (await parse_body(request, JsonObject)).root
        raw = body.get("name")
        if not isinstance(raw, str):
            raise bad_request("name: required (a string)")
        name = checked_name(raw, "name")
        overlay = await self.changes.stored()
        if name in overlay.providers or any(p.name == name for p in self.services.settings.providers):
            raise conflict(f"provider {name!r} exists; PUT or PATCH /admin/api/providers/{name} changes it")
        return json_response(await self._store(principal, "create", name, body, overlay), 201)

    async def replace(self, request: Request, principal: Principal) -> Response:
        """``PUT``: every field as given (defaults for the others); stored credentials are kept
        unless new values or names are given."""
        principal.require_operator()
        name = self._find(request.path_params["name"]).name
        body = (await parse_body(request, JsonObject)).root
        return json_response(await self._store(principal, "replace", name, body, await self.changes.stored()))

    async def amend(self, request: Request, principal: Principal) -> Response:
        """``PATCH``: the given fields over the current ones (a file provider's, or the stored)."""
        principal.require_operator()
        config = self._find(request.path_params["name"])
        patch = (await parse_body(request, JsonObject)).root
        overlay = await self.changes.stored()
        stored = overlay.providers.get(config.name)
        current = _public(stored) if stored is not None else file_fields(config)
        if "api_key" in patch or "api_key_env" in patch:
            current.pop("api_key_env", None)
        body = {**current, **patch}
        return json_response(await self._store(principal, "amend", config.name, body, overlay))

    async def delete(self, request: Request, principal: Principal) -> Response:
        principal.require_operator()
        name = self._find(request.path_params["name"]).name
        overlay = await self.changes.stored()
        if name not in overlay.providers:
            raise conflict(f"provider {name!r} is defined in the configuration file; remove it there")
        in_file = any(p.name == name for p in self.services.settings.providers)
        before = self._view(self._find(name), overlay)
        if not in_file:
            settings = self.changes.effective(overlay)
            routed = sorted(
                model for model, deps in settings.deployments.items() if any(d.provider == name for d in deps)
            )
            if settings.default_provider == name:
                routed.insert(0, "(default_provider)")
            if routed:
                raise conflict(
                    f"provider {name!r} is still routed to by {', '.join(routed)}; move them first"
                )
        own = f"{STORED}{name}:"
        providers = {k: v for k, v in overlay.providers.items() if k != name}
        secrets = {k: v for k, v in overlay.secrets.items() if not k.startswith(own)}
        candidate = dataclasses.replace(overlay, providers=providers, secrets=secrets)
        live = self.changes.live
        await self.changes.commit(candidate, lambda: live.store.delete_entry("provider", name))
        await self.changes.record_change(principal, "delete", f"provider:{name}", before, None)
        after = self._view(self._find(name), live.overlay) if in_file else None
        return json_response({"deleted": name, "now": after})

    async def test(self, request: Request, principal: Principal) -> Response:
        principal.require_operator()
        name = self._find(request.path_params["name"]).name
        body = (await parse_body(request, ProviderTrial)).root
        extra = set(body) - {"model"}
        if extra:
            raise bad_request(f"{sorted(extra)[0]}: unknown field (only model)")
        provider = self.services.router.providers.get(name)
        if provider is None:  # pragma: no cover - the router holds every provider
            raise not_found("provider", name)
        model = body.get("model") or next((r["upstream_model"] for r in routes_of(self.services, name)), None)
        if not model:
            raise bad_request("model: no model is routed to this provider; give the upstream model to try")
        return json_response(await try_provider(provider, model))
