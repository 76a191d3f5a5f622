"""IR events -> Responses SSE for the client (docs/reference/wire-formats.md §3.6, §4.6).

Invariants of every stream written here:
- each event has an ``event:`` line and a JSON ``type`` equal to it, plus a ``sequence_number``
  that starts at 0 and grows by exactly 1 over the stream (SSE comments consume none);
- ``output_index`` counts *emitted* output items, so dropped blocks (redacted or empty thinking)
  leave no gap;
- exactly one terminal event: ``response.completed``, ``response.incomplete`` or ``response.failed``
  (the last preceded by an ``error`` event, see ``wire.failure_events``).
"""

from __future__ import annotations

import time

import orjson

from modelgate import ir
from modelgate.formats import ids, sse
from modelgate.formats.jsonutil import Json
from modelgate.formats.responses import hosted
from modelgate.formats.responses.wire import (
    Namespaces,
    failed_error,
    failure_events,
    function_call_item,
    message_item,
    new_reasoning_item_id,
    reasoning_item,
    request_echo,
    response_object,
    status_for,
    url_citation,
)


class _OpenItem:
    __slots__ = ("block", "call_id", "citations", "item_id", "kind", "name", "output_index", "parts")

    def __init__(self, block: int, kind: str, item_id: str, output_index: int) -> None:
        self.block = block
        self.kind = kind
        self.item_id = item_id
        #: -1 until the item is emitted (thinking items are emitted on their first text).
        self.output_index = output_index
        self.parts: list[str] = []
        #: Text items: the sources the text cites (annotated over the whole text when it ends).
        self.citations: list[ir.Citation] = []
        self.call_id = ""
        self.name = ""


class StreamEncoder:
    """IR events -> Responses SSE bytes.

    Thinking blocks become ``reasoning`` items whose summary is the thinking text; the item is
    emitted lazily on the first non-empty thinking delta, so empty and redacted thinking produce
    no item. A web search becomes one ``web_search_call`` item: added (``in_progress``) when its
    call block starts, ``searching`` when the call block ends, ``completed`` and done with its
    result block (or at the next item or the end, when no result came). The response ``model``
    is ``request.model`` when a request is given, else ``Start.model``. Usage always travels in
    the terminal response object, as on the real API.
    """

    def __init__(
        self,
        request: ir.Request | None = None,
        *,
        namespaces: Namespaces | None = None,
        created_at: int | None = None,
    ) -> None:
        self._request = request
        self._echo = request_echo(request)
        self._namespaces = namespaces
        self._created_at = int(time.time()) if created_at is None else created_at
        self._seq = 0
        self._id = ""
        self._model = request.model if request is not None else ""
        self._started = False
        self._done = False
        self._output: list[Json] = []
        self._open: _OpenItem | None = None
        #: A web search whose call ended and whose result has not come yet.
        self._searching: _OpenItem | None = None
        #: The final response object, once ``Finish`` was encoded.
        self.completed: Json | None = None

    def ping(self) -> bytes:
        return b": ping\n\n"

    def encode(self, event: ir.Event) -> bytes:
        if self._done:
            return b""
        out = b"" if self._started or isinstance(event, ir.Start) else self._start(None, None)
        if isinstance(event, ir.TextDelta | ir.ToolArgsDelta | ir.ThinkingDelta):
            return out + self._delta(event)
        if isinstance(event, ir.CitationDelta):
            if self._open is not None and self._open.block == event.index and self._open.kind == "text":
                self._open.citations.append(event.citation)
            return out
        if isinstance(event, ir.Start):
            return self._start(event.id, event.model) if not self._started else b""
        if isinstance(event, ir.BlockStart):
            if event.kind == "web_search_result":
                return out + self._close() + self._search_done(event)
            return out + self._close() + self._search_done(None) + self._block_start(event)
        if isinstance(event, ir.BlockStop):
            return out + (self._close() if self._open and self._open.block == event.index else b"")
        if isinstance(event, ir.Finish):
            return out + self._close() + self._search_done(None) + self._finish(event)
        if isinstance(event, ir.StreamError):
            self._done = True
            self._searching = None
            response = self._response("failed", None, None, failed_error(event.kind, event.message))
            frames = failure_events(self._seq, event.kind, event.message, response)
            self._seq += 2
            return out + frames
        return out  # SignatureDelta: nothing to say on this wire.

    def _emit(self, kind: str, payload: Json) -> bytes:
        data = {"type": kind, "sequence_number": self._seq, **payload}
        self._seq += 1
        return sse.frame(orjson.dumps(data), kind)

    def _response(
        self, status: str, usage: ir.Usage | None, details: Json | None = None, error: Json | None = None
    ) -> Json:
        return response_object(
            response_id=self._id,
            model=self._model,
            created_at=self._created_at,
            status=status,
            output=list(self._output),
            echo=self._echo,
            usage=usage,
            incomplete_details=details,
            error=error,
        )

    def _start(self, response_id: str | None, model: str | None) -> bytes:
        self._started = True
        # Start.id from another dialect's decoder is e.g. chatcmpl-…; a Responses id is resp_….
        self._id = response_id if response_id and response_id.startswith("resp_") else ids.new_response_id()
        # The client-facing id (request.model) wins over the upstream's: upstream ids never leak.
        self._model = self._model or model or ""
        snapshot = self._response("in_progress", None)
        return self._emit("response.created", {"response": snapshot}) + self._emit(
            "response.in_progress", {"response": snapshot}
        )

    def _block_start(self, event: ir.BlockStart) -> bytes:
        index = len(self._output)
        if event.kind == "text":
            item = _OpenItem(event.index, "text", ids.new_output_message_id(), index)
            self._open = item
            added = self._emit(
                "response.output_item.added",
                {"output_index": index, "item": message_item(item.item_id, None, "in_progress")},
            )
            part = {"item_id": item.item_id, "output_index": index, "content_index": 0}
            return added + self._emit(
                "response.content_part.added",
                {**part, "part": {"type": "output_text", "text": "", "annotations": []}},
            )
        if event.kind == "tool_use":
            item = _OpenItem(event.index, "tool", ids.new_function_call_item_id(), index)
            item.call_id = event.tool_id or ids.new_call_id()
            item.name = event.tool_name or ""
            self._open = item
            wire = function_call_item(
                item.item_id, item.call_id, item.name, "", "in_progress", self._namespaces
            )
            return self._emit("response.output_item.added", {"output_index": index, "item": wire})
        if event.kind == "thinking":
            self._open = _OpenItem(event.index, "thinking", new_reasoning_item_id(), -1)
        if event.kind == "web_search":
            item = _OpenItem(event.index, "search", event.tool_id or ids.new_call_id(), index)
            self._open = item
            wire = hosted.web_search_call_item(ir.WebSearchCallPart(item.item_id), "in_progress")
            wire["action"] = {"type": "search"}
            ref = {"output_index": index, "item_id": item.item_id}
            added = self._emit("response.output_item.added", {"output_index": index, "item": wire})
            return added + self._emit("response.web_search_call.in_progress", ref)
        return b""  # redacted_thinking: opaque, nothing a Responses client can show.

    def _search_done(self, result: ir.BlockStart | None) -> bytes:
        """Completes the pending web search with its result block (``result``), or without one."""
        item = self._searching
        if item is None or (result is not None and result.tool_id != item.item_id):
            return b""
        self._searching = None
        query = hosted.search_query("".join(item.parts))
        part = ir.WebSearchCallPart(item.item_id, query, result.result if result is not None else None)
        done = hosted.web_search_call_item(part)
        self._output.append(done)
        ref = {"output_index": item.output_index, "item_id": item.item_id}
        out = self._emit("response.web_search_call.completed", ref)
        return out + self._emit(
            "response.output_item.done", {"output_index": item.output_index, "item": done}
        )

    def _delta(self, event: ir.TextDelta | ir.ToolArgsDelta | ir.ThinkingDelta) -> bytes:
        item = self._open
        if item is None or item.block != event.index:
            return b""
        if isinstance(event, ir.TextDelta):
            if not event.text:
                return b""
            item.parts.append(event.text)
            return self._emit(
                "response.output_text.delta",
                {
                    "item_id": item.item_id,
                    "output_index": item.output_index,
                    "content_index": 0,
                    "delta": event.text,
                    "logprobs": [],
                },
            )
        if isinstance(event, ir.ToolArgsDelta) and item.kind == "search":
            item.parts.append(event.partial_json)  # the query, told when the search completes
            return b""
        if isinstance(event, ir.ToolArgsDelta):
            if not event.partial_json:
                return b""  # Messages upstreams open with an empty input_json_delta
            item.parts.append(event.partial_json)
            return self._emit(
                "response.function_call_arguments.delta",
                {"item_id": item.item_id, "output_index": item.output_index, "delta": event.partial_json},
            )
        if item.kind != "thinking" or not event.thinking:
            return b""
        out = b""
        if item.output_index < 0:
            item.output_index = len(self._output)
            out = self._emit(
                "response.output_item.added",
                {"output_index": item.output_index, "item": reasoning_item(item.item_id, None)},
            )
            out += self._emit(
                "response.reasoning_summary_part.added",
                {**self._summary_ref(item), "part": {"type": "summary_text", "text": ""}},
            )
        item.parts.append(event.thinking)
        return out + self._emit(
            "response.reasoning_summary_text.delta", {**self._summary_ref(item), "delta": event.thinking}
        )

    @staticmethod
    def _summary_ref(item: _OpenItem) -> Json:
        return {"item_id": item.item_id, "output_index": item.output_index, "summary_index": 0}

    def _close(self) -> bytes:
        item, self._open = self._open, None
        if item is None or item.output_index < 0:
            return b""
        if item.kind == "search":
            self._searching = item  # done when its result comes
            ref = {"output_index": item.output_index, "item_id": item.item_id}
            return self._emit("response.web_search_call.searching", ref)
        text = "".join(item.parts)
        ref = {"item_id": item.item_id, "output_index": item.output_index}
        if item.kind == "text":
            annotations = [url_citation(c, 0, len(text)) for c in item.citations]
            done = message_item(item.item_id, text, annotations=annotations)
            out = b""
            for n, annotation in enumerate(annotations):
                out += self._emit(
                    "response.output_text.annotation.added",
                    {**ref, "content_index": 0, "annotation_index": n, "annotation": annotation},
                )
            out += self._emit(
                "response.output_text.done", {**ref, "content_index": 0, "text": text, "logprobs": []}
            )
            part = {"type": "output_text", "text": text, "annotations": annotations}
            out += self._emit("response.content_part.done", {**ref, "content_index": 0, "part": part})
        elif item.kind == "tool":
            # An empty argument stream means "no arguments" (Messages semantics): send "{}".
            text = text or "{}"
            done = function_call_item(
                item.item_id, item.call_id, item.name, text, "completed", self._namespaces
            )
            out = self._emit(
                "response.function_call_arguments.done", {**ref, "name": done["name"], "arguments": text}
            )
        else:
            done = reasoning_item(item.item_id, text)
            summary = self._summary_ref(item)
            out = self._emit("response.reasoning_summary_text.done", {**summary, "text": text})
            out += self._emit(
                "response.reasoning_summary_part.done",
                {**summary, "part": {"type": "summary_text", "text": text}},
            )
        self._output.append(done)
        return out + self._emit(
            "response.output_item.done", {"output_index": item.output_index, "item": done}
        )

    def _finish(self, event: ir.Finish) -> bytes:
        self._done = True
        status, details = status_for(event.stop_reason)
        kind = "response.completed" if status == "completed" else "response.incomplete"
        self.completed = self._response(status, event.usage, details)
        return self._emit(kind, {"response": self.completed})
