"""Token estimates for streams that end before the upstream reported usage (client disconnects).

The upstream's own usage report is always preferred; these estimates are used only for a stream
cut before its final usage event. One rule everywhere, cheap enough to run on every delta:

- every non-empty delta (text, thinking, tool arguments) is at least one token: upstreams emit
  one or a few tokens per delta, never less than one;
- a delta is worth the number of word-and-punctuation pieces it holds (``\\w+`` runs and single
  symbols), when that is more.

For the built-in simulator, which emits exactly one such piece per delta, the estimate is exact.
For BPE upstreams it is close for English prose (a BPE token is about 0.75 words) and errs low
rather than high for code and languages without spaces, so a cut stream is never billed for more
than it plausibly generated. Input tokens of a cut stream come from the stream's first event
when the upstream put them there (Messages, Responses); otherwise they are counted the same way
over the prompt's text.
"""

from __future__ import annotations

import re

import orjson

_PIECES = re.compile(r"\w+|[^\w\s]")
_ASCII_PIECES = re.compile(rb"\w+|[^\w\s]")


def text_tokens(text: str) -> int:
    """Tokens of one delta of text: 0 when empty, otherwise at least 1."""
    if not text:
        return 0
    return max(1, len(_PIECES.findall(text)))


def escaped_tokens(escaped: bytes) -> int:
    """Tokens of one delta given as the body of a JSON string (escapes still in place).

    The common case (plain ASCII, no escape) is counted on the bytes without decoding.
    """
    if not escaped:
        return 0
    if escaped.isascii() and b"\\" not in escaped:
        return max(1, len(_ASCII_PIECES.findall(escaped)))
    try:
        text = orjson.loads(b'"' + escaped + b'"')
    except orjson.JSONDecodeError:
        text = escaped.decode("utf-8", "replace")
    return text_tokens(text) if isinstance(text, str) else 1


def json_string_body(buf: bytes, start: int) -> bytes:
    """The body of the JSON string that starts at ``buf[start]`` (just after its opening quote),
    escapes kept; empty when the closing quote is missing."""
    pos = start
    while True:
        end = buf.find(b'"', pos)
        if end < 0:
            return b""
        back = end - 1
        while back >= start and buf[back] == 0x5C:
            back -= 1
        if (end - 1 - back) % 2 == 0:
            return buf[start:end]
        pos = end + 1
