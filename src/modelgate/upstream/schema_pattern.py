"""A short deterministic string matching a JSON Schema ``pattern`` (for ``schema_instance``).

The pattern is parsed with Python's own regular-expression parser and walked once: literals as
written, a class's first member (or, negated, a common character outside it), the first branch
of an alternation, each repeat its minimum count (more when a ``minLength`` asks for it), a
group reference its group's text. Anchors
and word boundaries add nothing; lookarounds are not honoured. The text is never matched against
the pattern at run time (a hostile pattern could make that slow); it is simply what the pattern
describes, capped at ``_LIMIT`` characters. ``None`` when the pattern does not parse.
"""

from __future__ import annotations

import importlib
import re
import warnings
from typing import Any

#: ``re._parser``: the standard library's parser, without a public name or type stubs.
_PARSER: Any = importlib.import_module("re._parser")
_LIMIT = 256
#: Tried in order for a negated class or ``NOT_LITERAL``.
_COMMON = "a0A_-. xZ9@#\n"


def pattern_text(pattern: str, min_length: int = 0) -> str | None:
    """The text; repeats run longer (up to their maximum) until it has ``min_length``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # FutureWarning on "[[" and the like
            tree = _PARSER.parse(pattern)
    except (re.error, RecursionError, OverflowError, ValueError, TypeError):
        return None
    text = ""
    for extra in range(min(max(min_length, 1), _LIMIT)):
        out = _Out(extra)
        _emit(tree, out, {})
        longer = "".join(out.parts)[:_LIMIT]
        if extra and len(longer) <= len(text):
            break  # no repeat can grow
        text = longer
        if len(text) >= min_length:
            break
    return text


class _Out:
    """The text so far; ``full`` once it reached ``_LIMIT`` (nested repeats stop at once)."""

    def __init__(self, extra: int) -> None:
        self.parts: list[str] = []
        self.size = 0
        #: Iterations each repeat adds to its minimum (within its maximum).
        self.extra = extra

    def append(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)

    @property
    def full(self) -> bool:
        return self.size >= _LIMIT


def _emit(items: Any, out: _Out, groups: dict[int, str]) -> None:
    for op, av in items:
        if out.full:
            return
        name = str(op)
        if name == "LITERAL":
            out.append(chr(av))
        elif name == "NOT_LITERAL":
            out.append(next(c for c in _COMMON if ord(c) != av))
        elif name == "ANY":
            out.append("a")
        elif name == "IN":
            out.append(_class_member(av))
        elif name == "CATEGORY":
            out.append(_category_member(str(av)))
        elif name == "BRANCH":
            _emit(av[1][0], out, groups)
        elif name == "SUBPATTERN":
            start = len(out.parts)
            _emit(av[3], out, groups)
            if av[0] is not None:
                groups[av[0]] = "".join(out.parts[start:])
        elif name == "ATOMIC_GROUP":
            _emit(av, out, groups)
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            for _ in range(min(av[0] + out.extra, av[1], _LIMIT)):
                if out.full:
                    break
                _emit(av[2], out, groups)
        elif name == "GROUPREF":
            out.append(groups.get(av, ""))
        elif name == "GROUPREF_EXISTS":
            group, yes, no = av
            chosen = yes if group in groups else no
            if chosen is not None:
                _emit(chosen, out, groups)
        # AT (anchors, boundaries), ASSERT and ASSERT_NOT add nothing.


def _class_member(items: Any) -> str:
    negated = bool(items) and str(items[0][0]) == "NEGATE"
    if not negated:
        op, av = items[0]
        name = str(op)
        if name == "LITERAL":
            return chr(av)
        if name == "RANGE":
            return _pick_in_range(av[0], av[1])
        if name == "CATEGORY":
            return _category_member(str(av))
    rest = items[1:] if negated else items
    return next((c for c in _COMMON if _in_class(rest, c) != negated), "a")


def _pick_in_range(low: int, high: int) -> str:
    """The range's first letter or digit when it has one (``[ -~]`` gives ``0``), else its start."""
    for preferred in ("a", "A", "0"):
        if low <= ord(preferred) <= high:
            return preferred
    return chr(low)


def _in_class(items: Any, char: str) -> bool:
    for op, av in items:
        name = str(op)
        if name == "LITERAL" and ord(char) == av:
            return True
        if name == "RANGE" and av[0] <= ord(char) <= av[1]:
            return True
        if name == "CATEGORY" and _in_category(str(av), char):
            return True
    return False


def _in_category(category: str, char: str) -> bool:
    kind = category.removeprefix("CATEGORY_")
    negated = kind.startswith("NOT_")
    kind = kind.removeprefix("NOT_")
    if kind == "DIGIT":
        found = char.isdigit()
    elif kind == "SPACE":
        found = char.isspace()
    elif kind == "WORD":
        found = char.isalnum() or char == "_"
    else:
        found = char in "\r\n"  # LINEBREAK
    return found != negated


def _category_member(category: str) -> str:
    return next((c for c in _COMMON if _in_category(category, c)), "a")
