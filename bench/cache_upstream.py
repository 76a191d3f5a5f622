"""A fake upstream with a prompt cache per credential and per upstream model, for the affinity
benchmark (``bench.affinity``): Messages and Responses, whole replies.

The prompt is cut into segments (each tool, each system block, each content block of each
message; Responses: the instructions, each tool, each input item), each counted as a quarter
token per byte of its JSON without ``cache_control``. A prefix is known by the chained digest of
its segments. The cache of (credential, model):

- Messages (Anthropic's explicit caching): the longest cached prefix ending at a segment boundary
  up to the last ``cache_control`` breakpoint is read; the rest up to that breakpoint is written
  (``cache_creation_input_tokens``) and the prefix at every breakpoint is kept; what follows the
  last breakpoint is plain input.
- Responses (OpenAI's automatic caching): the longest cached prefix of at least 1,024 tokens is
  read (``input_tokens_details.cached_tokens``); the prefix at every boundary is kept; writes
  cost nothing extra.

Entries never expire (the benchmark runs for seconds). ``POST /_bench/refuse`` with
``{"credential": KEY}`` makes the upstream answer 401 to that credential from then on;
``POST /_bench/reset`` empties the caches and the refusals.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import orjson
from aiohttp import web

#: OpenAI caches prompts of at least this many tokens.
OPENAI_MIN_CACHED = 1024
SESSION = re.compile(rb"Session (\d+):")
REPLY_TEXT = "Done: I read the files, changed the function and the tests pass. " * 4


def tokens_of(value: Any) -> int:
    return max(1, len(orjson.dumps(_without_marker(value))) // 4)


def _without_marker(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_marker(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_marker(v) for v in value]
    return value


def _blocks(content: Any) -> list[Any]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])


def messages_segments(body: dict[str, Any]) -> list[tuple[Any, bool]]:
    """(segment, has a breakpoint) in cache order: tools, system, messages."""
    out: list[tuple[Any, bool]] = [(t, "cache_control" in t) for t in body.get("tools") or []]
    out += [(b, "cache_control" in b) for b in _blocks(body.get("system"))]
    for message in body.get("messages") or []:
        for block in _blocks(message.get("content")):
            marked = isinstance(block, dict) and "cache_control" in block
            out.append(({"role": message.get("role"), "block": block}, marked))
    return out


def responses_segments(body: dict[str, Any]) -> list[tuple[Any, bool]]:
    out: list[tuple[Any, bool]] = []
    if body.get("instructions"):
        out.append((body["instructions"], False))
    out += [(t, False) for t in body.get("tools") or []]
    items = body.get("input")
    items = [{"role": "user", "content": items}] if isinstance(items, str) else items or []
    out += [(item, False) for item in items]
    return out


def prefixes(segments: Iterable[tuple[Any, bool]]) -> list[tuple[bytes, int, bool]]:
    """Per boundary: the prefix's chained digest, its cumulative tokens, a breakpoint there."""
    digest, total, out = b"", 0, []
    for segment, marked in segments:
        digest = hashlib.blake2b(digest + orjson.dumps(_without_marker(segment)), digest_size=16).digest()
        total += tokens_of(segment)
        out.append((digest, total, marked))
    return out


class CachingUpstream:
    def __init__(self) -> None:
        self.caches: dict[tuple[str, str], set[bytes]] = defaultdict(set)
        self.refused: set[str] = set()
        #: (credential, the session's number) of every answered request: which credential served
        #: which session (the benchmark's prompts name their session as "Session N:").
        self.served: list[tuple[str, int]] = []
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/_bench/refuse", self._refuse)
        app.router.add_post("/_bench/reset", self._reset)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.base_url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def reset(self) -> None:
        self.caches.clear()
        self.refused.clear()
        self.served.clear()

    def note(self, credential: str, raw: bytes) -> None:
        found = SESSION.search(raw)
        if found:
            self.served.append((credential, int(found.group(1))))

    async def _refuse(self, request: web.Request) -> web.Response:
        self.refused.add((await request.json())["credential"])
        return web.json_response({})

    async def _reset(self, request: web.Request) -> web.Response:
        self.reset()
        return web.json_response({})

    @staticmethod
    def _credential(request: web.Request) -> str:
        return request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix(
            "Bearer "
        )

    async def _messages(self, request: web.Request) -> web.Response:
        credential = self._credential(request)
        if credential in self.refused:
            error = {
                "type": "error",
                "error": {"type": "authentication_error", "message": "invalid x-api-key"},
            }
            return web.json_response(error, status=401)
        raw = await request.read()
        self.note(credential, raw)
        body = orjson.loads(raw)
        cache = self.caches[(credential, body["model"])]
        points = prefixes(messages_segments(body))
        marks = [i for i, (_, _, marked) in enumerate(points) if marked]
        last_mark = marks[-1] if marks else -1
        read_at = max((i for i in range(last_mark + 1) if points[i][0] in cache), default=-1)
        read = points[read_at][1] if read_at >= 0 else 0
        written = points[last_mark][1] - read if last_mark > read_at else 0
        for i in marks:
            cache.add(points[i][0])
        total = points[-1][1] if points else 0
        usage = {
            "input_tokens": total - read - written,
            "output_tokens": tokens_of(REPLY_TEXT),
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
        }
        reply = {
            "id": f"msg_cache{next(self._ids):08d}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [{"type": "text", "text": REPLY_TEXT}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": usage,
        }
        return web.Response(body=orjson.dumps(reply), content_type="application/json")

    async def _responses(self, request: web.Request) -> web.Response:
        credential = self._credential(request)
        if credential in self.refused:
            error = {
                "error": {"type": "invalid_request_error", "code": "invalid_api_key", "message": "bad key"}
            }
            return web.json_response(error, status=401)
        raw = await request.read()
        self.note(credential, raw)
        body = orjson.loads(raw)
        cache = self.caches[(credential, body["model"])]
        points = prefixes(responses_segments(body))
        cached = [total for digest, total, _ in points if digest in cache and total >= OPENAI_MIN_CACHED]
        read = max(cached, default=0)
        cache.update(digest for digest, _, _ in points)
        total = points[-1][1] if points else 0
        output = tokens_of(REPLY_TEXT)
        number = next(self._ids)
        reply = {
            "id": f"resp_cache{number:08d}",
            "object": "response",
            "created_at": 1700000000,
            "status": "completed",
            "model": body["model"],
            "output": [
                {
                    "type": "message",
                    "id": f"msg_cache{number:08d}",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": REPLY_TEXT, "annotations": []}],
                }
            ],
            "usage": {
                "input_tokens": total,
                "input_tokens_details": {"cached_tokens": read},
                "output_tokens": output,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": total + output,
            },
        }
        return web.Response(body=orjson.dumps(reply), content_type="application/json")
