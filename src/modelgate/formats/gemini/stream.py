"""IR events -> ``streamGenerateContent?alt=sse``: one ``data: {GenerateContentResponse}`` event
per chunk, no event names, no end marker (the stream ends with the chunk that has a
``finishReason``).

Text and thought deltas are sent as they come. A function call arrives whole in one chunk, as
Gemini sends them: its argument deltas are buffered until its block stops. The last chunk carries
the finish reason, the usage and the grounding of hosted searches. A ``StreamError`` becomes an
``{"error": {...}}`` chunk (the SDK raises ``APIError`` on it) and nothing follows it.
"""

from __future__ import annotations

import orjson

from modelgate import ir
from modelgate.formats.gemini import response
from modelgate.formats.gemini.wire import kind_error_object, usage_metadata
from modelgate.formats.jsonutil import Json


class StreamEncoder:
    __slots__ = (
        "_args",
        "_done",
        "_grounding",
        "_head",
        "_kind",
        "_show_thoughts",
        "_signature",
        "_tool_id",
        "_tool_name",
    )
    #: Gemini answers cannot be fetched again: nothing to keep.
    completed: Json | None = None

    def __init__(self, *, show_thoughts: bool) -> None:
        self._show_thoughts = show_thoughts
        self._head: Json = {}
        self._grounding = response.Grounding()
        self._kind: str | None = None
        self._tool_id = ""
        self._tool_name = ""
        self._args: list[str] = []
        self._signature = ""
        self._done = False

    def _chunk(self, parts: list[Json], finish: ir.Finish | None = None) -> bytes:
        grounding = self._grounding if finish is not None else None
        stop = finish.stop_reason if finish is not None else None
        body: Json = {"candidates": [response.candidate(parts, stop, grounding)]}
        if finish is not None:
            body["usageMetadata"] = usage_metadata(finish.usage)
        body.update(self._head)
        return b"data: " + orjson.dumps(body) + b"\n\n"

    def encode(self, event: ir.Event) -> bytes:
        if self._done:
            return b""
        if isinstance(event, ir.TextDelta):
            return self._chunk([{"text": event.text}]) if event.text else b""
        if isinstance(event, ir.ThinkingDelta):
            if not self._show_thoughts or not event.thinking:
                return b""
            return self._chunk([{"text": event.thinking, "thought": True}])
        if isinstance(event, ir.ToolArgsDelta):
            self._args.append(event.partial_json)
            return b""
        if isinstance(event, ir.SignatureDelta):
            self._signature += event.signature
            return b""
        if isinstance(event, ir.CitationDelta):
            self._grounding.cite(event.citation.url, event.citation.title)
            return b""
        if isinstance(event, ir.BlockStart):
            return self._start(event)
        if isinstance(event, ir.BlockStop):
            return self._stop()
        if isinstance(event, ir.Start):
            self._head = {"modelVersion": event.model, "responseId": event.id}
            return b""
        if isinstance(event, ir.Finish):
            self._done = True
            return self._chunk([], event)
        self._done = True  # ir.StreamError
        return b"data: " + orjson.dumps(kind_error_object(event.kind, event.message)) + b"\n\n"

    def _start(self, event: ir.BlockStart) -> bytes:
        self._kind = event.kind
        self._tool_id = event.tool_id or ""
        self._tool_name = event.tool_name or ""
        self._args = []
        self._signature = ""
        if event.kind == "web_search_result":
            self._grounding.search("", event.result)
        return b""

    def _stop(self) -> bytes:
        kind, self._kind = self._kind, None
        if kind == "tool_use":
            return self._chunk([response.function_call_part(self._tool_id, self._tool_name, self._input())])
        if kind == "web_search":
            query = self._input().get("query")
            self._grounding.search(query if isinstance(query, str) else "", None)
        elif kind == "thinking" and self._signature and self._show_thoughts:
            return self._chunk([response.thought_part("", self._signature)])
        return b""

    def _input(self) -> dict[str, object]:
        return ir.tool_input("".join(self._args))

    def ping(self) -> bytes:
        """A blank line: a no-op for SSE parsers. Not an SSE comment: the google-genai SDK reads
        any line that does not start with ``data: `` as JSON."""
        return b"\n"
