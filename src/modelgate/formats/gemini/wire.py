"""Gemini wire helpers the request, response and stream modules share: field access in both JSON
spellings, finish reasons, usage metadata, ids and the error body.

The Gemini API is a proto3 JSON API: every field may be written in lowerCamelCase (what the
SDKs send) or in its original snake_case (what many curl examples send); both are read, and a
body that gives one field under both spellings is refused, as the API does.
"""

from __future__ import annotations

import math
import re
import secrets
from typing import Any, TypeVar

from modelgate import errors, ir
from modelgate.formats.jsonutil import Json, count_of, is_int

T = TypeVar("T")

#: proto3 ``int32``: the largest count the API accepts.
INT32_MAX = 2**31 - 1

_UPPER = re.compile(r"([A-Z])")
_DECIMAL = re.compile(r"-?[0-9]{1,12}")


def snake(name: str) -> str:
    """``maxOutputTokens`` -> ``max_output_tokens``."""
    return _UPPER.sub(r"_\1", name).lower()


def invalid(message: str, param: str | None = None) -> errors.InvalidRequest:
    return errors.InvalidRequest(message, param=param)


def get(obj: Json, name: str, param: str = "") -> Any:
    """Field ``name`` (lowerCamelCase) of ``obj`` in either spelling; None when absent."""
    value = obj.get(name)
    other = snake(name)
    if other != name and other in obj:
        if value is not None:
            where = f"{param}.{name}" if param else name
            raise invalid(f"{where}: given twice (as {name} and {other}); send it once", where)
        value = obj[other]
    return value


def has(obj: Json, name: str) -> bool:
    return get(obj, name) is not None


def _typed(obj: Json, name: str, param: str, kind: type[T], noun: str) -> T | None:
    """The field ``name`` (either spelling) when present; a 400 naming ``param`` when it is not a
    ``kind`` (``noun``: how the message calls it)."""
    value = get(obj, name, param)
    if value is None:
        return None
    if not isinstance(value, kind):
        raise invalid(f"{param}: expected {noun}", param)
    return value


def obj_field(obj: Json, name: str, param: str) -> Json | None:
    return _typed(obj, name, param, dict, "an object")


def list_field(obj: Json, name: str, param: str) -> list[Any] | None:
    return _typed(obj, name, param, list, "a list")


def str_field(obj: Json, name: str, param: str) -> str | None:
    return _typed(obj, name, param, str, "a string")


def bool_field(obj: Json, name: str, param: str) -> bool | None:
    return _typed(obj, name, param, bool, "a boolean")


def int_field(obj: Json, name: str, param: str, *, minimum: int = 0) -> int | None:
    """An ``int32`` field, within ``minimum`` .. ``INT32_MAX``. As in proto3 JSON, an integral
    number written as a float (``40.0``, which the SDK sends for ``topK``) or as a decimal string
    is accepted."""
    value = get(obj, name, param)
    if value is None:
        return None
    integral = isinstance(value, float) and math.isfinite(value) and value.is_integer()
    decimal = isinstance(value, str) and _DECIMAL.fullmatch(value) is not None
    number = int(value) if is_int(value) or integral or decimal else None
    if number is None or not minimum <= number <= INT32_MAX:
        raise invalid(f"{param}: expected an integer from {minimum} to {INT32_MAX}", param)
    return number


def float_field(obj: Json, name: str, param: str, *, low: float, high: float) -> float | None:
    """A number field within ``low`` .. ``high`` (the API's documented range)."""
    value = get(obj, name, param)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise invalid(f"{param}: expected a number from {low} to {high}", param)
    return float(value)


# ---------------------------------------------------------------------------------------------
# Finish reasons and usage
# ---------------------------------------------------------------------------------------------

#: IR stop reason -> ``Candidate.finishReason``. Tool use ends a Gemini turn with ``STOP`` (the
#: functionCall parts say what happened); a refusal is ``SAFETY``, the nearest Gemini reason.
FINISH_REASONS: dict[ir.StopReason, str] = {
    ir.StopReason.END_TURN: "STOP",
    ir.StopReason.STOP_SEQUENCE: "STOP",
    ir.StopReason.TOOL_USE: "STOP",
    ir.StopReason.PAUSE_TURN: "STOP",
    ir.StopReason.MAX_TOKENS: "MAX_TOKENS",
    ir.StopReason.CONTEXT_WINDOW: "MAX_TOKENS",
    ir.StopReason.REFUSAL: "SAFETY",
}


def usage_metadata(usage: ir.Usage) -> Json:
    """IR usage -> ``usageMetadata``.

    Gemini counts cached tokens inside ``promptTokenCount`` (``cachedContentTokenCount`` is the
    part of it read from cache) and thoughts outside ``candidatesTokenCount``
    (``thoughtsTokenCount``); the IR counts reasoning inside ``output_tokens``.
    """
    prompt = usage.total_input
    thoughts = min(usage.reasoning_tokens, usage.output_tokens)
    out: Json = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": usage.output_tokens - thoughts,
        "totalTokenCount": prompt + usage.output_tokens,
    }
    if usage.cache_read_input_tokens:
        out["cachedContentTokenCount"] = usage.cache_read_input_tokens
    if thoughts:
        out["thoughtsTokenCount"] = thoughts
    return out


def decode_usage(raw: Any) -> ir.Usage:
    """``usageMetadata`` -> IR (the inverse of ``usage_metadata``)."""
    if not isinstance(raw, dict):
        return ir.Usage()
    prompt = count_of(raw.get("promptTokenCount"))
    cached = min(count_of(raw.get("cachedContentTokenCount")), prompt)
    thoughts = count_of(raw.get("thoughtsTokenCount"))
    return ir.Usage(
        input_tokens=prompt - cached,
        output_tokens=count_of(raw.get("candidatesTokenCount")) + thoughts,
        cache_read_input_tokens=cached,
        reasoning_tokens=thoughts,
    )


# ---------------------------------------------------------------------------------------------
# Ids
# ---------------------------------------------------------------------------------------------


def new_response_id() -> str:
    """``responseId``: like the real API's, 22 URL-safe base64 characters (not a secret, only
    unique)."""
    return secrets.token_urlsafe(16)


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------

#: HTTP status -> Google's canonical status name (google.rpc.Code), as the API pairs them.
STATUS_NAMES: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    #: Google has no 402; the gateway's balance and monthly-cap refusals keep HTTP 402 (as in
    #: every format, so usage records and metrics count them alike, and so the SDK does not
    #: retry them as it retries 429) and are named FAILED_PRECONDITION: the request is fine,
    #: the account is not in a state to run it (the status Gemini gives "enable billing").
    402: "FAILED_PRECONDITION",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "UNIMPLEMENTED",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
    529: "UNAVAILABLE",
}


def http_status(err: errors.GatewayError) -> int:
    """The HTTP status of ``err`` on this format: Google has no 529, overload is 503 there
    (``ErrorKind.portable_status``)."""
    return err.http_status(portable=True)


def status_name(code: int) -> str:
    """Google's status name for an HTTP status; unlisted ones by class."""
    if code in STATUS_NAMES:
        return STATUS_NAMES[code]
    if code >= 500:
        return "INTERNAL" if code < 502 else "UNAVAILABLE"
    return "FAILED_PRECONDITION" if code >= 400 else "UNKNOWN"


def error_object(code: int, message: str) -> Json:
    """``{"error": {"code", "message", "status"}}``, the body the SDK's ``APIError`` reads."""
    return {"error": {"code": code, "message": message, "status": status_name(code)}}


def kind_error_object(kind: str, message: str) -> Json:
    """An error of a gateway error kind (``errors.ERROR_KINDS``) in Google's shape."""
    spec = errors.kind_spec(kind)
    code = spec.portable_status if spec.portable_status is not None else spec.status
    return error_object(code, message)
