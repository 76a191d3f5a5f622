"""The session key of a request: what keeps one conversation on one deployment and credential.

First found of (docs/upstreams.md, "Session affinity"):

1. the ``x-claude-code-session-id`` header (Claude Code);
2. the ``session-id`` / ``session_id`` header (Codex and others);
3. the body's ``prompt_cache_key`` (Responses, Chat; Codex sends its thread id);
4. the body's ``metadata.user_id`` (Messages; Claude Code's carries its session id);
5. otherwise a fingerprint of the request's stable prefix: the system prompt (``system``,
   ``instructions``, Gemini's ``systemInstruction``, leading system/developer messages), the
   tools' names and the whole first user turn (every leading user message, item or Gemini
   content, all their blocks or parts). A conversation resends these unchanged every turn, so
   every turn has the same fingerprint; the first user message alone is not enough (Claude Code
   puts CLAUDE.md there, the same in every session of a project), nor is anything up to a moving
   cache breakpoint (its place changes every turn). ``cache_control`` markers are left out for
   the same reason.

The key is always scoped by the gateway key's id, so one tenant's header cannot steer (or read
the pins of) another tenant's sessions. Keys are 16-byte digests: a client's identifiers are
never kept.

Cost: no re-serialisation of the body. Strings longer than ``_SAMPLE * 2`` are hashed by their
length, head and tail only: two conversations that differ only in the middle of a long text share
a fingerprint, which costs nothing but spread (their prefixes are nearly alike anyway).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

#: Session headers in order of preference.
SESSION_HEADERS = ("x-claude-code-session-id", "session-id", "session_id")
#: The same as raw header names (lower case, as ASGI servers give them), in order.
_RAW_SESSION_HEADERS = tuple(name.encode() for name in SESSION_HEADERS)
#: Characters of a long string's head and of its tail that the fingerprint hashes.
_SAMPLE = 256
#: Identifiers longer than this are hashed by their first characters only.
_MAX_ID = 512
#: Claude Code's first system block is a billing marker that may change between requests.
_VOLATILE_SYSTEM = "x-anthropic-billing-header"

SessionKey = bytes


def session_key(
    scope: str, headers: Mapping[str, str], body: Mapping[str, Any], hint: bytes | None = None
) -> SessionKey:
    """The request's session key, scoped by ``scope`` (the gateway key's id). ``hint`` is
    ``body_session(body)`` computed earlier (a large body, analysed in a worker)."""
    value = _session_header(headers)
    if value:
        return _scoped(scope, b"h", value[:_MAX_ID].encode("utf-8", "replace"))
    raw = hint if hint is not None else body_session(body)
    return _scoped(scope, b"b", raw)


def _session_header(headers: Mapping[str, str]) -> str | None:
    """The first session header in ``SESSION_HEADERS`` order. Starlette's ``Headers`` (raw
    byte pairs) is scanned once instead of once per name: most requests carry none."""
    raw = getattr(headers, "raw", None)
    if isinstance(raw, list):
        found: dict[bytes, bytes] = {}
        for name, value in raw:
            if name in _RAW_SESSION_HEADERS and name not in found:
                found[name] = value
        if not found:
            return None
        for name in _RAW_SESSION_HEADERS:
            if found.get(name):
                return found[name].decode("latin-1")
        return None
    for key in SESSION_HEADERS:
        value = headers.get(key)
        if value:
            return value
    return None


def body_session(body: Mapping[str, Any]) -> bytes:
    """The unscoped key the body gives: ``prompt_cache_key``, ``metadata.user_id``, else the
    fingerprint of its stable prefix."""
    cache_key = body.get("prompt_cache_key")
    if isinstance(cache_key, str) and cache_key:
        return b"k" + cache_key[:_MAX_ID].encode("utf-8", "replace")
    metadata = body.get("metadata")
    if isinstance(metadata, dict):
        user = metadata.get("user_id")
        if isinstance(user, str) and user:
            return b"u" + user[:_MAX_ID].encode("utf-8", "replace")
    return b"p" + prefix_fingerprint(body)


def prefix_fingerprint(body: Mapping[str, Any]) -> bytes:
    """A digest of the system prompt, the tools' names and the first user turn (any format)."""
    feed = _Feed()
    feed.value(body.get("system"), system=True)
    feed.value(body.get("instructions"))
    gemini_system = body.get("systemInstruction")
    if isinstance(gemini_system, dict):
        feed.value(gemini_system.get("parts"))
    tools = body.get("tools")
    if isinstance(tools, list):
        for tool in tools:
            if isinstance(tool, dict):
                function = tool.get("function")
                name = function.get("name") if isinstance(function, dict) else tool.get("name")
                feed.text(f"tool:{name}:{tool.get('type')}")
                declared = tool.get("functionDeclarations")  # Gemini
                if isinstance(declared, list):
                    feed.fields([d.get("name") for d in declared if isinstance(d, dict)])
    turns = body.get("messages")
    if turns is None:
        turns = body.get("input")
    if turns is None:
        turns = body.get("contents")  # Gemini: role "user" / "model", "parts"
    if isinstance(turns, str):
        feed.text(turns)
    elif isinstance(turns, list):
        _first_turn(feed, turns)
    # One hash call over the joined parts: the per-call overhead outweighs the bytes here.
    return hashlib.blake2b("\x1e".join(feed.parts).encode("utf-8", "replace"), digest_size=16).digest()


def _first_turn(feed: _Feed, turns: list[Any]) -> None:
    """Leading system/developer messages, then every user message up to the first other one."""
    seen_user = False
    for turn in turns:
        if not isinstance(turn, dict):
            return
        role = turn.get("role")
        kind = turn.get("type", "message")
        if kind != "message":
            return
        if role == "user":
            seen_user = True
        elif seen_user or role not in ("system", "developer"):
            return
        feed.text(f"role:{role}")
        feed.value(turn.get("content") if "content" in turn else turn.get("parts"))


class _Feed:
    """Collects the parts of a JSON value that identify a prompt (long strings sampled)."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[str] = []

    def text(self, text: str) -> None:
        size = len(text)
        if size > 2 * _SAMPLE:
            text = f"{text[:_SAMPLE]}\x00{size}\x00{text[-_SAMPLE:]}"
        self.parts.append(text)

    def value(self, value: Any, *, system: bool = False) -> None:
        if isinstance(value, str):
            self.text(value)
        elif isinstance(value, list):
            for block in value:
                self.block(block, system=system)

    def block(self, block: Any, *, system: bool = False) -> None:
        if isinstance(block, str):
            self.text(block)
            return
        if not isinstance(block, dict):
            return
        text = block.get("text")
        if isinstance(text, str):
            if system and text.startswith(_VOLATILE_SYSTEM):
                return
            self.text(text)
            return
        content = block.get("content")
        if isinstance(content, (str, list)):  # tool results, nested items
            self.text(f"block:{block.get('type')}")
            self.value(content)
            return
        # Images, documents and the like: their fields except the moving cache marker, each
        # string sampled (a base64 image is not hashed whole). Rare in a first turn.
        self.fields(block)

    def fields(self, value: Any) -> None:
        if isinstance(value, str):
            self.text(value)
        elif isinstance(value, dict):
            for key in sorted(value):
                if key != "cache_control":
                    self.text(key)
                    self.fields(value[key])
        elif isinstance(value, list):
            for item in value:
                self.fields(item)
        else:
            self.text(repr(value))


def _scoped(scope: str, source: bytes, raw: bytes) -> SessionKey:
    digest = hashlib.blake2b(digest_size=16)
    digest.update(scope.encode("utf-8", "replace"))
    digest.update(b"\x00")
    digest.update(source)
    digest.update(raw)
    return digest.digest()
