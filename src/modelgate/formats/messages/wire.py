"""Messages wire helpers shared by the request, response, stream and tap modules: usage objects,
stop reasons and error objects (docs/reference/wire-formats.md §1.4, §1.6, §1.7)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from modelgate import ir
from modelgate.formats.jsonutil import count_of

_STOP_REASONS = {r.value: r for r in ir.StopReason}

#: Anthropic ``error.type`` -> internal error kind (in-band upstream errors).
_KIND_BY_TYPE = {
    "invalid_request_error": "invalid_request",
    "authentication_error": "authentication",
    "billing_error": "billing",
    "permission_error": "permission",
    "not_found_error": "not_found",
    "request_too_large": "request_too_large",
    "rate_limit_error": "rate_limit",
    "api_error": "upstream_error",
    "overloaded_error": "overloaded",
    "timeout_error": "timeout",
}


def usage_json(usage: ir.Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
    }


#: The token kinds of a Messages usage object (top level and each ``iterations`` entry).
_TOKEN_KINDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def decode_usage(raw: Any, into: ir.Usage | None = None) -> ir.Usage:
    """Merge a usage object into ``into``; absent keys keep their value (stream usage is cumulative).

    What the provider bills, every token once (docs/billing.md):

    - ``cache_creation.ephemeral_1h_input_tokens`` is the part of the cache writes that went to the
      1-hour cache (``ephemeral_5m`` + ``ephemeral_1h`` = ``cache_creation_input_tokens``);
    - ``server_tool_use.web_search_requests`` counts the server web searches (priced per request);
    - ``iterations`` lists every sampling pass of the request. The top-level counts are the sum of
      the non-compaction passes only (zero for an on-demand compaction), so the billed count of a
      kind is the passes' sum. It is never below the top-level figure, which stands when a pass
      leaves a kind out: per kind the larger of the two, which counts each token exactly once.
    """
    usage = into if into is not None else ir.Usage()
    if not isinstance(raw, dict):
        return usage
    for kind in _TOKEN_KINDS:
        if raw.get(kind) is not None:
            setattr(usage, kind, count_of(raw[kind]))
    if isinstance(raw.get("cache_creation"), dict):
        written, one_hour = _cache_writes(raw)
        usage.cache_creation_input_tokens = max(usage.cache_creation_input_tokens, written)
        usage.cache_write_1h_input_tokens = one_hour
    server = raw.get("server_tool_use")
    if isinstance(server, dict) and server.get("web_search_requests") is not None:
        usage.web_search_requests = count_of(server["web_search_requests"])
    iterations = raw.get("iterations")
    if isinstance(iterations, list) and iterations:
        _add_iterations(usage, [i for i in iterations if isinstance(i, dict)])
    return usage


def _cache_writes(raw: dict[str, Any]) -> tuple[int, int]:
    """(all cache writes, 1-hour writes) of one usage object or iteration."""
    split = raw.get("cache_creation")
    split = split if isinstance(split, dict) else {}
    one_hour = count_of(split.get("ephemeral_1h_input_tokens"))
    five_minutes = count_of(split.get("ephemeral_5m_input_tokens"))
    return max(count_of(raw.get("cache_creation_input_tokens")), five_minutes + one_hour), one_hour


def _add_iterations(usage: ir.Usage, iterations: list[dict[str, Any]]) -> None:
    for kind in ("input_tokens", "output_tokens", "cache_read_input_tokens"):
        total = sum(count_of(i.get(kind)) for i in iterations)
        setattr(usage, kind, max(getattr(usage, kind), total))
    writes = [_cache_writes(i) for i in iterations]
    usage.cache_creation_input_tokens = max(usage.cache_creation_input_tokens, sum(w for w, _ in writes))
    usage.cache_write_1h_input_tokens = max(usage.cache_write_1h_input_tokens, sum(h for _, h in writes))


def copy_usage(usage: ir.Usage) -> ir.Usage:
    return replace(usage)


def stop_reason_of(value: Any) -> ir.StopReason:
    """A Messages ``stop_reason``; unknown or missing values read as ``end_turn``."""
    return (
        _STOP_REASONS.get(value, ir.StopReason.END_TURN) if isinstance(value, str) else ir.StopReason.END_TURN
    )


#: Anthropic's ``error.type`` per gateway error kind (``errors.ERROR_KINDS``).
ERROR_TYPES: Mapping[str, str] = MappingProxyType(
    {
        "invalid_request": "invalid_request_error",
        "authentication": "authentication_error",
        "billing": "billing_error",
        "permission": "permission_error",
        "not_found": "not_found_error",
        "method_not_allowed": "invalid_request_error",
        "request_timeout": "invalid_request_error",
        "request_too_large": "request_too_large",
        "rate_limit": "rate_limit_error",
        "api_error": "api_error",
        "upstream_error": "api_error",
        "unavailable": "api_error",
        "timeout": "timeout_error",
        "overloaded": "overloaded_error",
    }
)


def error_object(kind: str, message: str, code: str | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"type": ERROR_TYPES.get(kind) or ERROR_TYPES["api_error"], "message": message}
    if code:
        obj["details"] = {"error_code": code}
    return obj


def stream_error_from(error: Any) -> ir.StreamError:
    """An upstream ``error`` object (``{"type","message"}``) as an IR stream error."""
    if not isinstance(error, dict):
        return ir.StreamError("upstream_error", "upstream stream error")
    kind = _KIND_BY_TYPE.get(str(error.get("type")), "upstream_error")
    return ir.StreamError(kind, str(error.get("message") or "upstream stream error"))
