"""The internal representation every wire format translates through.

Plain typed values only: no wire format imports another, each one decodes into these types and
encodes out of them. Same-dialect traffic never builds these (it is relayed as bytes); they exist
for translation and for the built-in simulator.

Invariants:
- Token counts are integers >= 0. ``Usage.input_tokens`` excludes cache reads and writes, as in
  the Messages format; ``Usage.total_input`` adds them back.
- Tool-call ids are kept verbatim across formats (``toolu_...``, ``call_...``): the same string is
  the Messages ``tool_use.id``, the Chat ``tool_calls[].id`` and the Responses ``call_id``.
- Tool-call ``input`` is always a JSON object (a ``dict``); the Chat/Responses ``arguments``
  string is parsed on the way in and dumped on the way out.
- A stream is ``Start, (BlockStart, Delta*, BlockStop)*, Finish`` or ends early with ``StreamError``.
  Block indexes count from 0 in the order blocks start; only one block is open at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

import orjson


class StopReason(StrEnum):
    """Why generation ended; the Messages vocabulary, mapped per format (docs/reference/wire-formats.md §4.7)."""

    END_TURN = "end_turn"
    MAX_TOKENS = "max_tokens"
    STOP_SEQUENCE = "stop_sequence"
    TOOL_USE = "tool_use"
    PAUSE_TURN = "pause_turn"
    REFUSAL = "refusal"
    CONTEXT_WINDOW = "model_context_window_exceeded"


@dataclass(slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    reasoning_tokens: int = 0
    #: The part of ``cache_creation_input_tokens`` written to the 1-hour cache (priced at
    #: ``cache_write_1h``); always <= ``cache_creation_input_tokens``.
    cache_write_1h_input_tokens: int = 0
    #: Server-side web searches the provider ran (and charges per request), not tokens.
    web_search_requests: int = 0

    @property
    def total_input(self) -> int:
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


# ---------------------------------------------------------------------------------------------
# Request side
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Citation:
    """A web source a text part cites (Messages ``web_search_result_location``, Responses
    ``url_citation``): the whole part cites it."""

    url: str
    title: str = ""


@dataclass(slots=True)
class TextPart:
    text: str
    type: Literal["text"] = "text"
    #: Output only: the web sources the text cites (a hosted web search's results).
    citations: list[Citation] = field(default_factory=list)


@dataclass(slots=True)
class ImagePart:
    """An image either inline (``data`` base64 with ``media_type``) or by ``url``."""

    media_type: str | None = None
    data: str | None = None
    url: str | None = None
    type: Literal["image"] = "image"


@dataclass(slots=True)
class DocumentPart:
    """A document: base64 PDF (``media_type`` + ``data``), plain text (``text``) or ``url``."""

    media_type: str | None = None
    data: str | None = None
    text: str | None = None
    url: str | None = None
    filename: str | None = None
    type: Literal["document"] = "document"


@dataclass(slots=True)
class ToolUsePart:
    id: str
    name: str
    input: dict[str, Any]
    type: Literal["tool_use"] = "tool_use"


def tool_input(arguments: Any) -> dict[str, Any]:
    """An OpenAI-style ``arguments`` JSON string as the IR's tool input object.

    Empty or absent arguments are ``{}``; text that is not a JSON object is kept verbatim under
    ``_raw`` so nothing the model produced is lost.
    """
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {"_raw": arguments}
    return value if isinstance(value, dict) else {"_raw": arguments}


@dataclass(slots=True)
class ToolResultPart:
    tool_use_id: str
    content: list[TextPart | ImagePart] = field(default_factory=list)
    is_error: bool = False
    type: Literal["tool_result"] = "tool_result"


@dataclass(slots=True)
class ThinkingPart:
    thinking: str
    signature: str | None = None
    type: Literal["thinking"] = "thinking"


@dataclass(slots=True)
class RedactedThinkingPart:
    data: str
    type: Literal["redacted_thinking"] = "redacted_thinking"


Part = (
    TextPart | ImagePart | DocumentPart | ToolUsePart | ToolResultPart | ThinkingPart | RedactedThinkingPart
)


@dataclass(slots=True)
class Message:
    """One conversation turn. ``system`` turns appear only mid-conversation (Claude Code)."""

    role: Literal["user", "assistant", "system"]
    content: list[Part]


@dataclass(slots=True)
class Tool:
    name: str
    description: str | None = None
    input_schema: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


@dataclass(slots=True)
class ToolChoice:
    """``auto`` | ``any`` (Chat ``required``) | ``none`` | ``tool`` (with ``name``).

    ``hosted``: the forced tool is a hosted tool, named here as the client's format spells its
    type (``web_search_preview``, ``web_search_20250305``, ``file_search``); ``name`` is then
    ``WEB_SEARCH_NAME`` for a web search and None for hosted tools the IR does not carry.
    """

    type: Literal["auto", "any", "none", "tool"] = "auto"
    name: str | None = None
    disable_parallel: bool = False
    hosted: str | None = None


#: The name a hosted web search goes by in a tool choice and in Messages ``server_tool_use``.
WEB_SEARCH_NAME = "web_search"


@dataclass(slots=True)
class WebSearchTool:
    """A hosted web search the client offered (Responses ``web_search``/``web_search_preview``,
    Messages ``web_search_2025…`` server tool); ``client_type`` is its type as the client sent it.
    ``user_location`` is ``{"type": "approximate", "city"?, "region"?, "country"?, "timezone"?}``."""

    client_type: str
    max_uses: int | None = None
    allowed_domains: list[str] | None = None
    blocked_domains: list[str] | None = None
    user_location: dict[str, str] | None = None


@dataclass(slots=True)
class Request:
    model: str
    messages: list[Message]
    max_tokens: int | None = None
    system: list[str] = field(default_factory=list)
    stream: bool = False
    tools: list[Tool] = field(default_factory=list)
    tool_choice: ToolChoice | None = None
    stop_sequences: list[str] = field(default_factory=list)
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    user: str | None = None
    reasoning_effort: str | None = None
    #: ``{"type": "json_schema", "name": ..., "schema": {...}}`` or ``{"type": "json_object"}``.
    response_format: dict[str, Any] | None = None
    #: The client asked for usage in the stream (Chat ``stream_options.include_usage``).
    include_usage: bool = False
    #: Flattened tool name -> (namespace, name) for tools a Responses client grouped in
    #: namespaces; its encoders give calls back under the original namespace and name.
    tool_namespaces: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: The hosted web search the client offered, for dialects that can run one.
    web_search: WebSearchTool | None = None
    #: Types (as the client spelled them) of the other hosted tools it offered, which no other
    #: dialect can run: dropped or refused when translating (``gateway.translate``).
    hosted_tools: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Response side
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class WebSearchSource:
    url: str
    title: str = ""
    #: Messages only: the opaque content a client replays to the same upstream ("" elsewhere).
    encrypted_content: str = ""
    page_age: str | None = None


@dataclass(slots=True)
class WebSearchResult:
    sources: list[WebSearchSource] = field(default_factory=list)
    #: The upstream's error code when the search failed (Messages ``max_uses_exceeded``, …).
    error: str | None = None


@dataclass(slots=True)
class WebSearchCallPart:
    """A hosted web search the upstream ran: Messages ``server_tool_use`` + its
    ``web_search_tool_result``, Responses ``web_search_call``. ``result`` is None while (or when)
    no result came. The id is kept verbatim across formats, like tool-call ids."""

    id: str
    query: str = ""
    result: WebSearchResult | None = None
    type: Literal["web_search_call"] = "web_search_call"


OutputPart = TextPart | ToolUsePart | ThinkingPart | RedactedThinkingPart | WebSearchCallPart


@dataclass(slots=True)
class Response:
    id: str
    model: str
    content: list[OutputPart]
    stop_reason: StopReason
    usage: Usage
    stop_sequence: str | None = None


# ---------------------------------------------------------------------------------------------
# Stream events
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Start:
    id: str
    model: str
    usage: Usage


@dataclass(slots=True)
class BlockStart:
    """``web_search`` is a hosted search call (``tool_id``; its query arrives as ``ToolArgsDelta``
    JSON ``{"query": …}``); ``web_search_result`` carries the search's ``result`` whole (no
    deltas) for the call ``tool_id`` and follows that call's block."""

    index: int
    kind: Literal["text", "tool_use", "thinking", "redacted_thinking", "web_search", "web_search_result"]
    tool_id: str | None = None
    tool_name: str | None = None
    #: For ``redacted_thinking`` only: the opaque data, which has no deltas.
    data: str | None = None
    result: WebSearchResult | None = None


@dataclass(slots=True)
class TextDelta:
    index: int
    text: str


@dataclass(slots=True)
class ToolArgsDelta:
    index: int
    partial_json: str


@dataclass(slots=True)
class ThinkingDelta:
    index: int
    thinking: str


@dataclass(slots=True)
class SignatureDelta:
    index: int
    signature: str


@dataclass(slots=True)
class CitationDelta:
    """A source the open text block cites (it applies to the whole block)."""

    index: int
    citation: Citation


@dataclass(slots=True)
class BlockStop:
    index: int


@dataclass(slots=True)
class Finish:
    stop_reason: StopReason
    usage: Usage
    stop_sequence: str | None = None


@dataclass(slots=True)
class StreamError:
    """Something failed after the stream began; ``kind`` is a key of ``errors.ERROR_KINDS``."""

    kind: str
    message: str


Event = (
    Start
    | BlockStart
    | TextDelta
    | ToolArgsDelta
    | ThinkingDelta
    | SignatureDelta
    | CitationDelta
    | BlockStop
    | Finish
    | StreamError
)
