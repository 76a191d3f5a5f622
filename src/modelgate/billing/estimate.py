"""The one token estimator: a word-and-punctuation tokenizer used everywhere tokens are guessed.

Tokens are ``\\w+`` runs and single symbols. The built-in simulator counts its input and output
with exactly this rule, so for it every estimate below is exact. The upstream's own usage report is
always preferred; estimates are used only where none came:

- ``count_tokens``/``prompt_tokens``: the input of a request (``count_tokens`` answered locally, a
  stream cut before the upstream reported its input);
- ``text_tokens``: a relayed delta's output tokens, for a stream cut before its
  final usage event. Every non-empty delta is at least one token (upstreams emit one or a few
  tokens per delta, never less than one); a delta is worth its pieces when that is more.

For BPE upstreams this is close for English prose (a BPE token is about 0.75 words) and errs low
rather than high for code and languages without spaces, so a cut stream is never billed for more
than it plausibly generated. ``DELTA_ESTIMATOR`` hands the delta rules to the stream taps of
``modelgate.formats``, which do not import billing.
"""

from __future__ import annotations

import re

import orjson

from modelgate import ir

_PIECES = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Tokens in ``text`` (exactly what the simulator counts)."""
    return len(_PIECES.findall(text))


def part_text(part: ir.Part) -> str:
    if isinstance(part, ir.TextPart):
        return part.text
    if isinstance(part, ir.ToolUsePart):
        return part.name + " " + orjson.dumps(part.input).decode()
    if isinstance(part, ir.ToolResultPart):
        return " ".join(p.text for p in part.content if isinstance(p, ir.TextPart))
    if isinstance(part, ir.ThinkingPart):
        return part.thinking
    if isinstance(part, ir.DocumentPart):
        return part.text or ""
    return ""


def prompt_text(req: ir.Request) -> str:
    """All the text of a request that a model reads: system, messages, tool results, tool names,
    descriptions and schemas."""
    pieces = list(req.system)
    for message in req.messages:
        pieces.extend(part_text(p) for p in message.content)
    for tool in req.tools:
        pieces.append(f"{tool.name} {tool.description or ''} {orjson.dumps(tool.input_schema).decode()}")
    return "\n".join(pieces)


def prompt_tokens(req: ir.Request) -> int:
    return count_tokens(prompt_text(req))


def text_tokens(text: str) -> int:
    """Tokens of one delta of text: 0 when empty, otherwise at least 1."""
    if not text:
        return 0
    return max(1, count_tokens(text))


class DeltaEstimator:
    """The delta rules above as an object (``formats.base.TokenEstimator``)."""

    __slots__ = ()

    def text(self, text: str) -> int:
        return text_tokens(text)


DELTA_ESTIMATOR = DeltaEstimator()
