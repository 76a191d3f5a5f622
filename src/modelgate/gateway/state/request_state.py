"""What a Responses request asks of stored state, once resolved (``gateway.state.prepare``)."""

from __future__ import annotations

from dataclasses import dataclass

from modelgate.formats import ClientRequest
from modelgate.formats.responses import state as wire
from modelgate.gateway.exchange import Admitted
from modelgate.storage.responses import StoredItem


@dataclass(frozen=True, slots=True)
class RequestState:
    fields: wire.StateFields
    #: Keep the answer once it completes (``store`` asked, stored responses on).
    keep: bool
    #: The request's own input items as they are stored (references resolved to copies).
    own_items: tuple[StoredItem, ...]
    #: The client's body as sent, for an upstream that holds everything it refers to.
    original_raw: bytes
    original_client: ClientRequest
    #: The provider holding all of the state the request refers to ("" when none or several).
    original_holder: str
    #: Providers whose upstream keeps Responses state.
    keepers: frozenset[str]


def state_of(admitted: Admitted) -> RequestState | None:
    """The stored state ``prepare.admit`` resolved for ``admitted`` (None when it kept none)."""
    state = admitted.state
    return state if isinstance(state, RequestState) else None
