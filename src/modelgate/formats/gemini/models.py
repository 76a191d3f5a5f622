"""``GET /{version}/models`` and ``GET /{version}/models/{model}`` in Google's shape: model
resources named ``models/<id>``, listed by pages with ``pageSize`` / ``pageToken``."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence

from modelgate import catalogue
from modelgate.formats.gemini.wire import invalid
from modelgate.formats.jsonutil import Json

#: The methods every gateway model answers on this format.
GENERATION_METHODS = ("generateContent", "streamGenerateContent", "countTokens")
#: Google's defaults: 50 models a page, at most 1000.
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
_PREFIX = "models/"


def resource_name(model_id: str) -> str:
    return _PREFIX + model_id


def model_id(name: str) -> str:
    """The gateway model id of a path segment or resource name (``models/x`` or ``x``)."""
    return name.removeprefix(_PREFIX)


def model_object(model: catalogue.Model) -> Json:
    out: Json = {
        "name": resource_name(model.id),
        "baseModelId": model.id,
        "version": "1",
        "displayName": model.display_name,
        "outputTokenLimit": model.output_limit,
        "supportedGenerationMethods": list(GENERATION_METHODS),
    }
    if model.context_length is not None:
        out["inputTokenLimit"] = model.context_length
    return out


def _token(offset: int) -> str:
    return base64.urlsafe_b64encode(f"o{offset}".encode()).decode().rstrip("=")


def _offset(token: str) -> int:
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (binascii.Error, ValueError):
        text = ""
    # ASCII digits only: str.isdigit() also accepts "²" and "١", which int() then refuses.
    if not text.startswith("o") or not (text[1:].isascii() and text[1:].isdigit()) or len(text) > 12:
        raise invalid("pageToken: not a token this list gave", "pageToken")
    return int(text[1:])


def page_size(raw: str | None) -> int:
    """The ``pageSize`` query parameter: unset or 0 is the default, above the maximum the maximum."""
    if raw is None or raw == "":
        return DEFAULT_PAGE_SIZE
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 9:
        raise invalid("pageSize: expected a non-negative integer", "pageSize")
    size = int(raw)
    return DEFAULT_PAGE_SIZE if size == 0 else min(size, MAX_PAGE_SIZE)


def models_page(models: Sequence[catalogue.Model], size: int, token: str | None) -> Json:
    """One page of ``models``; ``nextPageToken`` while more follow."""
    start = _offset(token) if token else 0
    page = models[start : start + size]
    out: Json = {"models": [model_object(m) for m in page]}
    if start + size < len(models):
        out["nextPageToken"] = _token(start + size)
    return out
