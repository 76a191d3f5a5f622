"""The ``simulator`` kind: the built-in upstream (``upstream.simulator``), built by the
application (it shares the gateway's offload pool), so it names no implementation here."""

from __future__ import annotations

from typing import ClassVar, Literal

from modelgate.upstream.kind import ProviderConfig


class SimulatorProviderConfig(ProviderConfig):
    speaks_http: ClassVar[bool] = False

    kind: Literal["simulator"]
