"""IR answers -> ``GenerateContentResponse`` bodies (whole, and the parts streams reuse), and the
``countTokens`` answer.

One candidate (``candidateCount`` is refused above 1), role ``model``. Thought parts appear only
when the client asked for them (``thinkingConfig.includeThoughts``), as on the real API. Hosted
web searches and the sources text cites become the candidate's ``groundingMetadata``.
"""

from __future__ import annotations

from typing import Any

from modelgate import ir
from modelgate.formats.gemini.parts import signature_wire
from modelgate.formats.gemini.wire import FINISH_REASONS, usage_metadata
from modelgate.formats.jsonutil import Json


def function_call_part(call_id: str, name: str, args: dict[str, Any]) -> Json:
    return {"functionCall": {"id": call_id, "name": name, "args": args}}


def thought_part(text: str, signature: str | None) -> Json:
    part: Json = {"text": text, "thought": True}
    if signature:
        part["thoughtSignature"] = signature_wire(signature)
    return part


class Grounding:
    """The web searches run and the sources cited, gathered for ``groundingMetadata``."""

    __slots__ = ("queries", "sources")

    def __init__(self) -> None:
        self.queries: list[str] = []
        #: url -> title, in order of first mention.
        self.sources: dict[str, str] = {}

    def search(self, query: str, result: ir.WebSearchResult | None) -> None:
        if query:
            self.queries.append(query)
        for source in result.sources if result is not None else []:
            self.cite(source.url, source.title)

    def cite(self, url: str, title: str) -> None:
        if url and (url not in self.sources or not self.sources[url]):
            self.sources[url] = title

    def metadata(self) -> Json | None:
        if not self.queries and not self.sources:
            return None
        out: Json = {}
        if self.queries:
            out["webSearchQueries"] = list(self.queries)
        if self.sources:
            out["groundingChunks"] = [
                {"web": {"uri": url, "title": title} if title else {"uri": url}}
                for url, title in self.sources.items()
            ]
        return out


def candidate(parts: list[Json], finish: ir.StopReason | None, grounding: Grounding | None) -> Json:
    """``candidates[0]``. A candidate always has a part: the SDK's chat sessions drop a turn whose
    content has none from their history."""
    out: Json = {"content": {"role": "model", "parts": parts or [{"text": ""}]}, "index": 0}
    if finish is not None:
        out["finishReason"] = FINISH_REASONS[finish]
    metadata = grounding.metadata() if grounding is not None else None
    if metadata is not None:
        out["groundingMetadata"] = metadata
    return out


def encode_response(resp: ir.Response, *, show_thoughts: bool) -> Json:
    parts: list[Json] = []
    grounding = Grounding()
    for part in resp.content:
        if isinstance(part, ir.TextPart):
            parts.append({"text": part.text})
            for citation in part.citations:
                grounding.cite(citation.url, citation.title)
        elif isinstance(part, ir.ToolUsePart):
            parts.append(function_call_part(part.id, part.name, part.input))
        elif isinstance(part, ir.ThinkingPart):
            if show_thoughts:
                parts.append(thought_part(part.thinking, part.signature))
        elif isinstance(part, ir.WebSearchCallPart):
            grounding.search(part.query, part.result)
        # redacted thinking is opaque to every client but its own upstream's: left out
    return {
        "candidates": [candidate(parts, resp.stop_reason, grounding)],
        "usageMetadata": usage_metadata(resp.usage),
        "modelVersion": resp.model,
        "responseId": resp.id,
    }


def encode_count(total_tokens: int, cached_tokens: int = 0) -> Json:
    """The ``countTokens`` answer."""
    out: Json = {"totalTokens": max(total_tokens, 0)}
    if cached_tokens > 0:
        out["cachedContentTokenCount"] = cached_tokens
    return out
