"""Messages wire helpers shared by the request, response, stream and tap modules: usage objects,
stop reasons and error objects (reference §1.4, §1.6, §1.7)."""

from __future__ import annotations

from typing import Any

from modelgate import errors, ir
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


def decode_usage(raw: Any, into: ir.Usage | None = None) -> ir.Usage:
    """Merge a usage object into ``into``; absent keys keep their value (stream usage is cumulative)."""
    usage = into if into is not None else ir.Usage()
    if isinstance(raw, dict):
        if raw.get("input_tokens") is not None:
            usage.input_tokens = count_of(raw["input_tokens"])
        if raw.get("output_tokens") is not None:
            usage.output_tokens = count_of(raw["output_tokens"])
        if raw.get("cache_creation_input_tokens") is not None:
            usage.cache_creation_input_tokens = count_of(raw["cache_creation_input_tokens"])
        if raw.get("cache_read_input_tokens") is not None:
            usage.cache_read_input_tokens = count_of(raw["cache_read_input_tokens"])
    return usage


def copy_usage(usage: ir.Usage) -> ir.Usage:
    return ir.Usage(
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_creation_input_tokens,
        usage.cache_read_input_tokens,
        usage.reasoning_tokens,
    )


def stop_reason_of(value: Any) -> ir.StopReason:
    """A Messages ``stop_reason``; unknown or missing values read as ``end_turn``."""
    return (
        _STOP_REASONS.get(value, ir.StopReason.END_TURN) if isinstance(value, str) else ir.StopReason.END_TURN
    )


def error_object(kind: str, message: str, code: str | None = None) -> dict[str, Any]:
    spec = errors.ERROR_KINDS.get(kind, errors.ERROR_KINDS["api_error"])
    obj: dict[str, Any] = {"type": spec.messages_type, "message": message}
    if code:
        obj["details"] = {"error_code": code}
    return obj


def stream_error_from(error: Any) -> ir.StreamError:
    """An upstream ``error`` object (``{"type","message"}``) as an IR stream error."""
    if not isinstance(error, dict):
        return ir.StreamError("upstream_error", "upstream stream error")
    kind = _KIND_BY_TYPE.get(str(error.get("type")), "upstream_error")
    return ir.StreamError(kind, str(error.get("message") or "upstream stream error"))
