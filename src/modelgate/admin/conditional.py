"""Conditional report answers: an ``ETag`` on each usage report, and ``304 Not Modified`` for a
caller whose ``If-None-Match`` names the answer it would get (RFC 9110 §8.8.3, §13.1.2).

A dashboard that polls the reports sends back the tag of the last answer of each; when nothing in
it changed, the answer is 304 with no body, so neither side encodes, sends, parses or draws the
same report again. The tag is a digest of the exact body this caller would be sent, and of who the caller is (the
admin token's id, or the signed-in person's): it is computed after the caller's scope has been
applied (an account's caller only ever gets its own account's figures), so a 304 tells a caller
only that their own answer is the one they already hold, and a tag taken from anyone else's
answer matches nothing, even an identical body. The report is still read to compute the tag: the
tag is exact, never a guess from a clock or a counter.

Answers keep ``cache-control: no-store`` (no cache stores a report; the dashboard keeps the last
body of each report in memory only). ``If-None-Match`` is read leniently: ``*``, a list of tags,
weak or strong (compared weakly, as the RFC says for ``If-None-Match``); anything unreadable
matches nothing and the full answer is sent.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from modelgate.admin.http import NO_STORE

#: Bytes of digest in a tag (128 bits: two different answers never share one in practice).
TAG_BYTES = 16
#: An ``If-None-Match`` longer than this is not read (it matches nothing): a real client sends
#: one tag, and the server's own header limit bounds it anyway.
MAX_IF_NONE_MATCH = 4096


def entity_tag(caller: str, body: bytes) -> str:
    """The strong tag of ``body`` as answered to ``caller``: a quoted hex digest of both."""
    digest = hashlib.blake2b(body, digest_size=TAG_BYTES, person=b"modelgate-report")
    digest.update(b"\x00" + caller.encode())
    return '"' + digest.hexdigest() + '"'


def matches(if_none_match: str | None, tag: str) -> bool:
    """Whether an ``If-None-Match`` value names ``tag`` (weak comparison) or is ``*``."""
    if not if_none_match or len(if_none_match) > MAX_IF_NONE_MATCH:
        return False
    for item in if_none_match.split(","):
        candidate = item.strip()
        if candidate == "*":
            return True
        if candidate.startswith("W/"):
            candidate = candidate[2:]
        if candidate == tag:
            return True
    return False


def conditional_json(request: Request, caller: str, data: Any) -> Response:
    """``data`` as JSON with its ``ETag`` for ``caller`` (the admin token's id, or the signed-in
    person's), or 304 (no body, the same tag) when the request's ``If-None-Match`` names it."""
    body = orjson.dumps(data)
    tag = entity_tag(caller, body)
    headers = {**NO_STORE, "etag": tag}
    if matches(request.headers.get("if-none-match"), tag):
        return Response(status_code=304, headers=headers)
    return Response(body, status_code=200, media_type="application/json", headers=headers)


def described_conditional(operation: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI ``operation`` (``admin.openapi``) answered by ``conditional_json``: its
    ``If-None-Match`` header, the ``ETag`` of its 200 and its 304."""
    ok = operation["responses"]["200"]
    return {
        **operation,
        "parameters": [
            *operation["parameters"],
            {
                "name": "If-None-Match",
                "in": "header",
                "required": False,
                "schema": {"type": "string"},
                "description": "the ETag of the last answer: 304 while it is unchanged",
            },
        ],
        "responses": {
            **operation["responses"],
            "200": {**ok, "headers": {"ETag": {"schema": {"type": "string"}}}},
            "304": {
                "description": "Not Modified: the answer is the one the If-None-Match tag names (no body)",
                "headers": {"ETag": {"schema": {"type": "string"}}},
            },
        },
    }
