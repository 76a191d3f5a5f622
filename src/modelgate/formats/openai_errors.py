"""The OpenAI error vocabulary, shared by the two OpenAI formats (Chat Completions, Responses):
``error.type`` per gateway error kind (``errors.ERROR_KINDS``); ``error.code`` is the kind's
code. OpenAI clients know no 529: those formats answer with ``ErrorKind.portable_status``."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from modelgate import errors

ERROR_TYPES: Mapping[str, str] = MappingProxyType(
    {
        "invalid_request": "invalid_request_error",
        "authentication": "invalid_request_error",
        "billing": "insufficient_quota",
        "permission": "permission_error",
        "not_found": "invalid_request_error",
        "method_not_allowed": "invalid_request_error",
        "request_timeout": "invalid_request_error",
        "request_too_large": "invalid_request_error",
        "rate_limit": "rate_limit_error",
        "api_error": "server_error",
        "upstream_error": "server_error",
        "unavailable": "server_error",
        "timeout": "timeout",
        "overloaded": "server_error",
    }
)


def error_type(kind: str) -> str:
    """OpenAI's ``error.type`` of a kind (an unknown kind reads as ``api_error``)."""
    return ERROR_TYPES.get(kind) or ERROR_TYPES["api_error"]


def error_code(kind: str) -> str | None:
    return errors.kind_spec(kind).code


def http_status(err: errors.GatewayError) -> int:
    return err.http_status(portable=True)
