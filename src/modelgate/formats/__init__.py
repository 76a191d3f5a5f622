"""Wire formats: one package per format, each exporting one ``CODEC`` (``formats.base.Codec``).

Formats never import each other; they meet only in ``modelgate.ir``. Callers look a codec up in
``CODECS`` by the wire format of the endpoint and never branch on the format's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from modelgate.errors import WireFormat
from modelgate.formats import chat, messages, responses
from modelgate.formats.base import (
    ClientRequest,
    Codec,
    StreamDecoder,
    StreamEncoder,
    StreamTap,
    TokenEstimator,
)

CODECS: Mapping[WireFormat, Codec] = MappingProxyType(
    {"messages": messages.CODEC, "chat": chat.CODEC, "responses": responses.CODEC}
)

__all__ = [
    "CODECS",
    "ClientRequest",
    "Codec",
    "StreamDecoder",
    "StreamEncoder",
    "StreamTap",
    "TokenEstimator",
]
