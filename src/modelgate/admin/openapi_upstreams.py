"""The upstream endpoints' part of the OpenAPI document (``admin.providers``,
``admin.model_routes``): paths and schemas, merged into the document by ``admin.openapi``."""

from __future__ import annotations

from typing import Any

from modelgate.admin.model_routes import AliasBody, DeploymentsBody, PriceBody

_REF = "#/components/schemas/{model}"
_STR = {"type": "string"}
_ANY_OBJECT = {"type": "object", "additionalProperties": True}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _errors(*codes: str) -> dict[str, Any]:
    return {c: {"$ref": f"#/components/responses/E{c}"} for c in codes}


def _op(
    op_id: str,
    summary: str,
    schema: str,
    *,
    status: str = "200",
    body: str | None = None,
    params: list[dict[str, Any]] | None = None,
    errors: tuple[str, ...] = ("401", "403", "404"),
    description: str | None = None,
) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "operationId": op_id,
        "summary": summary,
        "parameters": params or [],
        "responses": {
            status: {
                "description": "OK" if status == "200" else "Created",
                "content": {"application/json": {"schema": _ref(schema)}},
            },
            **_errors(*errors),
        },
    }
    if description:
        operation["description"] = description
    if body:
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(body)}}}
    return operation


def _path(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


_NAME = _path("name")
_MODEL = _path("model_id")
_ALIAS = _path("alias")
_CHANGE = ("400", "401", "403", "404", "409")

_PROVIDER_BODY = (
    "The fields of a [[providers]] table of the configuration file (name, kind, base_url, timeouts, "
    "credential_pool, max_concurrency, headers, and the kind's own: region, project, azure_api, ...), "
    "validated by the kind's model. Credential values go where the file names environment variables: "
    "api_key (a string, or a list for a pool) instead of api_key_env; a bedrock identity's access_key_id, "
    "secret_access_key, session_token instead of their *_env names. Values are write-only: answers show "
    "a hint (…abcd) and set_at."
)

SCHEMAS: dict[str, Any] = {
    "ProviderBody": {**_ANY_OBJECT, "description": _PROVIDER_BODY},
    "ProviderTrial": {
        "type": "object",
        "properties": {"model": {"type": "string", "description": "upstream model id to try"}},
        "additionalProperties": False,
    },
    "Provider": {
        "type": "object",
        "properties": {
            "name": _STR,
            "kind": _STR,
            "source": {"type": "string", "enum": ["file", "api", "api, over the file"]},
            "config": {**_ANY_OBJECT, "description": "the fields as given; credential values as hints"},
            "updated_at": {"type": ["string", "null"], "format": "date-time"},
            "routes": {"type": "array", "items": _ANY_OBJECT},
            "health": _ANY_OBJECT,
        },
        "required": ["name", "kind", "source", "config", "updated_at", "routes", "health"],
    },
    "ProviderList": {
        "type": "object",
        "properties": {
            "data": {"type": "array", "items": _ref("Provider")},
            "generation": {"type": "integer"},
        },
        "required": ["data", "generation"],
    },
    "ProviderDeleted": {
        "type": "object",
        "properties": {"deleted": _STR, "now": {"anyOf": [_ref("Provider"), {"type": "null"}]}},
        "required": ["deleted", "now"],
    },
    "ProviderTestResult": {
        "type": "object",
        "properties": {
            "ok": {"type": "boolean"},
            "status": {"type": ["integer", "null"]},
            "latency_ms": {"type": "number"},
            "error": {"type": ["string", "null"]},
            "model": _STR,
            "dialects": {"type": "array", "items": _ANY_OBJECT},
        },
        "required": ["ok", "status", "latency_ms", "error"],
    },
    "ModelDeployments": {
        "type": "object",
        "properties": {
            "model": _STR,
            "source": {"type": "string", "enum": ["api", "file", "default_provider", "none"]},
            "deployments": {"type": "array", "items": _ANY_OBJECT},
        },
        "required": ["model", "source", "deployments"],
    },
    "ModelPrice": {
        "type": "object",
        "properties": {
            "model": _STR,
            "unit": _STR,
            "current": _ANY_OBJECT,
            "scheduled": {"type": "array", "items": _ANY_OBJECT},
        },
        "required": ["model", "current", "scheduled"],
    },
    "Alias": {
        "type": "object",
        "properties": {"alias": _STR, "target": _STR, "source": _STR},
        "required": ["alias", "target", "source"],
    },
    "AliasList": {
        "type": "object",
        "properties": {"data": {"type": "array", "items": _ref("Alias")}},
        "required": ["data"],
    },
    "AliasDeleted": {"type": "object", "properties": {"deleted": _STR}, "required": ["deleted"]},
}


def upstream_components() -> dict[str, Any]:
    out = dict(SCHEMAS)
    for model in (DeploymentsBody, PriceBody, AliasBody):
        schema = model.model_json_schema(ref_template=_REF)
        out.update(schema.pop("$defs", {}))
        out[model.__name__] = schema
    return out


def upstream_paths() -> dict[str, Any]:
    p = "/admin/api"
    return {
        f"{p}/providers": {
            "get": _op(
                "listProviders",
                "Providers, their routes and health (operator)",
                "ProviderList",
                errors=("401", "403"),
            ),
            "post": _op(
                "createProvider",
                "Add a provider; applied on every process within a second",
                "Provider",
                status="201",
                body="ProviderBody",
                errors=_CHANGE,
            ),
        },
        f"{p}/providers/{{name}}": {
            "get": _op("getProvider", "One provider", "Provider", params=[_NAME]),
            "put": _op(
                "replaceProvider",
                "Replace a provider's fields (stored credentials kept unless new ones are given)",
                "Provider",
                body="ProviderBody",
                params=[_NAME],
                errors=_CHANGE,
            ),
            "patch": _op(
                "amendProvider",
                "Change some of a provider's fields",
                "Provider",
                body="ProviderBody",
                params=[_NAME],
                errors=_CHANGE,
            ),
            "delete": _op(
                "deleteProvider",
                "Delete a stored provider (409 while a model routes to it, or when only the file defines it)",
                "ProviderDeleted",
                params=[_NAME],
                errors=_CHANGE,
            ),
        },
        f"{p}/providers/{{name}}/test": {
            "post": _op(
                "testProvider",
                "Send one small request per dialect the provider speaks",
                "ProviderTestResult",
                body="ProviderTrial",
                params=[_NAME],
                errors=("400", "401", "403", "404"),
            )
        },
        f"{p}/models/{{model_id}}/deployments": {
            "get": _op(
                "getDeployments",
                "A model's deployments and where they come from",
                "ModelDeployments",
                params=[_MODEL],
            ),
            "put": _op(
                "putDeployments",
                "Replace a model's deployments",
                "ModelDeployments",
                body="DeploymentsBody",
                params=[_MODEL],
                errors=_CHANGE,
            ),
            "delete": _op(
                "deleteDeployments",
                "Drop the stored deployments (the file's apply again)",
                "ModelDeployments",
                params=[_MODEL],
                errors=_CHANGE,
            ),
        },
        f"{p}/models/{{model_id}}/price": {
            "get": _op("getPrice", "A model's current and scheduled prices", "ModelPrice", params=[_MODEL]),
            "put": _op(
                "putPrice",
                "Set a model's price from effective_from (default now, never in the past)",
                "ModelPrice",
                body="PriceBody",
                params=[_MODEL],
                errors=_CHANGE,
            ),
            "delete": _op(
                "deleteScheduledPrice",
                "Drop a scheduled price",
                "ModelPrice",
                params=[
                    _MODEL,
                    {
                        "name": "effective_from",
                        "in": "query",
                        "required": True,
                        "schema": {"type": "string"},
                        "description": "the scheduled price's effective_from, as GET shows it",
                    },
                ],
                errors=_CHANGE,
            ),
        },
        f"{p}/aliases": {
            "get": _op("listAliases", "Aliases and their targets", "AliasList", errors=("401", "403"))
        },
        f"{p}/aliases/{{alias}}": {
            "put": _op(
                "putAlias",
                "Point an alias at a model",
                "Alias",
                body="AliasBody",
                params=[_ALIAS],
                errors=_CHANGE,
            ),
            "delete": _op(
                "deleteAlias", "Drop a stored alias", "AliasDeleted", params=[_ALIAS], errors=_CHANGE
            ),
        },
    }
