"""One internal error tree, rendered per wire format at the edge.

Every refusal the gateway makes is a ``GatewayError`` subclass carrying a *kind*; the kind fixes
the HTTP status and the error ``type``/``code`` each wire format uses (reference §1.7, §2.6, §4.8).
Only the single boundary in the app turns anything else into a 500 ``api_error``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

WireFormat = Literal["messages", "chat", "responses"]


@dataclass(frozen=True, slots=True)
class ErrorKind:
    status: int
    #: Anthropic ``error.type``.
    messages_type: str
    #: OpenAI ``error.type`` and default ``error.code``.
    openai_type: str
    openai_code: str | None
    #: Status on the OpenAI formats when it differs (overload is 529 on Messages, 503 on OpenAI).
    openai_status: int | None = None
    #: Whether SDKs should retry (sent as ``x-should-retry`` when it departs from their default).
    retryable: bool | None = None


ERROR_KINDS: dict[str, ErrorKind] = {
    "invalid_request": ErrorKind(400, "invalid_request_error", "invalid_request_error", None),
    "authentication": ErrorKind(401, "authentication_error", "invalid_request_error", "invalid_api_key"),
    "billing": ErrorKind(402, "billing_error", "insufficient_quota", "insufficient_quota", retryable=False),
    "permission": ErrorKind(403, "permission_error", "permission_error", "model_not_allowed"),
    "not_found": ErrorKind(404, "not_found_error", "invalid_request_error", "model_not_found"),
    "method_not_allowed": ErrorKind(
        405, "invalid_request_error", "invalid_request_error", "method_not_allowed"
    ),
    "request_timeout": ErrorKind(408, "invalid_request_error", "invalid_request_error", "request_timeout"),
    "request_too_large": ErrorKind(413, "request_too_large", "invalid_request_error", "request_too_large"),
    "rate_limit": ErrorKind(429, "rate_limit_error", "rate_limit_error", "rate_limit_exceeded"),
    "api_error": ErrorKind(500, "api_error", "server_error", None),
    "upstream_error": ErrorKind(502, "api_error", "server_error", "upstream_error"),
    "unavailable": ErrorKind(503, "api_error", "server_error", "service_unavailable"),
    "timeout": ErrorKind(504, "timeout_error", "timeout", "timeout"),
    "overloaded": ErrorKind(529, "overloaded_error", "server_error", "overloaded", openai_status=503),
}


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

    def status_for(self, fmt: WireFormat) -> int:
        if self.status is not None:
            return self.status
        spec = self.spec
        if fmt != "messages" and spec.openai_status is not None:
            return spec.openai_status
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
