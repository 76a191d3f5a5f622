"""Turn upstream failures into gateway errors (docs/reference/wire-formats.md §4.8), with secrets scrubbed.

Upstream text is untrusted and may quote our credentials (an OpenAI 401 says "Incorrect API key
provided: sk-...") or our upstream's address; everything that leaves this module went through
``sanitise``.
"""

from __future__ import annotations

import email.utils
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import orjson

from modelgate import errors

#: Statuses worth another attempt: the request was not processed, or may succeed elsewhere.
RETRYABLE_STATUSES: frozenset[int] = frozenset({429, 500, 502, 503, 504, 529})

_SECRET_LIKE = re.compile(r"\b(?:sk|rk|pk)-[A-Za-z0-9_\-]{20,}")
_MAX_MESSAGE = 500

#: ``credentials``: the upstream refused the gateway's own key or account (401, 402, some 403s).
FailureKind = Literal["status", "connect", "timeout", "broken", "credentials"]


@dataclass(frozen=True, slots=True)
class UpstreamError:
    """What an upstream error body said, already sanitised."""

    message: str | None
    type: str | None = None
    code: str | None = None
    param: str | None = None


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed attempt, as the router remembers it for the final verdict."""

    kind: FailureKind
    provider: str
    status: int | None = None
    detail: UpstreamError | None = None
    retry_after: float | None = None
    #: The transport error's message (already free of hosts and keys).
    note: str = ""

    @property
    def overloaded(self) -> bool:
        if self.status == 529:
            return True
        if self.status is None or self.status < 500 or self.detail is None:
            return False
        words = " ".join(filter(None, (self.detail.type, self.detail.code, self.detail.message)))
        return "overloaded" in words.lower()


def _same(text: str) -> str:
    return text


def sanitise(text: str, redact: Callable[[str], str] = _same) -> str:
    """``redact`` removes the provider's own secrets (key, base URL, host); anything else that
    looks like an API key goes too."""
    text = _SECRET_LIKE.sub("[redacted]", redact(text))
    return text[:_MAX_MESSAGE]


def parse_error_body(body: bytes, redact: Callable[[str], str] = _same) -> UpstreamError:
    """Anthropic ``{"type":"error","error":{type,message}}``, OpenAI ``{"error":{message,type,
    param,code}}``, and the shapes compatible servers use (``{"error":"..."}``, ``{"detail":..}``,
    ``{"message":..}``). Non-JSON bodies yield no message (they are often proxy HTML pages)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return UpstreamError(None)
    if not isinstance(data, dict):
        return UpstreamError(None)
    err = data.get("error")
    if isinstance(err, dict):
        source: dict[str, object] = err
    elif isinstance(err, str):
        source = {"message": err}
    else:
        source = data

    def text(key: str) -> str | None:
        value = source.get(key)
        return sanitise(value, redact) if isinstance(value, str) and value else None

    message = text("message") or text("detail")
    return UpstreamError(message, type=text("type"), code=text("code"), param=text("param"))


def retry_after_seconds(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """``retry-after-ms`` first (as the SDKs do), then ``retry-after`` in seconds or HTTP-date."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            value = float(raw_ms) / 1000
            if math.isfinite(value) and value >= 0:
                return value
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        value = float(raw)
        return value if math.isfinite(value) and value >= 0 else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def credentials_rejected(status: int, detail: UpstreamError) -> bool:
    """401 always concerns our upstream key (clients never authenticate upstream); a 403 does
    when it says so — otherwise a 403 is a permission verdict on the request and is relayed."""
    if status == 401:
        return True
    if status != 403:
        return False
    words = " ".join(filter(None, (detail.type, detail.code, detail.message))).lower()
    return any(w in words for w in ("authentication", "api key", "api_key", "credential", "token"))


def _from_upstream(error: errors.GatewayError) -> errors.GatewayError:
    error.from_upstream = True
    return error


def client_error(
    status: int, detail: UpstreamError, provider: str, *, refused: bool | None = None
) -> errors.GatewayError:
    """An upstream 4xx other than 429: the request itself was refused; relay it, not retried.
    ``refused`` says whether the gateway's credentials were (``None``: judge by the reply)."""
    if refused is None:
        refused = credentials_rejected(status, detail)
    if refused or status == 402:
        what = "credentials" if status != 402 else "account (billing)"
        suffix = f": {detail.message}" if detail.message else ""
        return errors.UpstreamFailed(
            f"upstream rejected the gateway's {what} for provider {provider}{suffix}"
        )
    message = detail.message or f"upstream provider {provider} refused the request (HTTP {status})"
    cls: type[errors.GatewayError]
    if status == 403:
        cls = errors.PermissionDenied
    elif status == 404:
        cls = errors.NotFound
    elif status == 413:
        cls = errors.RequestTooLarge
    elif status == 408:
        return errors.UpstreamTimeout(message)
    else:
        cls = errors.InvalidRequest
    keep = None if status == errors.ERROR_KINDS[cls.kind].status else status
    return _from_upstream(cls(message, param=detail.param, code=detail.code, status=keep))


def give_up_error(failure: Failure | None, attempts: int) -> errors.GatewayError:
    """The error for a request whose every attempt failed, from the last failure."""
    if failure is None:
        return _from_upstream(errors.Unavailable("no upstream deployment could be tried"))
    tried = f" after {attempts} attempt{'s' if attempts != 1 else ''}"
    detail = failure.detail.message if failure.detail and failure.detail.message else None
    headers: dict[str, str] = {}
    if failure.retry_after is not None:
        headers["retry-after"] = str(max(1, math.ceil(failure.retry_after)))
    if failure.kind == "connect":
        return _from_upstream(errors.Unavailable(f"{failure.note}{tried}", headers=headers))
    if failure.kind == "timeout":
        return errors.UpstreamTimeout(f"{failure.note}{tried}")
    if failure.kind == "broken":
        return errors.UpstreamFailed(f"{failure.note}{tried}")
    if failure.kind == "credentials" and failure.status is not None and failure.detail is not None:
        return client_error(failure.status, failure.detail, failure.provider, refused=failure.status != 402)
    status = failure.status
    base = detail or f"upstream provider {failure.provider} returned HTTP {status}"
    if status == 429:
        return _from_upstream(errors.RateLimited(f"{base}{tried}", headers=headers))
    if failure.overloaded:
        return errors.Overloaded(f"{base}{tried}", headers=headers)
    if status == 504:
        return errors.UpstreamTimeout(f"{base}{tried}")
    return errors.UpstreamFailed(f"{base}{tried}")
