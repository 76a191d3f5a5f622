"""Wire formats: one codec module per format, each exposing the same functions and classes
(``decode_request``, ``encode_request``, ``encode_response``, ``decode_response``,
``StreamEncoder``, ``StreamDecoder``, ``StreamTap``, ``render_error``, ``stream_error_frame``).
Formats never import each other; they meet only in ``modelgate.ir``."""

from __future__ import annotations

from types import ModuleType

from modelgate.formats import chat, messages, responses

CODECS: dict[str, ModuleType] = {"messages": messages, "chat": chat, "responses": responses}
