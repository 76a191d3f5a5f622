"""One model request as it ended: what the metrics count, the request log writes and the trace's
server span carries. Filled in along the request path; read once, when the request ends."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

#: What became of a request (the ``outcome`` of metrics and logs; docs/operations.md).
OUTCOMES = (
    "ok",
    "refused_auth",
    "refused_billing",
    "refused_rate_limit",
    "refused_not_found",
    "refused_invalid",
    "upstream_error",
    "client_gone",
    "shutdown",
    "error",
    "cancelled",
)


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    endpoint: str
    #: How the request arrived: ``http``, or ``websocket`` (a ``response.create`` frame).
    transport: str = "http"
    #: ``time.perf_counter()`` at arrival; durations below are measured from it.
    began: float = field(default_factory=time.perf_counter)
    stream: bool = False
    key_id: str = ""
    account_id: int | None = None
    group: str = ""
    #: The canonical model id (aliases resolved); empty until the body named a model we serve.
    model: str = ""
    status: int = 0
    outcome: str = "ok"
    #: The error the client saw, by kind and code (``errors.ERROR_KINDS``); never its message.
    error_type: str | None = None
    error_code: str | None = None
    #: The usage record's status (``billing.ledger.UsageStatus``) when one was written.
    usage_status: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    #: Server web searches the provider ran (billed per request).
    web_search_requests: int = 0
    charged_uc: int = 0
    #: Seconds from arrival to the last byte (whole) or the stream's end.
    seconds: float = 0.0
    #: Streams: seconds from arrival to the first event sent.
    ttft: float | None = None
    #: Seconds spent waiting on upstreams: each attempt until its response head, then the body
    #: (whole) or the bytes before the first event (streams).
    upstream_seconds: float = 0.0
    #: What the gateway itself added: total minus upstream time (whole), first event minus
    #: upstream time before it (streams); None when no upstream was called.
    added: float | None = None
    #: The deployment that answered (the last attempt's when none did).
    provider: str = ""
    provider_kind: str = ""
    deployment: str = ""
    attempts: int = 0
    #: A stream broken after its first byte: the upstream error class (``mid_stream``).
    mid_stream_error: str | None = None
    #: The model id the upstream answered with (GenAI ``gen_ai.response.model``).
    response_model: str = ""
    #: Hosted tools the request offered that its upstream cannot run, dropped (comma list).
    dropped_tools: str | None = None

    def elapsed(self) -> float:
        return time.perf_counter() - self.began
