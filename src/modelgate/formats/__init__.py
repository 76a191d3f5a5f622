"""Wire formats: one package per format, each exporting its ``CODEC`` (``formats.base.Codec``)
and its ``FORMAT`` (``formats.format.Format``), listed in ``formats.registry.FORMATS``.

Formats never import each other; they meet only in ``modelgate.ir``. Callers look a format or a
codec up by name in ``FORMATS``/``CODECS`` and never branch on the format's name.
"""

from __future__ import annotations

from modelgate.formats.base import (
    ClientRequest,
    Codec,
    StreamDecoder,
    StreamEncoder,
    StreamTap,
    TokenEstimator,
)
from modelgate.formats.format import Credentials, Format, FormatRoute
from modelgate.formats.registry import (
    CODECS,
    DIALECTS,
    FORMATS,
    FormatName,
    format_for_client,
    format_for_path,
)

__all__ = [
    "CODECS",
    "DIALECTS",
    "FORMATS",
    "ClientRequest",
    "Codec",
    "Credentials",
    "Format",
    "FormatName",
    "FormatRoute",
    "StreamDecoder",
    "StreamEncoder",
    "StreamTap",
    "TokenEstimator",
    "format_for_client",
    "format_for_path",
]
