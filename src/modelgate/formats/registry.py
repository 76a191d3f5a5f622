"""``FORMATS``: the wire formats the gateway serves, one ``formats.format.Format`` entry each.

Adding a format is one package exporting ``FORMAT`` and one line here. Everything else is
derived: ``CODECS`` (by name), the model routes (``server.app``), credential sources
(``auth``), the translation preference order (``gateway.translate``), the 403 of a key group a
format does not serve (``gateway.policy``) and the format of a refusal on a path no route
answered (``gateway.replies``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from modelgate.formats import chat, gemini, messages, responses
from modelgate.formats.base import Codec
from modelgate.formats.format import Format, FormatRoute

#: A wire format's name: a key of ``FORMATS`` (also a provider's dialect names).
FormatName = str

FORMATS: Mapping[FormatName, Format] = MappingProxyType(
    {f.name: f for f in (messages.FORMAT, chat.FORMAT, responses.FORMAT, gemini.FORMAT)}
)

CODECS: Mapping[FormatName, Codec] = MappingProxyType({name: f.codec for name, f in FORMATS.items()})

#: The formats an upstream may speak (a provider's dialects), in registry order.
DIALECTS: tuple[FormatName, ...] = tuple(name for name, f in FORMATS.items() if f.outbound)

#: Every model route with its format, in the order the formats are listed.
ROUTES: tuple[tuple[Format, FormatRoute], ...] = tuple((f, r) for f in FORMATS.values() for r in f.routes)

#: Every ``GET`` path listing models in a format's own shape (``Format.model_paths``).
MODEL_PATHS: tuple[tuple[Format, str], ...] = tuple((f, p) for f in FORMATS.values() for p in f.model_paths)


def format_of(codec: Codec) -> Format:
    return FORMATS[codec.name]


def format_for_path(path: str, headers: Mapping[str, str], query: Mapping[str, str] | None = None) -> Format:
    """The format of a refusal on ``path`` that no route rendered (unknown paths, wrong methods,
    the HTTP layer's own refusals): the format owning the path, else the client's."""
    for fmt in FORMATS.values():
        if fmt.claims_path(path):
            return fmt
    return format_for_client(headers, query)


def format_for_client(headers: Mapping[str, str], query: Mapping[str, str] | None = None) -> Format:
    """For paths several formats' clients call (``/v1/models``, unknown ``/v1`` paths): the
    format whose clients send a header (or a query parameter) of their own, else the one
    answering unclaimed clients."""
    fallback = None
    for fmt in FORMATS.values():
        if fmt.claims_client(headers, query):
            return fmt
        if fmt.answers_unclaimed:
            fallback = fmt
    if fallback is None:  # pragma: no cover - one format answers unclaimed clients (tests hold it)
        raise LookupError("no format answers unclaimed clients")
    return fallback
