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

A poller that sends back the tag it got for the same URL less than ``admin.report_recheck_seconds``
ago (2 s by default) is answered 304 at once, without reading the report again (``RecentTags``):
a dashboard polling every half second reads each report about once per window instead of four
times, and sees new usage at most that late. Only such a request is: one without
``If-None-Match`` (a page load, a script), with another tag, or after the window always reads the
report, so it is exact. A 304 carries no data (it tells the caller that the answer they hold is
still theirs), and the caller has been authenticated first, as for every admin request.

Answers keep ``cache-control: no-store`` (no cache stores a report; the dashboard keeps the last
body of each report in memory only). ``If-None-Match`` is read leniently: ``*``, a list of tags,
weak or strong (compared weakly, as the RFC says for ``If-None-Match``); anything unreadable
matches nothing and the full answer is sent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any

import orjson
from prometheus_client.core import Metric
from starlette.requests import Request
from starlette.responses import Response

from modelgate.admin.http import NO_STORE
from modelgate.telemetry.hub import Telemetry
from modelgate.telemetry.metrics import gauge, labelled_counter

#: Bytes of digest in a tag (128 bits: two different answers never share one in practice).
TAG_BYTES = 16
#: An ``If-None-Match`` longer than this is not read (it matches nothing): a real client sends
#: one tag, and the server's own header limit bounds it anyway.
MAX_IF_NONE_MATCH = 4096
#: Tags remembered per serving process (``RecentTags``): a few hundred bytes each.
MAX_RECENT_TAGS = 4096
#: A report URL (path and query) longer than this is not remembered (always read), so the tags
#: kept stay within about 4,096 x 1 KiB whatever the callers send.
MAX_RECENT_URL = 512


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
    if matches(request.headers.get("if-none-match"), tag):
        return not_modified(tag)
    return Response(body, status_code=200, media_type="application/json", headers={**NO_STORE, "etag": tag})


def not_modified(tag: str) -> Response:
    return Response(status_code=304, headers={**NO_STORE, "etag": tag})


class RecentTags:
    """The tag each caller last got for each report URL, and when (``steady`` seconds): for
    ``admin.report_recheck_seconds`` a request naming it is answered 304 without reading the
    report again. At most ``MAX_RECENT_TAGS`` are kept (the oldest answer's dropped first); one
    per serving process."""

    def __init__(self, steady: Callable[[], float], window: Callable[[], float]) -> None:
        self._steady = steady
        self._window = window
        self._tags: dict[tuple[str, str], tuple[str, float]] = {}
        #: 304s answered, by how: ``recent`` (a remembered tag, the report not read) or ``read``
        #: (the report read, its answer the caller's tag).
        self.not_modified = {"recent": 0, "read": 0}

    def collect(self) -> Iterable[Metric]:
        """For ``/metrics`` (``install``)."""
        yield labelled_counter(
            "modelgate_admin_reports_not_modified",
            "Usage report requests answered 304 Not Modified, by how: recent (the tag this caller "
            "got for the URL within admin.report_recheck_seconds; the report not read) or read.",
            ("how",),
            {(how,): n for how, n in self.not_modified.items()},
        )
        yield gauge(
            "modelgate_admin_report_tags_remembered",
            f"Report tags this process remembers for the recheck window (at most {MAX_RECENT_TAGS:,}).",
            len(self._tags),
        )

    def install(self, telemetry: Telemetry) -> None:
        """Register with the metrics page (once per gateway: ``server.app``)."""
        telemetry.metrics.collect_from(self.collect)

    @staticmethod
    def _url(request: Request) -> str:
        query = request.url.query
        return request.url.path + ("?" + query if query else "")

    def unchanged(self, request: Request, caller: str) -> Response | None:
        """304 when ``If-None-Match`` names the tag ``caller`` got for this URL within the
        window; None: the report must be read."""
        header = request.headers.get("if-none-match")
        if not header:
            return None
        key = (caller, self._url(request))
        found = self._tags.get(key)
        if found is None:
            return None
        tag, at = found
        if self._steady() - at >= self._window():
            del self._tags[key]
            return None
        if not matches(header, tag):
            return None
        self.not_modified["recent"] += 1
        return not_modified(tag)

    def answer(self, request: Request, caller: str, data: Any) -> Response:
        """``conditional_json``, its tag remembered for this caller and URL (a fresh read)."""
        response = conditional_json(request, caller, data)
        if response.status_code == 304:
            self.not_modified["read"] += 1
        url = self._url(request)
        if self._window() > 0 and len(url) <= MAX_RECENT_URL:
            key = (caller, url)
            self._tags.pop(key, None)  # re-inserted last: the dict stays oldest first
            self._tags[key] = (response.headers["etag"], self._steady())
            while len(self._tags) > MAX_RECENT_TAGS:
                del self._tags[next(iter(self._tags))]
        return response


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
