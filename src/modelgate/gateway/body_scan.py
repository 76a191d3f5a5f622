"""One pass over a JSON object's bytes: its top-level members with their value spans, and its
nesting depth (``scan_object``).

The pass replaces three full scans a body used to get (the depth walk over the parsed value, the
duplicate-key tokeniser and the splice's own search): it steps from one bracket to the next with
a single C-level regex match per step (strings, with their escapes, and everything else that is
not a bracket are skipped inside that match), so its Python work grows with the number of
brackets, not of bytes or strings. Top-level members come out in document order, duplicates
included, keyed as a parser reads them (``\\u006dodel`` is ``model``), so a control field cannot
hide behind an escape or a second spelling.

The input must already be a valid JSON object (the caller parses it first): the pass checks
nothing a parser checks, and stops as soon as the nesting passes the limit.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

_WS = re.compile(rb"[ \t\n\r]*")
# A JSON string, escapes included (unrolled so the engine never backtracks per character).
_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"', re.DOTALL)
# Everything up to the next bracket outside a string.
_TO_BRACKET = re.compile(rb'[^"\[\]{}]*+(?:"[^"\\]*+(?:\\.[^"\\]*+)*+"[^"\[\]{}]*+)*+', re.DOTALL)
_SCALAR_END = re.compile(rb"[\s,}\]]")
_COLON = re.compile(rb"[ \t\n\r]*:[ \t\n\r]*")
# An escape of a printable ASCII character: the only way to respell an ASCII key.
_ESCAPED_ASCII = re.compile(rb"\\u00[2-7][0-9a-fA-F]")
#: Bodies with more top-level keys than this are left to ``scan_object`` (no real request has
#: that many; a hostile one must not make a regex of thousands of alternatives compile).
QUICK_KEYS = 64
_WHITESPACE = frozenset(b" \t\n\r")
_OPEN = frozenset(b"{[")
_CLOSE = frozenset(b"}]")


@dataclass(slots=True)
class Layout:
    """What ``scan_object`` found in one body."""

    #: Whether the body nests containers more than the limit deep (the root object is level 1).
    too_deep: bool = False
    #: Top-level keys as a parser reads them, with their values' byte spans, in document order.
    members: list[tuple[str, tuple[int, int]]] = field(default_factory=list)

    def spans(self) -> dict[str, tuple[int, int]]:
        """Each top-level key's value span; the last one wins, as with the parser."""
        return dict(self.members)

    def duplicated(self, keys: frozenset[str]) -> str | None:
        """The first of ``keys`` the object holds more than once at the top level."""
        seen: set[str] = set()
        for key, _ in self.members:
            if key in seen and key in keys:
                return key
            seen.add(key)
        return None


def scan_object(raw: bytes, max_depth: int) -> Layout:
    """The layout of the JSON object in ``raw`` (valid JSON, already parsed by the caller)."""
    layout = Layout()
    pos = _after_ws(raw, 0) + 1  # past the opening brace
    pos = _after_ws(raw, pos)
    if raw[pos] == 0x7D:  # "}": an empty object
        return layout
    if max_depth < 1:
        layout.too_deep = True
        return layout
    members = layout.members
    while True:
        key = _STRING.match(raw, pos)
        assert key is not None, "scan_object reads valid JSON only"
        pos = _after_ws(raw, key.end()) + 1  # past the colon
        start = _after_ws(raw, pos)
        lead = raw[start]
        if lead == 0x22:  # a string value
            value = _STRING.match(raw, start)
            assert value is not None
            end = value.end()
        elif lead in _OPEN:
            end = _skip_container(raw, start, max_depth - 1)
            if end < 0:
                layout.too_deep = True
                return layout
        else:
            scalar = _SCALAR_END.search(raw, start)
            end = scalar.start() if scalar is not None else len(raw)
        members.append((decoded_key(raw[key.start() + 1 : key.end() - 1]), (start, end)))
        pos = _after_ws(raw, end)
        if raw[pos] != 0x2C:  # not ",": the closing brace
            return layout
        pos = _after_ws(raw, pos + 1)


def decoded_key(written: bytes) -> str:
    """A key as ``top_level_members`` gives it (``\\u006dodel``), as a parser reads it (``model``)."""
    if b"\\" not in written:
        return written.decode("utf-8", "surrogateescape")
    try:
        key = orjson.loads(b'"' + written + b'"')
    except orjson.JSONDecodeError:
        return written.decode("utf-8", "surrogateescape")
    return key if isinstance(key, str) else ""


def respellable(raw: bytes, keys: Iterable[str]) -> bool:
    """Whether one of ``keys`` could be written in ``raw`` in another spelling (an escape).
    Escaped control characters (terminal output's ``\\u001b``) cannot be part of such a key."""
    return not all(k.isascii() for k in keys) or _ESCAPED_ASCII.search(raw) is not None


def quick_spans(raw: bytes, parsed: Mapping[str, Any]) -> dict[str, tuple[int, int]] | None:
    """Each top-level value's span found by C-level work alone, when that is unambiguous; None
    when it is not (``scan_object`` decides then).

    One regex pass finds every occurrence of the top-level keys of ``parsed`` (the decoded
    ``raw``) written as keys the way a serialiser writes them (``"key":``), another any escape of
    a printable ASCII character (the only way to respell such a key, with ``\\/`` for a slash):

    - no such escape and every key written exactly once as a key in the whole body: each
      occurrence is the member itself (a parser saw the key, and an escape-free ``"key"`` inside
      a string is impossible: its quotes would be escaped), no key is duplicated, and each value
      runs from its key's colon to the comma before the next key;
    - otherwise (a ``thinking`` block below a top-level ``thinking``, a tool parameter called
      ``model``, an escaped ``<`` in a text): ``_members`` picks one occurrence per key and proves
      the choice by parsing the values between them."""
    if len(parsed) > QUICK_KEYS:
        return None  # left to the scan: a hostile body must not compile a regex of thousands
    if not parsed:
        return {}
    keys = _key_set(tuple(parsed))
    if keys is None:
        return None  # a key that is not ASCII, or has a quote or a control character: the scan
    tokens, occurrences, slashed = keys
    found: list[tuple[int, str, int]] = []
    for match in occurrences.finditer(raw):
        colon = _COLON.match(raw, match.end())
        if colon is not None:  # else a string value that reads like a key
            found.append((match.start(), tokens[match.group()], colon.end()))
    once = len(found) == len(tokens) and len({key for _, key, _ in found}) == len(tokens)
    if slashed or not once or _ESCAPED_ASCII.search(raw) is not None:
        return _members(raw, list(parsed), found)
    return _spans_between(raw, found)


def canonical_spans(raw: bytes, parsed: Mapping[str, Any]) -> dict[str, tuple[int, int]] | None:
    """Each top-level value's span when ``raw`` is written member by member as the serialiser
    writes ``parsed`` (its decoded value) back, whitespace between the top-level tokens allowed;
    None otherwise (``quick_spans`` decides then).

    Coding agents send compact JSON that ``orjson`` writes back byte for byte, so this usually
    holds, and then costs a serialisation of the values (about half a parse) and one comparison
    per member, against the two regex passes over every byte that ``quick_spans`` needs. The
    proof: the bytes are read from the opening brace as ``{key:value,...}``, where each key and
    value must be exactly the serialiser's output for the next member of ``parsed`` in order.
    Each of those is a complete JSON value, whose end is fixed by its start (a number must be
    followed by a comma or the closing brace), so the object is exactly these members: each key
    written once, plainly (no escape can respell it), and each span exact."""
    view = _Cursor(raw)
    if not view.take(b"{"):
        return None
    spans: dict[str, tuple[int, int]] = {}
    for index, (key, value) in enumerate(parsed.items()):
        if index and not view.take(b","):
            return None
        if not view.take(orjson.dumps(key)) or not view.take(b":"):
            return None
        try:
            encoded = orjson.dumps(value)
        except orjson.JSONEncodeError:  # nested beyond what the serialiser writes: left to the others
            return None
        start = view.pos
        if not view.take(encoded):
            return None
        spans[key] = (start, start + len(encoded))
    if not view.take(b"}") or view.pos != len(raw):
        return None
    return spans


class _Cursor:
    """A position in a body that advances over exact bytes and the whitespace after them."""

    __slots__ = ("pos", "raw")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.pos = _after_ws(raw, 0)

    def take(self, token: bytes) -> bool:
        """Advance past ``token`` and the whitespace after it when it is written here."""
        if not self.raw.startswith(token, self.pos):
            return False
        self.pos = _after_ws(self.raw, self.pos + len(token))
        return True


def _spans_between(raw: bytes, members: list[tuple[int, str, int]]) -> dict[str, tuple[int, int]] | None:
    """The value spans of ``members`` (key start, key, value start), each the top-level member
    after the one before: a value runs to the comma before the next key."""
    spans: dict[str, tuple[int, int]] = {}
    close = raw.rfind(b"}")
    for index, (_, key, start) in enumerate(members):
        last = index + 1 == len(members)
        end = content_end(raw, start, close if last else members[index + 1][0])
        if not last:
            if raw[end - 1 : end] != b",":
                return None
            end = content_end(raw, start, end - 1)
        spans[key] = (start, end)
    return spans


def _members(
    raw: bytes, keys: list[str], found: list[tuple[int, str, int]]
) -> dict[str, tuple[int, int]] | None:
    """The top-level members when some keys are also written inside values: for each key in
    document order (``keys``, as the parser gives them), the last occurrence before the next
    key's; the first key must open the object. The choice is proved by parsing each value between
    them on its own (C-level, about one parse of the body): if every one is a complete JSON value
    and only commas and whitespace lie between them, the object is exactly these members (a JSON
    value's end is fixed by its start), so none is nested, duplicated or spelled another way.
    None when the proof fails."""
    if not keys:
        return {}
    hits: dict[str, list[tuple[int, str, int]]] = {}
    for hit in found:  # in document order
        hits.setdefault(hit[1], []).append(hit)
    chosen: list[tuple[int, str, int]] = []
    limit = len(raw)
    for key in reversed(keys):
        mine = hits.get(key, [])
        index = bisect.bisect_left(mine, limit, key=lambda hit: hit[0]) - 1
        if index < 0:
            return None
        chosen.append(mine[index])
        limit = mine[index][0]
    chosen.reverse()
    if chosen[0][0] != _after_ws(raw, _after_ws(raw, 0) + 1):
        return None  # the first key does not open the object
    spans = _spans_between(raw, chosen)
    if spans is None:
        return None
    view = memoryview(raw)
    for start, end in spans.values():
        try:
            orjson.loads(view[start:end])
        except orjson.JSONDecodeError:
            return None
    return spans


@functools.lru_cache(maxsize=256)
def _key_set(keys: tuple[str, ...]) -> tuple[dict[bytes, str], re.Pattern[bytes], bool] | None:
    """What ``quick_spans`` needs of a body's top-level keys, cached per key set (clients send
    the same few): each key as the serialiser writes it, the pattern finding any of them, and
    whether one has a slash (JSON may also write it ``\\/``: proved by parsing, ``_members``).
    None when a key is not ASCII or is written with an escape (a quote, a control character)."""
    if not all(key.isascii() for key in keys):
        return None
    tokens = {orjson.dumps(key): key for key in keys}
    if any(b"\\" in token for token in tokens):
        return None
    return tokens, _occurrences(tokens), any(b"/" in token for token in tokens)


def _occurrences(tokens: Iterable[bytes]) -> re.Pattern[bytes]:
    """Any of ``tokens``: one plain alternation (no groups, which would cost the engine its fast
    scan for the common first character; an escape's alternative there made the pass 20 times
    slower). Compiled once per key set (``_key_set`` is cached)."""
    return re.compile(b"|".join(re.escape(token) for token in tokens))


def content_end(raw: bytes, start: int, end: int) -> int:
    """Where the whitespace before ``end`` begins (looked for in a small window first, so the
    usual case copies nothing large)."""
    if end <= start or raw[end - 1] not in _WHITESPACE:
        return max(start, end)  # compact JSON: nothing to skip
    window = max(start, end - 4096)
    kept = raw[window:end].rstrip()
    if kept or window == start:
        return window + len(kept)
    return start + len(raw[start:end].rstrip())


def _after_ws(raw: bytes, pos: int) -> int:
    match = _WS.match(raw, pos)  # always matches (possibly nothing)
    return match.end() if match is not None else pos


def _skip_container(raw: bytes, pos: int, levels: int) -> int:
    """The end of the array or object opening at ``pos``, or -1 when it nests more than
    ``levels`` levels (itself included)."""
    depth = 0
    match_to_bracket = _TO_BRACKET.match
    while True:
        bracket = raw[pos]
        if bracket in _OPEN:
            depth += 1
            if depth > levels:
                return -1
        else:
            depth -= 1
            if depth == 0:
                return pos + 1
        pos = match_to_bracket(raw, pos + 1).end()  # type: ignore[union-attr]
