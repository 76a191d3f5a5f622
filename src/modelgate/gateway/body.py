"""Request bodies: bounded reading, JSON parsing, and byte-exact edits of top-level fields.

Passthrough must deliver the client's bytes unchanged apart from the fields the gateway owns
(``model``, a clamped ``max_tokens``, forced usage options), so those are spliced into the raw
bytes instead of re-serialising the document: unknown fields, key order, number spellings,
escapes and thinking signatures all survive exactly.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson

from modelgate.errors import InvalidRequest, RequestTooLarge

# Strings (with escapes) and brackets: all that is needed to know the nesting depth.
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]]', re.DOTALL)
_COLON = re.compile(rb"\s*:\s*")
_SCALAR_END = re.compile(rb"[\s,}\]]")


async def read_limited(chunks: AsyncIterator[bytes], declared: str | None, limit: int) -> bytes:
    """The body, refusing with 413 as soon as it exceeds ``limit`` (declared or while reading)."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestTooLarge(f"request body exceeds the {limit}-byte limit")
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise RequestTooLarge(f"request body exceeds the {limit}-byte limit")
        parts.append(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def parse_object(raw: bytes) -> dict[str, Any]:
    if not raw.strip():
        raise InvalidRequest("request body is empty: send a JSON object")
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise InvalidRequest("request body must be a JSON object")
    return value


def top_level_spans(raw: bytes) -> dict[bytes, tuple[int, int]]:
    """Byte span of each top-level key's value in a JSON object (the last one wins on duplicates)."""
    spans: dict[bytes, tuple[int, int]] = {}
    depth = 0
    tokens = _TOKENS.finditer(raw)
    pending_close: list[tuple[bytes, int, int]] = []  # (key, value start, depth to return to)
    for match in tokens:
        token = match.group()
        first = token[:1]
        if first in (b"{", b"["):
            depth += 1
            continue
        if first in (b"}", b"]"):
            depth -= 1
            if pending_close and depth == pending_close[-1][2]:
                key, start, _ = pending_close.pop()
                spans[key] = (start, match.end())
            continue
        if depth != 1 or pending_close:
            continue
        colon = _COLON.match(raw, match.end())
        if colon is None:
            continue  # a string value at depth 1 (handled when its key was seen)
        key = token[1:-1]
        start = colon.end()
        lead = raw[start : start + 1]
        if lead == b'"':
            value = next(tokens)
            spans[key] = (start, value.end())
        elif lead in (b"{", b"["):
            pending_close.append((key, start, 1))
        else:
            end = _SCALAR_END.search(raw, start)
            spans[key] = (start, end.start() if end else len(raw))
    return spans


def _unique_span(raw: bytes, key: str, value: Any) -> tuple[int, int] | None:
    """Span of ``value`` after ``key`` found by C-level search, when that is unambiguous.

    Sound only when the body has no ``\\u`` escapes (so the key cannot be spelled another way)
    and the key occurs once: then the single occurrence is the top-level one the parsed body has.
    """
    if isinstance(value, dict | list):
        return None
    key_token = orjson.dumps(key)
    if raw.count(key_token) != 1:
        return None
    pattern = re.escape(key_token) + rb"\s*:\s*(" + re.escape(orjson.dumps(value)) + rb")"
    found = None
    for match in re.finditer(pattern, raw):
        if found is not None:
            return None
        found = match.span(1)
    return found


def splice_top_level(
    raw: bytes, changes: Mapping[str, Any], parsed: Mapping[str, Any] | None = None
) -> bytes:
    """``raw`` with the given top-level fields replaced (or appended when absent).

    With ``parsed`` (the decoded ``raw``) the usual case costs a few C-level searches: absent
    keys are appended without a scan and present ones are found by ``_unique_span``. Anything
    ambiguous falls back to tokenising the whole body.
    """
    if not changes:
        return raw
    spans: dict[bytes, tuple[int, int]] | None = None
    fast = parsed is not None and b"\\u" not in raw
    edits: list[tuple[int, int, bytes]] = []
    appended: list[bytes] = []
    for key, value in changes.items():
        encoded = orjson.dumps(value)
        span: tuple[int, int] | None = None
        if fast and parsed is not None:
            if key not in parsed:
                appended.append(orjson.dumps(key) + b":" + encoded)
                continue
            span = _unique_span(raw, key, parsed[key])
        if span is None:
            if spans is None:
                spans = top_level_spans(raw)
            span = spans.get(key.encode())
        if span is None:
            appended.append(orjson.dumps(key) + b":" + encoded)
        else:
            edits.append((span[0], span[1], encoded))
    out = raw
    for start, end, encoded in sorted(edits, reverse=True):
        out = out[:start] + encoded + out[end:]
    if appended:
        close = out.rstrip().rfind(b"}")
        inner = out[:close].rstrip()
        sep = b"" if inner.endswith(b"{") else b","
        out = inner + sep + b",".join(appended) + out[close:]
    return out
