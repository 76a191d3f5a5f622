"""One internal error tree; each wire format renders it (``formats.registry``).

Every refusal the gateway makes is a ``GatewayError`` subclass carrying a *kind*; the kind fixes
the HTTP status and the gateway's error code. How a kind reads in a wire format (Anthropic's
``error.type``, OpenAI's ``error.type``, Google's ``status``) is that format's vocabulary and lives
in its package; this module names no format. Only the single boundary in the app turns anything
else into a 500 ``api_error``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ErrorKind:
    status: int
    #: The kind's default machine code (OpenAI-style ``error.code``; the request log's error code).
    code: str | None
    #: The status on formats that use only standard HTTP statuses, where ``status`` is not one
    #: (overload is 529 on Anthropic's API and 503 elsewhere).
    portable_status: int | None = None
    #: Whether SDKs should retry (sent as ``x-should-retry`` when it departs from their default).
    retryable: bool | None = None


ERROR_KINDS: dict[str, ErrorKind] = {
    "invalid_request": ErrorKind(400, None),
    "authentication": ErrorKind(401, "invalid_api_key"),
    "billing": ErrorKind(402, "insufficient_quota", retryable=False),
    "permission": ErrorKind(403, "model_not_allowed"),
    "not_found": ErrorKind(404, "model_not_found"),
    "method_not_allowed": ErrorKind(405, "method_not_allowed"),
    "request_timeout": ErrorKind(408, "request_timeout"),
    "request_too_large": ErrorKind(413, "request_too_large"),
    "rate_limit": ErrorKind(429, "rate_limit_exceeded"),
    "api_error": ErrorKind(500, None),
    "upstream_error": ErrorKind(502, "upstream_error"),
    "unavailable": ErrorKind(503, "service_unavailable"),
    "timeout": ErrorKind(504, "timeout"),
    "overloaded": ErrorKind(529, "overloaded", portable_status=503),
}


def kind_spec(kind: str) -> ErrorKind:
    """The kind's row; an unknown kind (an upstream's) reads as ``api_error``."""
    return ERROR_KINDS.get(kind, ERROR_KINDS["api_error"])


class GatewayError(Exception):
    """A refusal with a status, rendered in the caller's wire format.

    ``code`` overrides the kind's default OpenAI ``code`` (and is added as
    ``error.details.error_code`` on the Messages format); ``param`` names the offending field.
    """

    kind: str = "api_error"
    #: True when the error reports what an upstream did (its refusal or failure); False for the
    #: gateway's own refusals. Usage records tell the two apart.
    from_upstream: bool = False

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        #: Overrides the kind's status (an upstream 4xx such as 422 is relayed with its own status).
        self.status = status
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def __reduce__(self) -> tuple[Any, ...]:
        # Errors raised in a worker process (modelgate.offload) cross back pickled, fields intact.
        fields = (self.message, self.param, self.code, self.headers, self.status, self.from_upstream)
        return (_rebuild, (type(self), *fields))

    @property
    def spec(self) -> ErrorKind:
        return ERROR_KINDS[self.kind]

    def http_status(self, *, portable: bool = False) -> int:
        """The status to answer with; ``portable``: on a format that uses only standard HTTP
        statuses (``ErrorKind.portable_status``). A status of its own (an upstream's 4xx relayed
        as it came) always wins."""
        if self.status is not None:
            return self.status
        spec = self.spec
        if portable and spec.portable_status is not None:
            return spec.portable_status
        return spec.status


def _rebuild(
    cls: type[GatewayError],
    message: str,
    param: str | None,
    code: str | None,
    headers: dict[str, str],
    status: int | None,
    from_upstream: bool,
) -> GatewayError:
    error = cls(message, param=param, code=code, headers=headers, status=status)
    error.from_upstream = from_upstream
    return error


class InvalidRequest(GatewayError):
    kind = "invalid_request"


class AuthenticationFailed(GatewayError):
    kind = "authentication"


class BillingRefused(GatewayError):
    """Balance or monthly cap cannot cover the request (``code`` says which)."""

    kind = "billing"


class PermissionDenied(GatewayError):
    kind = "permission"


class NotFound(GatewayError):
    kind = "not_found"


class MethodNotAllowed(GatewayError):
    kind = "method_not_allowed"


class RequestTimeout(GatewayError):
    """The client did not send its request in time (the edge's head and body timeouts)."""

    kind = "request_timeout"


class RequestTooLarge(GatewayError):
    kind = "request_too_large"


class RateLimited(GatewayError):
    kind = "rate_limit"


class InternalError(GatewayError):
    kind = "api_error"


class UpstreamFailed(GatewayError):
    from_upstream = True
    kind = "upstream_error"


class Unavailable(GatewayError):
    kind = "unavailable"


class UpstreamTimeout(GatewayError):
    from_upstream = True
    kind = "timeout"


class Overloaded(GatewayError):
    from_upstream = True
    kind = "overloaded"
