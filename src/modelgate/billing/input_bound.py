"""The upper bound on a request's input tokens that the hold is computed from (docs/billing.md).

Text: a BPE token is at least one byte of the JSON body, so the body's bytes bound its text.
Media are priced by what the provider sees, not by their bytes: an inline image by its pixels
(``ceil(pixels / image_pixels_per_token) + image_base_tokens``), an inline PDF by its pages
(``pages x tokens_per_pdf_page``), and media the gateway cannot measure (by URL, by file id,
unreadable) at the configured allowances. The base64 bytes of measured media are not counted as
text. Callers cap the result at the model's context window, which no provider bills beyond.

Two allowances cover what a provider reads beyond the body's own text. The body's JSON framing
(braces, keys, quotes: some 25 bytes a message) already outweighs the few tokens a provider frames
each message with, so every request gets only a small fixed allowance for the prompt's own start
and end (``overhead_tokens``). A request that offers tools or asks for structured output makes the
provider add a prompt of its own (Anthropic documents 313-346 tokens for its tool-use prompt;
OpenAI renders function schemas into its prompt), so only such a request gets the larger
``tool_overhead_tokens`` on top. Before, every request paid the larger allowance, which stranded
the last few thousand micro-credits of every cap.

Media are found by their shape anywhere in the body (Messages ``image``/``document`` blocks,
Chat ``image_url``/``file`` parts, Responses ``input_image``/``input_file`` items), so nothing
in another field's clothing escapes the count; a body with no media marker at all skips the walk.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from modelgate.billing.media import image_pixels, pdf_pages

#: The ``type`` of every object ``_MediaCount`` prices; a body without one has no media to count.
MEDIA_TYPES = frozenset({"image", "document", "image_url", "input_image", "file", "input_file"})
_MEDIA_MARKER = re.compile(rb'"(?:image|document|image_url|input_image|input_file|file|file_data)"')
_DATA_URL = re.compile(r"^data:([\w.+/-]+);base64,", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class MediaRules:
    overhead_tokens: int
    unknown_image_tokens: int
    image_pixels_per_token: int
    image_base_tokens: int
    tokens_per_pdf_page: int
    unknown_pdf_pages: int
    #: Added when the request offers tools or asks for structured output (``adds_a_prompt``).
    tool_overhead_tokens: int = 0


#: Top-level fields that make the provider add a prompt of its own when they carry anything:
#: tools (Messages, Chat, Responses), Chat's legacy functions, Messages' MCP servers, and the
#: structured-output formats of each dialect.
_PROMPT_FIELDS = ("tools", "functions", "mcp_servers", "output_format")
_FORMAT_FIELDS = (
    ("response_format", None),
    ("text", "format"),
    ("output_config", "format"),
    # generationConfig's schemas, in both proto3 JSON spellings (lowerCamelCase and snake_case).
    ("generationConfig", "responseSchema"),
    ("generationConfig", "responseJsonSchema"),
    ("generation_config", "response_schema"),
    ("generation_config", "response_json_schema"),
)


def adds_a_prompt(body: Any) -> bool:
    """Whether the provider reads a prompt of its own besides the body: tools or a schema."""
    if not isinstance(body, dict):
        return False
    if any(body.get(name) for name in _PROMPT_FIELDS):
        return True
    for name, inner in _FORMAT_FIELDS:
        value = body.get(name)
        if inner is not None:
            value = value.get(inner) if isinstance(value, dict) else None
        if value and not (isinstance(value, dict) and value.get("type") == "text"):
            return True
    return False


def allowance(body: Any, rules: MediaRules) -> int:
    """Tokens held beyond the body's text and media (the two allowances above)."""
    return rules.overhead_tokens + (rules.tool_overhead_tokens if adds_a_prompt(body) else 0)


def input_bound(raw: bytes, body: Any, rules: MediaRules, *, media: bool = True) -> int:
    """Upper bound on the input tokens of the request whose body is ``raw`` (parsed: ``body``).
    ``media=False``: a walk over ``body`` found no object whose ``type`` is in ``MEDIA_TYPES``
    (``gateway.body.shape``), so nothing is priced as media and the marker search is skipped."""
    if not media or _MEDIA_MARKER.search(raw) is None:
        return len(raw) + allowance(body, rules)
    count = _MediaCount(rules)
    count.walk(body)
    return max(0, len(raw) - count.measured_bytes) + allowance(body, rules) + count.tokens


class _MediaCount:
    def __init__(self, rules: MediaRules) -> None:
        self.rules = rules
        self.tokens = 0
        #: Base64 characters of media priced by content, not counted as text.
        self.measured_bytes = 0

    def walk(self, body: Any) -> None:
        stack = [body]
        while stack:
            item = stack.pop()
            if isinstance(item, list):
                stack.extend(i for i in item if isinstance(i, dict | list))
            elif isinstance(item, dict) and not self._media(item):
                stack.extend(v for v in item.values() if isinstance(v, dict | list))

    def _media(self, item: dict[str, Any]) -> bool:
        """Price ``item`` if it is a media part; True when it was one."""
        kind = item.get("type")
        if kind in ("image", "document"):
            self._anthropic(kind, item.get("source"))
        elif kind == "image_url" or (kind == "input_image" and "image_url" in item):
            url = item.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            self._image(url)
        elif kind == "input_image":
            self._image(None)  # by file id
        elif kind == "file":
            file = item.get("file")
            self._document((file or {}).get("file_data") if isinstance(file, dict) else None)
        elif kind == "input_file":
            self._document(item.get("file_data"))
        else:
            return False
        return True

    def _anthropic(self, kind: str, source: Any) -> None:
        source = source if isinstance(source, dict) else {}
        data = source.get("data") if source.get("type") == "base64" else None
        if kind == "image":
            self._priced_image(data if isinstance(data, str) else None)
        elif source.get("type") in ("text", "content"):
            return  # plain text documents are text: their bytes already count
        else:
            self._priced_pdf(data if isinstance(data, str) else None)

    def _image(self, url: Any) -> None:
        data = _base64_of(url)
        self._priced_image(data)

    def _document(self, file_data: Any) -> None:
        self._priced_pdf(_base64_of(file_data))

    def _priced_image(self, data: str | None) -> None:
        rules = self.rules
        pixels = image_pixels(data) if data else None
        if pixels is None:
            self.tokens += rules.unknown_image_tokens
            return
        self.tokens += math.ceil(pixels / rules.image_pixels_per_token) + rules.image_base_tokens
        self.measured_bytes += len(data or "")

    def _priced_pdf(self, data: str | None) -> None:
        rules = self.rules
        pages = pdf_pages(data) if data else None
        self.tokens += (pages if pages is not None else rules.unknown_pdf_pages) * rules.tokens_per_pdf_page
        if pages is not None:
            self.measured_bytes += len(data or "")


def _base64_of(value: Any) -> str | None:
    """The base64 payload of a ``data:`` URL, or None (a remote URL or no data)."""
    if not isinstance(value, str):
        return None
    match = _DATA_URL.match(value)
    return value[match.end() :] if match else None
