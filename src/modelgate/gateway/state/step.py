"""Stored Responses state as one step of the pipeline (``gateway.exchange.StateStep``): the
request's stored state resolved after admission (``prepare.admit``), the body adjusted for each
upstream attempt (``prepare.for_provider``), and the completed answer kept (``keep``)."""

from __future__ import annotations

from modelgate.gateway.exchange import Admitted, KeepHook
from modelgate.gateway.state import keep, prepare
from modelgate.services import Services
from modelgate.upstream.base import Dialect, Provider


class ResponsesState:
    """The ``StateStep`` of the Responses endpoints (HTTP and WebSocket)."""

    __slots__ = ()

    async def admit(self, services: Services, admitted: Admitted) -> Admitted:
        return await prepare.admit(services, admitted)

    def for_provider(self, admitted: Admitted, provider: Provider, dialect: Dialect) -> Admitted:
        return prepare.for_provider(admitted, provider, dialect)

    def stream_keeper(self, services: Services, admitted: Admitted, provider: Provider) -> KeepHook | None:
        return keep.stream_keeper(services, admitted, provider)

    async def keep_whole(
        self, services: Services, admitted: Admitted, provider: Provider, body: bytes, headers: dict[str, str]
    ) -> bytes:
        return await keep.keep_whole(services, admitted, provider, body, headers)


#: The one instance (the step keeps nothing of its own).
RESPONSES_STATE = ResponsesState()
