"""Gemini ``contents`` -> IR messages: roles, parts, function calls and their responses.

Invariants:
- ``user`` (and the older ``function``/``tool`` roles, which carry function responses) is the
  IR ``user``; ``model`` is ``assistant``; a content without a role is a user turn, as the API
  reads a single-turn request.
- A ``functionCall`` without an ``id`` (the Gemini Developer API sends none) gets one derived from
  its place in the conversation (``call_<turn>_<part>``): the same history always gives the same
  ids, so an upstream's prompt cache keeps matching. A ``functionResponse`` without an ``id``
  answers the earliest unanswered call of that name.
- Consecutive contents of one role are one IR turn (a chat session keeps a streamed answer as
  one content per chunk), and consecutive thought parts one thinking block up to the part that
  carries its signature.
- ``thoughtSignature`` is bytes on the wire (base64); the IR keeps a signature as text. The
  encoders send the base64 of the signature's UTF-8, so what comes back decodes to it exactly;
  a signature that does not decode to text came from elsewhere and is dropped.
"""

from __future__ import annotations

import base64
import binascii
from collections import defaultdict, deque
from typing import Any, Literal

import orjson

from modelgate import ir
from modelgate.formats.gemini.wire import bool_field, get, invalid, list_field, obj_field, str_field
from modelgate.formats.jsonutil import Json

_ROLES: dict[str | None, str] = {
    None: "user",
    "user": "user",
    "function": "user",
    "tool": "user",
    "model": "assistant",
}
#: Hosts whose files only Google can read: the Files API and Cloud Storage.
_GOOGLE_ONLY = ("https://generativelanguage.googleapis.com/", "gs://")
_VIDEO_HOSTS = ("https://www.youtube.com/", "https://youtube.com/", "https://youtu.be/")
#: Data fields of a ``Part`` with no IR equivalent, refused by name.
_UNSUPPORTED_DATA = ("executableCode", "codeExecutionResult", "toolCall", "toolResponse")
#: URL-safe base64 -> the standard alphabet.
_STANDARD_BASE64 = str.maketrans("-_", "+/")


def signature_text(value: Any) -> str | None:
    """A ``thoughtSignature`` as the IR's signature text (see the module invariants)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        raw = base64.b64decode(value.translate(_STANDARD_BASE64) + "==", validate=False)
        return raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None


def signature_wire(signature: str) -> str:
    return base64.b64encode(signature.encode("utf-8")).decode("ascii")


class _Calls:
    """Unanswered function calls by name, in order, for responses that name no id."""

    def __init__(self) -> None:
        self._open: defaultdict[str, deque[str]] = defaultdict(deque)

    def called(self, name: str, call_id: str) -> None:
        self._open[name].append(call_id)

    def answer(self, name: str, call_id: str | None, param: str) -> str:
        waiting = self._open[name]
        if call_id is not None:
            if call_id in waiting:
                waiting.remove(call_id)
            return call_id
        if not waiting:
            raise invalid(
                f"{param}: functionResponse for {name!r} has no id and answers no earlier functionCall "
                "of that name",
                param,
            )
        return waiting.popleft()


def _media(blob: Json, param: str) -> tuple[str, str]:
    """(media type, standard base64 data). The SDK writes bytes in the URL-safe alphabet, which
    Google accepts and the other providers do not: the IR holds the standard one."""
    mime = str_field(blob, "mimeType", f"{param}.mimeType")
    data = str_field(blob, "data", f"{param}.data")
    if mime is None or data is None:
        raise invalid(f"{param}: mimeType and data are required", param)
    return mime.split(";")[0].strip().lower(), data.translate(_STANDARD_BASE64)


def _inline(blob: Json, param: str) -> ir.ImagePart | ir.DocumentPart:
    mime, data = _media(blob, param)
    if mime.startswith("image/"):
        return ir.ImagePart(media_type=mime, data=data)
    if mime == "application/pdf":
        return ir.DocumentPart(media_type=mime, data=data)
    if mime.startswith("text/"):
        try:
            text = base64.b64decode(data, validate=True).decode("utf-8")
        except (binascii.Error, ValueError) as exc:
            raise invalid(f"{param}.data: expected base64 of UTF-8 text", f"{param}.data") from exc
        return ir.DocumentPart(text=text)
    raise invalid(
        f"{param}.mimeType: {mime} is not supported by this gateway (images, PDF and text only)",
        f"{param}.mimeType",
    )


def _file(ref: Json, param: str) -> ir.ImagePart | ir.DocumentPart:
    """A ``fileData`` reference: public http(s) images and PDFs are passed on by URL (the
    upstream fetches them); files only Google can read are refused."""
    uri = str_field(ref, "fileUri", f"{param}.fileUri")
    if uri is None:
        raise invalid(f"{param}.fileUri: required string", f"{param}.fileUri")
    mime = (str_field(ref, "mimeType", f"{param}.mimeType") or "").split(";")[0].strip().lower()
    if uri.startswith(_GOOGLE_ONLY):
        raise invalid(
            f"{param}.fileUri: files in the Gemini Files API or Cloud Storage cannot be read through "
            "this gateway; send the content inline as inlineData",
            f"{param}.fileUri",
        )
    if not uri.startswith(("https://", "http://")) or uri.startswith(_VIDEO_HOSTS):
        raise invalid(
            f"{param}.fileUri: only http(s) URLs of images and PDFs are supported", f"{param}.fileUri"
        )
    if mime.startswith("image/"):
        return ir.ImagePart(url=uri)
    if mime == "application/pdf":
        return ir.DocumentPart(url=uri)
    raise invalid(
        f"{param}.mimeType: fileData must be an image or a PDF (got {mime or 'no mimeType'})",
        f"{param}.mimeType",
    )


def _result_media(parts: list[Any], param: str) -> list[ir.TextPart | ir.ImagePart]:
    """The multimodal ``functionResponse.parts`` (images only in the IR's tool results)."""
    out: list[ir.TextPart | ir.ImagePart] = []
    for i, part in enumerate(parts):
        where = f"{param}.{i}"
        if not isinstance(part, dict):
            raise invalid(f"{where}: expected an object", where)
        blob = obj_field(part, "inlineData", f"{where}.inlineData")
        decoded = _inline(blob, f"{where}.inlineData") if blob is not None else None
        if not isinstance(decoded, ir.ImagePart):
            raise invalid(f"{where}: only inline images are supported in function responses", where)
        out.append(decoded)
    return out


def _function_response(part: Json, param: str, calls: _Calls) -> ir.ToolResultPart:
    name = str_field(part, "name", f"{param}.name")
    if not name:
        raise invalid(f"{param}.name: required string", f"{param}.name")
    call_id = calls.answer(name, str_field(part, "id", f"{param}.id") or None, param)
    response = get(part, "response", param)
    if response is None:
        response = {}
    if not isinstance(response, dict):
        raise invalid(f"{param}.response: expected an object", f"{param}.response")
    content: list[ir.TextPart | ir.ImagePart] = [ir.TextPart(orjson.dumps(response).decode())]
    extra = list_field(part, "parts", f"{param}.parts")
    if extra:
        content.extend(_result_media(extra, f"{param}.parts"))
    # The SDK reports a failed function as {"error": ...}: the IR's error result.
    is_error = set(response) == {"error"}
    return ir.ToolResultPart(call_id, content, is_error=is_error)


def _function_call(part: Json, param: str, call_id: str, calls: _Calls) -> ir.ToolUsePart:
    name = str_field(part, "name", f"{param}.name")
    if not name:
        raise invalid(f"{param}.name: required string", f"{param}.name")
    args = get(part, "args", param)
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise invalid(f"{param}.args: expected an object", f"{param}.args")
    given = str_field(part, "id", f"{param}.id")
    call = ir.ToolUsePart(given or call_id, name, args)
    calls.called(name, call.id)
    return call


def _part(part: Any, param: str, turn: int, index: int, calls: _Calls) -> ir.Part | None:
    if not isinstance(part, dict):
        raise invalid(f"{param}: expected an object", param)
    text = str_field(part, "text", f"{param}.text")
    if text is not None:
        if bool_field(part, "thought", f"{param}.thought"):
            return ir.ThinkingPart(text, signature_text(get(part, "thoughtSignature")))
        return ir.TextPart(text)
    blob = obj_field(part, "inlineData", f"{param}.inlineData")
    if blob is not None:
        return _inline(blob, f"{param}.inlineData")
    ref = obj_field(part, "fileData", f"{param}.fileData")
    if ref is not None:
        return _file(ref, f"{param}.fileData")
    call = obj_field(part, "functionCall", f"{param}.functionCall")
    if call is not None:
        return _function_call(call, f"{param}.functionCall", f"call_{turn}_{index}", calls)
    answer = obj_field(part, "functionResponse", f"{param}.functionResponse")
    if answer is not None:
        return _function_response(answer, f"{param}.functionResponse", calls)
    for name in _UNSUPPORTED_DATA:
        if get(part, name) is not None:
            raise invalid(f"{param}.{name}: not supported by this gateway", f"{param}.{name}")
    if get(part, "thoughtSignature") is not None or get(part, "thought") is not None:
        return None  # a signature-only part: nothing the IR's upstreams can use
    raise invalid(
        f"{param}: a part needs text, inlineData, fileData, functionCall or functionResponse", param
    )


def _joined_thoughts(parts: list[ir.Part]) -> list[ir.Part]:
    """Consecutive thought parts as one thinking block until one carries a signature: a streamed
    answer comes back as its chunks' parts (the thought text in pieces, the signature, which
    belongs to the whole text, on the last), and an upstream checks the signature against the
    whole text."""
    out: list[ir.Part] = []
    for part in parts:
        last = out[-1] if out else None
        if isinstance(part, ir.ThinkingPart) and isinstance(last, ir.ThinkingPart) and last.signature is None:
            out[-1] = ir.ThinkingPart(last.thinking + part.thinking, part.signature)
        else:
            out.append(part)
    return out


def decode_contents(contents: list[Any], param: str = "contents") -> list[ir.Message]:
    calls = _Calls()
    messages: list[ir.Message] = []
    for turn, content in enumerate(contents):
        where = f"{param}.{turn}"
        if not isinstance(content, dict):
            raise invalid(f"{where}: expected an object", where)
        role = get(content, "role", where)
        if not (role is None or isinstance(role, str)) or role not in _ROLES:
            raise invalid(f"{where}.role: expected user or model, got {role!r}", f"{where}.role")
        parts = list_field(content, "parts", f"{where}.parts")
        if not parts:
            raise invalid(f"{where}.parts: required non-empty list", f"{where}.parts")
        decoded = (_part(p, f"{where}.parts.{i}", turn, i, calls) for i, p in enumerate(parts))
        kept = [p for p in decoded if p is not None]
        ir_role: Literal["user", "assistant"] = "assistant" if _ROLES[role] == "assistant" else "user"
        if messages and messages[-1].role == ir_role:
            messages[-1].content.extend(kept)
        else:
            messages.append(ir.Message(ir_role, kept))
    for message in messages:
        message.content = _joined_thoughts(message.content)
    return messages


def system_texts(value: Any, param: str = "systemInstruction") -> list[str]:
    """``systemInstruction``: a content of text parts (a bare string is accepted too)."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, dict):
        raise invalid(f"{param}: expected a content object", param)
    parts = list_field(value, "parts", f"{param}.parts") or []
    texts = []
    for i, part in enumerate(parts):
        where = f"{param}.parts.{i}"
        text = str_field(part, "text", f"{where}.text") if isinstance(part, dict) else None
        if text is None:
            raise invalid(f"{where}: only text parts are supported in systemInstruction", where)
        texts.append(text)
    return texts
