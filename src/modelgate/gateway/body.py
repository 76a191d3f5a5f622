"""Request bodies: bounded reading, JSON parsing, and byte-exact edits of top-level fields.

Passthrough must deliver the client's bytes unchanged apart from the fields the gateway owns
(``model``, a clamped ``max_tokens``, forced usage options), so those are spliced into the raw
bytes instead of re-serialising the document: unknown fields, key order, number spellings,
escapes and thinking signatures all survive exactly.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

import orjson

from modelgate.errors import InvalidRequest, RequestTooLarge
from modelgate.gateway.body_scan import content_end, quick_spans, respellable, scan_object

# Strings (with escapes) and brackets: all that is needed to know the nesting depth.
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]]', re.DOTALL)
_COLON = re.compile(rb"\s*:\s*")
_SCALAR_END = re.compile(rb"[\s,}\]]")
#: Bodies larger than this are joined from their chunks on a thread (``read_limited``).
JOIN_ON_THREAD_BYTES = 4 << 20
#: Spliced bodies larger than this are joined from GIL-free pieces of ``PIECE_BYTES`` (``_edited``).
JOIN_IN_PIECES_BYTES = 4 << 20
PIECE_BYTES = 1 << 20
#: Deeper than any body gets (the depth limit was applied before these fallbacks run).
_ANY_DEPTH = 1 << 30


async def read_limited(
    chunks_in: AsyncIterator[bytes],
    declared: str | None,
    limit: int,
    *,
    large: int = 0,
    on_large: Callable[[], None] | None = None,
) -> bytes:
    """The body, refusing with 413 as soon as it exceeds ``limit`` (declared or while reading).

    ``on_large`` is called once, before the body is buffered past ``large`` bytes (at once when
    the declared length is larger): it may refuse, so large bodies are admitted before they are
    held in memory, chunked uploads included.
    """
    size = int(declared) if declared is not None and declared.isascii() and declared.isdigit() else None
    if size is not None and size > limit:
        raise RequestTooLarge(f"request body exceeds the {limit}-byte limit")
    if on_large is not None and size is not None and size > large:
        on_large()
        on_large = None
    # The chunks are joined once at the end (one copy; a growing buffer copied them on every
    # reallocation and once more into the final bytes). A large join runs on a thread: it
    # releases the GIL while it copies, so the loop keeps serving meanwhile.
    chunks: list[bytes] = []
    received = 0
    async for chunk in chunks_in:
        received += len(chunk)
        if received > limit:
            raise RequestTooLarge(f"request body exceeds the {limit}-byte limit")
        if on_large is not None and received > large:
            on_large()
            on_large = None
        chunks.append(chunk)
    if received > JOIN_ON_THREAD_BYTES and len(chunks) > 1:
        return await asyncio.to_thread(b"".join, chunks)
    return b"".join(chunks)


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


def top_level_members(raw: bytes) -> list[tuple[bytes, tuple[int, int]]]:
    """Each top-level key of a JSON object, as written (escapes kept), with the byte span of its
    value, in document order, duplicates included (``body_scan.decoded_key`` reads a key)."""
    members: list[tuple[bytes, tuple[int, int]]] = []
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
                members.append((key, (start, match.end())))
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
            members.append((key, (start, value.end())))
        elif lead in (b"{", b"["):
            pending_close.append((key, start, 1))
        else:
            end = _SCALAR_END.search(raw, start)
            members.append((key, (start, end.start() if end else len(raw))))
    return members


def top_level_spans(raw: bytes) -> dict[bytes, tuple[int, int]]:
    """Byte span of each top-level key's value in a JSON object, keyed as written (the last one
    wins on duplicates)."""
    return dict(top_level_members(raw))


def duplicate_key(raw: bytes, parsed: Mapping[str, Any], keys: Iterable[str]) -> str | None:
    """One of ``keys`` that the object in ``raw`` holds more than once at the top level.

    JSON parsers disagree on duplicates (the gateway's keeps the last value, some upstreams the
    first), so a duplicated field the gateway authorizes or bills on could be read two ways. The
    usual case costs a C-level count per key; only a key spelled more than once anywhere (or a
    body with escapes) is looked up precisely.
    """
    suspects = [k for k in keys if k in parsed]
    if not suspects:
        return None
    if not respellable(raw, suspects) and all(raw.count(orjson.dumps(k)) == 1 for k in suspects):
        return None
    if quick_spans(raw, parsed) is not None:  # every member found and proved: none twice
        return None
    return scan_object(raw, _ANY_DEPTH).duplicated(frozenset(suspects))


def too_deep(value: Any, limit: int) -> bool:
    """Whether a parsed JSON value nests containers more than ``limit`` levels deep (one pass
    per level over the containers only)."""
    level: list[Any] = [value]
    depth = 1
    while level:
        if depth > limit:
            return True
        below: list[Any] = []
        for item in level:
            for child in item.values() if type(item) is dict else item:
                kind = type(child)
                if kind is dict or kind is list:
                    below.append(child)
        level = below
        depth += 1
    return False


def shape(value: Any, limit: int, kinds: frozenset[str]) -> tuple[bool, bool]:
    """One walk over a parsed JSON value's containers (a pass per level, as ``too_deep``): whether
    it nests more than ``limit`` levels deep, and whether some object in it has a ``type`` among
    ``kinds`` (``billing.input_bound.MEDIA_TYPES``: then the input bound prices media)."""
    level: list[Any] = [value]
    depth = 1
    typed = False
    while level:
        if depth > limit:
            return True, typed
        below: list[Any] = []
        for item in level:
            if type(item) is dict:
                if not typed:
                    tag = item.get("type")
                    typed = type(tag) is str and tag in kinds
                children: Iterable[Any] = item.values()
            else:
                children = item
            for child in children:
                kind = type(child)
                if kind is dict or kind is list:
                    below.append(child)
        level = below
        depth += 1
    return False, typed


def splice_top_level(
    raw: bytes,
    changes: Mapping[str, Any],
    parsed: Mapping[str, Any] | None = None,
    spans: Mapping[str, tuple[int, int]] | None = None,
) -> bytes:
    """``raw`` with the given top-level fields replaced (or appended when absent).

    With ``spans`` (each top-level value's span, from ``bodies.analyse``) this is a byte copy and
    nothing else. With ``parsed`` (the decoded ``raw``, or only some of its fields) the spans are
    found by C-level searches (``body_scan.quick_spans``) and each replaced span is checked to
    read back as the value ``parsed`` has. Anything ambiguous falls back to scanning the whole
    body, keyed as a parser reads it: a field written with escapes is replaced, never appended a
    second time.
    """
    if not changes:
        return raw
    if spans is None and parsed is not None:
        spans = quick_spans(raw, parsed)
        if spans is not None and not _read_back(raw, spans, changes, parsed):
            spans = None
    if spans is None:
        spans = scan_object(raw, _ANY_DEPTH).spans()
    edits: list[tuple[int, int, bytes]] = []
    appended: list[bytes] = []
    for key, value in changes.items():
        encoded = orjson.dumps(value)
        span = spans.get(key)
        if span is None:
            appended.append(orjson.dumps(key) + b":" + encoded)
        else:
            edits.append((span[0], span[1], encoded))
    return _edited(raw, edits, appended)


def _read_back(
    raw: bytes, spans: Mapping[str, tuple[int, int]], keys: Iterable[str], parsed: Mapping[str, Any]
) -> bool:
    """Whether each of ``keys`` that ``spans`` has holds exactly its parsed value there. A span
    found from only some of the fields (an offloaded body's control fields) that runs over other
    members does not parse (the parser stops at the first value's end, so this costs that value)."""
    view = memoryview(raw)
    for key in keys:
        span = spans.get(key)
        if span is None:
            continue
        try:
            if orjson.loads(view[span[0] : span[1]]) != parsed.get(key):
                return False
        except orjson.JSONDecodeError:
            return False
    return True


def _edited(raw: bytes, edits: list[tuple[int, int, bytes]], appended: list[bytes]) -> bytes:
    """``raw`` with each span replaced and members appended before the closing brace, built by
    one join (one copy of the body; see ``_gil_free_parts`` for a large one)."""
    view = memoryview(raw)
    parts: list[bytes | memoryview] = []
    done = 0
    for start, end, encoded in sorted(edits):
        parts += (view[done:start], encoded)
        done = end
    if appended:
        close = raw.rfind(b"}")
        inner_end = content_end(raw, done, close)
        opened = raw[inner_end - 1 : inner_end] == b"{"
        parts += (view[done:inner_end], b"" if opened else b",", b",".join(appended), view[close:])
    else:
        parts.append(view[done:])
    if len(raw) > JOIN_IN_PIECES_BYTES:
        return b"".join(_gil_free_parts(parts))
    return b"".join(parts)


def _gil_free_parts(parts: list[bytes | memoryview]) -> list[bytes]:
    """The parts as ``bytes`` of at most ``PIECE_BYTES`` each. ``bytes.join`` releases the GIL
    while it copies only when every part is ``bytes``: joined from views of the body, a 31 MiB
    splice held it for about 27 ms (the loop stalled though the splice ran on a thread). Copied
    piece by piece, the GIL changes hands between pieces, and the final join releases it; the
    price is a second copy of the body, on the thread."""
    pieces: list[bytes] = []
    for part in parts:
        if isinstance(part, bytes):
            pieces.append(part)
            continue
        for start in range(0, len(part), PIECE_BYTES):
            pieces.append(bytes(part[start : start + PIECE_BYTES]))
    return pieces
