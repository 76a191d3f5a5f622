"""What a model request is while it is served: its ``Endpoint``, the ``Exchange`` (identity,
timing, headers, the response headers so far) and, once admitted, the ``Admitted`` request.

These are the nouns every step shares (``pipeline`` orders the steps; ``gateway.state`` and
``gateway.websocket`` take part in them), so they live apart from every step: a step imports
this module, never the pipeline, and the pipeline never imports a step that imports it back.
An optional step an endpoint takes part in (stored Responses state) is named by the endpoint
as a ``StateStep``: the pipeline calls it without knowing what it is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from modelgate.catalogue import Model
from modelgate.formats import FORMATS, ClientRequest, Codec, Format, FormatRoute, ids
from modelgate.formats.jsonutil import Json
from modelgate.gateway.bodies import Facts
from modelgate.services import Services
from modelgate.storage.base import KeyRecord
from modelgate.telemetry.record import RequestRecord
from modelgate.telemetry.tracing import NO_SPAN, PhaseSpan, RequestTrace
from modelgate.upstream.base import Dialect, Provider

NO_PARAMS: Mapping[str, str] = MappingProxyType({})
#: Stores a completed streamed answer before its final event is sent (``relay.StreamResponse``).
KeepHook = Callable[[Json], Awaitable[object]]


class StateStep(Protocol):
    """A step an endpoint's requests take around the pipeline's own (``gateway.state.step``):
    resolved after admission, adjusted per upstream attempt, and given the answer to keep."""

    async def admit(self, services: Services, admitted: Admitted) -> Admitted: ...

    def for_provider(self, admitted: Admitted, provider: Provider, dialect: Dialect) -> Admitted: ...

    def stream_keeper(
        self, services: Services, admitted: Admitted, provider: Provider
    ) -> KeepHook | None: ...

    async def keep_whole(
        self, services: Services, admitted: Admitted, provider: Provider, body: bytes, headers: dict[str, str]
    ) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A model endpoint: its wire format and the name its usage records carry."""

    codec: Codec
    name: str
    #: ``count_tokens``: authorized and rate-limited like the rest, but nothing is held or billed.
    counting: bool = False
    #: Requests may refer to stored state and their answers are kept (``gateway.state``).
    state: StateStep | None = None
    #: The format's route this endpoint serves (what it fixes: the stream flag of some routes).
    route: FormatRoute | None = None

    @property
    def stateful(self) -> bool:
        return self.state is not None

    @property
    def format(self) -> Format:
        return FORMATS[self.codec.name]


@dataclass(slots=True)
class Exchange:
    """One request as it arrives: identity, timing, headers, and the response headers so far."""

    endpoint: Endpoint
    started: float
    headers: Mapping[str, str]
    #: The route's path parameters (``{model}`` of a templated route); empty for exact paths.
    params: Mapping[str, str] = field(default_factory=lambda: NO_PARAMS)
    request_id: str = field(default_factory=ids.new_request_id)
    response_headers: dict[str, str] = field(default_factory=dict)
    #: The body has been read to its end (a refusal before that closes the connection).
    body_read: bool = False
    #: The request holds one of the instance's large-body slots.
    large_body: bool = False
    #: What the metrics, the request log and the trace report when the request ends.
    record: RequestRecord = field(init=False)
    #: The request's spans, when tracing is on.
    trace: RequestTrace | None = None
    #: The connection's peer address (``key_access.peer_of``), for keys bound to address ranges.
    peer: str | None = None

    def __post_init__(self) -> None:
        self.record = RequestRecord(self.request_id, self.endpoint.name)

    def reply_headers(self) -> dict[str, str]:
        return {"request-id": self.request_id, "x-request-id": self.request_id, **self.response_headers}

    def span(self, name: str) -> AbstractContextManager[None]:
        """A child span of the request's trace around a phase (nothing when tracing is off)."""
        return NO_SPAN if self.trace is None else PhaseSpan(self.trace, name)


@dataclass(frozen=True, slots=True)
class Admitted:
    """A request that passed authentication, authorization and validation (its rate limits are
    taken with its hold: ``pipeline.reserve``)."""

    exchange: Exchange
    key: KeyRecord
    model: Model
    client: ClientRequest
    raw: bytes
    facts: Facts
    stream: bool
    #: What the request asks of its endpoint's ``StateStep``, once resolved there (the step's own
    #: record, e.g. ``gateway.state.request_state.RequestState``; read through the step's accessor).
    state: object | None = None
